"""Anthropic's Messages API on the server: POST /v1/messages (whole or streamed) and
/v1/messages/count_tokens, each body turned into a chat request (anthropic.py) and answered by the
same engine, template, tool reader, constraints and prompt cache as /v1/chat/completions.

A `?beta=true` query, as Claude Code sends it, changes nothing. While a long prompt is read the
stream sends Anthropic's `ping` event now and then, so that the client sees a live server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

from .. import defaults
from . import anthropic, anthropic_render
from .answers import CLIENT_GONE, ApiError, ChatAnswer, ClientGone, prompt_tokens, with_keepalive
from .schemas import ChatRequest, new_id, unknown_fields
from .service import Service
from .validation import chat_request

ROUTE = "/v1/messages"


def converted(service: Service, convert, body) -> ChatRequest:
    """`convert(body)` as a chat request; hosted tools it left out are named in the log once."""
    try:
        chat, left_out = convert(body)
    except anthropic.AdapterError as error:
        where = f"{error.param}: " if error.param else ""  # Anthropic's envelope has no field for it
        raise ApiError(400, where + error.message, "invalid_request_error", error.param) from None
    if left_out:
        service.note_left_out(left_out, ROUTE)
    return chat_request(chat)


def install(app: FastAPI, service: Service) -> None:
    """Add the Messages API's routes to `app`."""

    @app.post(ROUTE)
    async def messages(body: anthropic.MessagesRequest, request: Request):
        service.note_unknown(unknown_fields(body), ROUTE)
        chat = converted(service, anthropic.chat_body, body)
        message_id = new_id("msg").replace("-", "_")
        model = body.model or service.model_name
        try:
            answer = await ChatAnswer.start(service, chat, request)
            if not chat.stream:
                whole = await answer.whole(request)
        except ClientGone:
            return Response(status_code=CLIENT_GONE)
        if not chat.stream:
            return anthropic_render.message_response(
                message_id=message_id,
                model=model,
                message=whole.message,
                finish_reason=whole.end.finish_reason,
                usage=whole.end.report.get("usage", {}),
                stop_sequence=whole.end.stop_sequence,
            )
        stream = anthropic_render.MessageStream(message_id=message_id, model=model, input_tokens=answer.prompt_tokens)

        async def events() -> AsyncIterator[str]:
            try:
                for name, data in stream.start():
                    yield anthropic_render.sse(name, data)
                async for piece in with_keepalive(answer.pieces(), defaults.SERVE_KEEPALIVE_S):
                    if piece is None:
                        yield anthropic_render.sse("ping", {"type": "ping"})
                        continue
                    out = [event for delta in piece.deltas for event in stream.delta(delta)]
                    if piece.end is not None:
                        end = piece.end
                        out += stream.finish(end.finish_reason, end.report.get("usage", {}), end.stop_sequence)
                    for name, data in out:
                        yield anthropic_render.sse(name, data)
            except ApiError as error:
                for name, data in stream.error(error.message, anthropic_render.error_kind(error.status)):
                    yield anthropic_render.sse(name, data)
            finally:
                answer.cancel()

        return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    @app.post(ROUTE + "/count_tokens")
    async def count_tokens(body: anthropic.CountTokensRequest):
        service.note_unknown(unknown_fields(body), ROUTE + "/count_tokens")
        return {"input_tokens": await prompt_tokens(service, converted(service, anthropic.count_body, body))}
