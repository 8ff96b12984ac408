"""OpenAI's Responses API on the server: POST /v1/responses (whole or streamed) and
/v1/responses/input_tokens, each body turned into a chat request (responses.py) and answered by the
same engine, template, tool reader, constraints and prompt cache as /v1/chat/completions.

Stateless as Codex uses it (`store: false`, the whole conversation in `input`), with a bounded
store in memory of recent conversations for `previous_response_id`. While a long prompt is read
the stream sends an SSE comment now and then, so that the client sees a live server.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

from .. import defaults
from . import responses, responses_render, responses_request
from .answers import CLIENT_GONE, ApiError, ChatAnswer, ClientGone, prompt_tokens, renamed, with_keepalive
from .schemas import unknown_fields
from .service import Service
from .validation import chat_request

ROUTE = "/v1/responses"
CHAT_NAMES = {  # chat's fields that name the Responses request's own in an error
    "messages": "input",
    "response_format": "text.format",
    "max_tokens": "max_output_tokens",
    "tool_choice": "tool_choice",
    "tools": "tools",
}
KEEPALIVE = ": keep-alive\n\n"  # an SSE comment: every client's parser skips it


def _converted(
    service: Service, store: responses.ResponseStore, body: responses_request.Prompt
) -> responses.Conversion:
    try:
        conversion = responses.chat_body(body, responses.resolve_previous(store, body))
    except responses.AdapterError as error:
        raise ApiError(400, error.message, "invalid_request_error", error.param) from None
    if conversion.left_out:
        service.note_left_out(conversion.left_out, ROUTE)
    return conversion


class Assembled:
    """A streamed answer's chat message, put together from its deltas (for the store)."""

    def __init__(self):
        self.content = ""
        self.reasoning = ""
        self.calls: dict[int, dict] = {}

    def add(self, delta: dict) -> None:
        self.content += delta.get("content") or ""
        self.reasoning += delta.get("reasoning_content") or ""
        for piece in delta.get("tool_calls") or []:
            call = self.calls.setdefault(
                piece["index"], {"id": piece.get("id"), "type": "function", "function": {"name": "", "arguments": ""}}
            )
            function = piece.get("function") or {}
            call["function"]["name"] += function.get("name") or ""
            call["function"]["arguments"] += function.get("arguments") or ""

    def message(self) -> dict:
        message: dict = {"role": "assistant", "content": self.content or None}
        if self.reasoning:
            message["reasoning_content"] = self.reasoning
        if self.calls:
            message["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        return message


def install(app: FastAPI, service: Service) -> None:
    """Add the Responses API's routes to `app`, with the store of recent conversations."""
    store = responses.ResponseStore(defaults.RESPONSES_KEPT, defaults.RESPONSES_KEPT_MIB * 2**20)

    def keep(response_id: str, body: responses_request.ResponsesRequest, conversion, message: dict) -> None:
        if body.store is not False:
            store.put(response_id, responses.messages_for_store(conversion, message))

    @app.post(ROUTE)
    async def create(body: responses_request.ResponsesRequest, request: Request):
        service.note_unknown(unknown_fields(body), ROUTE)
        conversion = _converted(service, store, body)
        response_id, created = responses_render.new_response_id(), int(time.time())
        model = body.model or service.model_name
        try:
            chat = chat_request(conversion.body)
            answer = await ChatAnswer.start(service, chat, request)
            if not chat.stream:
                whole = await answer.whole(request)
        except ClientGone:
            return Response(status_code=CLIENT_GONE)
        except ApiError as error:
            raise renamed(error, CHAT_NAMES) from None
        if not chat.stream:
            keep(response_id, body, conversion, whole.message)
            return responses_render.response_object(
                response_id=response_id,
                model=model,
                created=created,
                request=body,
                message=whole.message,
                finish_reason=whole.end.finish_reason,
                usage=whole.end.report.get("usage"),
            )
        stream = responses_render.ResponseStream(response_id=response_id, model=model, created=created, request=body)
        assembled = Assembled()

        async def events() -> AsyncIterator[str]:
            try:
                for event in stream.start():
                    yield responses_render.sse(event)
                async for piece in with_keepalive(answer.pieces(), defaults.SERVE_KEEPALIVE_S):
                    if piece is None:
                        yield KEEPALIVE
                        continue
                    out = []
                    for delta in piece.deltas:
                        assembled.add(delta)
                        out += stream.delta(delta)
                    if piece.end is not None:
                        keep(response_id, body, conversion, assembled.message())
                        out += stream.finish(piece.end.finish_reason, piece.end.report.get("usage"))
                    for event in out:
                        yield responses_render.sse(event)
            except ApiError as error:
                for event in stream.error(error.message, error.code or error.kind):
                    yield responses_render.sse(event)
            finally:
                answer.cancel()

        return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    @app.post(ROUTE + "/input_tokens")
    async def input_tokens(body: responses_request.InputTokensRequest):
        service.note_unknown(unknown_fields(body), ROUTE + "/input_tokens")
        conversion = _converted(service, store, body)
        try:
            n = await prompt_tokens(service, chat_request(conversion.body))
        except ApiError as error:
            raise renamed(error, CHAT_NAMES) from None
        return responses_render.input_tokens_body(n)
