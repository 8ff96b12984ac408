"""The HTTP face of a Service: OpenAI's chat and completion endpoints (whole or as server-sent
events), Anthropic's Messages API and OpenAI's Responses API (routes of their own modules, onto the
same chat answer), models, health and Prometheus metrics; errors in each API's own envelope.

What is checked before a body is read (Host, API key, size, content type, CORS) is in guards.py;
how a request travels through the engine, and is cancelled when its client goes away, in
answers.py. A field a client sends that this server does not know is ignored, and named once in
the log. The OpenAPI document is served at /openapi.json.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware

from . import anthropic_routes, completion_routes, infill, responses_routes, tokenizer_routes
from .answers import CLIENT_GONE, ApiError, ChatAnswer, ClientGone
from .guards import BearerAuth, BodyLimit, JsonOnly, LoopbackHostOnly, envelope
from .logprobs_render import chat_logprobs
from .metrics import CONTENT_TYPE
from .openai_stream import openai_stream
from .schemas import (
    ChatRequest,
    chat_chunk,
    chat_response,
    new_id,
    unknown_fields,
    with_tokens,
)
from .service import Service
from .validation import validation_error


def error_response(path: str, error: ApiError) -> JSONResponse:
    """`error` in the envelope of the API at `path`."""
    body = envelope(path, error.status, error.message, error.kind, error.param, error.code)
    return JSONResponse(body, status_code=error.status, headers=error.headers)


def create_app(service: Service, *, loopback: bool = False) -> FastAPI:
    """The FastAPI application serving `service`; `loopback`: it listens on a loopback address
    (so only loopback Host headers are answered)."""
    app = FastAPI(title="specrun", docs_url=None, redoc_url=None, openapi_url="/openapi.json")
    _install_errors(app, service)
    _install_guards(app, service, loopback)
    model = service.model_name
    target = service.pair.target_model

    @app.get("/health")
    async def health():
        state = service.worker.snapshot()
        failure = service.worker.failure()
        if failure is not None:
            return JSONResponse(
                {"status": "error", "reason": f"the engine stopped ({failure}); restart the server", **state},
                status_code=503,
            )
        status = "shutting_down" if state["draining"] else "ok"
        return JSONResponse({"status": status, **state}, status_code=503 if state["draining"] else 200)

    @app.get("/metrics")
    async def metrics():
        return PlainTextResponse(service.metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/v1/models")
    async def models():
        created = int(os.stat(service.pair.config.target).st_mtime)
        sizes = {"n_ctx": service.pair.n_ctx, "n_ctx_train": target.n_ctx_train, "n_vocab": target.n_vocab}
        entry = {
            "id": model,
            "object": "model",
            "created": created,
            "owned_by": "specrun",
            "max_model_len": service.pair.n_ctx,  # vLLM's name for the context a request may fill
            "meta": sizes,  # llama-server's
        }
        return {"object": "list", "data": [entry]}

    @app.post("/v1/chat/completions")
    async def chat(body: ChatRequest, request: Request):
        service.note_unknown(unknown_fields(body), "/v1/chat/completions")
        rid = new_id("chatcmpl")
        try:
            answer = await ChatAnswer.start(service, body, request)
            if not body.stream:
                whole = await answer.whole(request)
        except ClientGone:
            return Response(status_code=CLIENT_GONE)
        if not body.stream:
            end = whole.end
            response = chat_response(
                rid,
                model,
                whole.message["content"],
                end.finish_reason,
                end.report,
                whole.message.get("reasoning_content"),
                whole.message.get("tool_calls"),
            )
            if body.logprobs:
                response["choices"][0]["logprobs"] = chat_logprobs(target, whole.logprobs)
            return with_tokens(response, whole.tokens, body)

        async def chunks() -> AsyncIterator[dict]:
            yield chat_chunk(rid, model, {"role": "assistant", "content": ""})
            async for piece in answer.pieces():
                out = [chat_chunk(rid, model, delta) for delta in piece.deltas]
                if (body.return_tokens or body.logprobs) and piece.tokens:
                    out = out or [chat_chunk(rid, model, {})]
                    out[-1] = with_tokens(out[-1], piece.tokens, body)
                    if body.logprobs:
                        out[-1]["choices"][0]["logprobs"] = chat_logprobs(target, piece.logprobs)
                for chunk in out:
                    yield chunk
                if piece.end is not None:
                    yield chat_chunk(rid, model, {}, piece.end.finish_reason, piece.end.report)

        return openai_stream(chunks(), answer.cancel)

    completion_routes.install(app, service)
    anthropic_routes.install(app, service)
    responses_routes.install(app, service)
    infill.install(app, service)
    tokenizer_routes.install(app, service)
    return app


def _install_errors(app: FastAPI, service: Service) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, error: ApiError):
        return error_response(request.url.path, error)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError):
        path = request.url.path
        endpoint = (
            "infill"
            if path == "/infill"
            else "completion"
            if path.endswith("/completions") and "chat" not in path
            else "chat"
        )
        service.metrics.request(endpoint, "invalid")
        return error_response(request.url.path, validation_error(error.errors()))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException):
        kind = "not_found_error" if error.status_code == 404 else "invalid_request_error"
        failure = ApiError(error.status_code, str(error.detail), kind, headers=error.headers)
        return error_response(request.url.path, failure)

    @app.exception_handler(Exception)
    async def internal(request: Request, error: Exception):
        if os.environ.get("SPECRUN_DEBUG"):
            import traceback

            traceback.print_exception(error, file=sys.stderr)
        failure = ApiError(500, f"internal error: {type(error).__name__}: {error}", "server_error")
        return error_response(request.url.path, failure)


def _install_guards(app: FastAPI, service: Service, loopback: bool) -> None:
    """The checks at the door (guards.py); the last added runs first: Host, CORS, key, size, type."""
    options = service.options
    app.add_middleware(JsonOnly)
    app.add_middleware(BodyLimit, limit=options.max_body)
    if options.api_key:
        app.add_middleware(BearerAuth, key=options.api_key)
    if options.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(options.cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type", "x-api-key", "anthropic-version", "anthropic-beta"],
            max_age=600,
        )
    if loopback:
        app.add_middleware(LoopbackHostOnly)
