"""The HTTP face of a Service: OpenAI's chat and completion endpoints (whole or as server-sent
events), models, health and Prometheus metrics; errors in OpenAI's envelope.

Events come from the engine thread through a sink that hops onto this event loop. A client that
goes away (a closed stream, or a dropped connection while it waits for a whole answer) cancels
its request, which leaves the batch at the next step; a constrained stream starts with its first
token, so that a constraint the engine refuses is a 400 like any other. What is checked before a
body is read (Host, API key, size, content type, CORS) is in guards.py; the OpenAPI document,
served at /openapi.json, gives max_tokens this server's bound (its context).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import AsyncIterator, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware

from .guards import BearerAuth, BodyLimit, JsonOnly, LoopbackHostOnly
from .reasoning import ChatText
from .requests import Job
from .schemas import (
    MAX_TOKENS_FIELDS,
    ChatRequest,
    CompletionRequest,
    chat_chunk,
    chat_response,
    completion_response,
    error_body,
    new_id,
)
from .service import RequestError, Service
from .tools import ToolDeltas, finish_reason, tool_calls_field
from .worker import EngineStopped, Event, Handle, QueueFull, ShuttingDown

CLIENT_GONE = 499  # nginx's status for a client that closed the connection; nobody receives it
GONE = object()  # what a wait returns when the client went away meanwhile
UNION_TAG = re.compile(
    r"[\[\]\-,=]|^(str|int|float|bool|dict|list|none)$"
)  # pydantic's names of a union's members in an error's loc (schemas.py tags its own with a `=`)


class ApiError(Exception):
    """An error response: status, OpenAI's envelope, headers."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: str,
        param: str | None = None,
        code: str | None = None,
        headers: dict | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.body = error_body(message, kind, param, code)
        self.headers = headers or {}


def _response(error: ApiError) -> JSONResponse:
    return JSONResponse(error.body, status_code=error.status, headers=error.headers)


def create_app(service: Service, *, loopback: bool = False) -> FastAPI:
    """The FastAPI application serving `service`; `loopback`: it listens on a loopback address
    (so only loopback Host headers are answered)."""
    app = FastAPI(title="specrun", docs_url=None, redoc_url=None, openapi_url="/openapi.json")
    _install_errors(app, service)
    _install_guards(app, service, loopback)
    app.openapi = lambda: _openapi(app, service.ctx_size)
    model = service.model_name

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
        return PlainTextResponse(service.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/v1/models")
    async def models():
        created = int(os.stat(service.pair.config.target).st_mtime)
        return {"object": "list", "data": [{"id": model, "object": "model", "created": created, "owned_by": "specrun"}]}

    @app.post("/v1/chat/completions")
    async def chat(body: ChatRequest, request: Request):
        job = await _job(service, "chat", body)
        rid = new_id("chatcmpl")
        handle, events = _submit(service, job, body.stream)
        answer_text = ChatText(job)
        if body.stream:
            opened = await _opening(job, handle, events, request)
            if opened is GONE:
                return Response(status_code=CLIENT_GONE)
            first = chat_chunk(rid, model, {"role": "assistant", "content": ""})
            calls = ToolDeltas(job.tools) if job.tools is not None else None

            def piece(ev: Event) -> dict | list[dict] | None:
                delta = answer_text.delta(ev.text, final=ev.done)
                if calls is not None:
                    return _tool_chunks(rid, model, delta, calls, ev, body)
                if not delta and not (body.return_tokens and ev.tokens):
                    return None
                return _tokens(chat_chunk(rid, model, delta), ev.tokens, body)

            def closing(ev: Event) -> dict:
                reason = finish_reason(ev.finish_reason, calls is not None and calls.calls > 0)
                return chat_chunk(rid, model, {}, reason, ev.report)

            return _stream(handle, events, first, piece, closing, body.return_tokens, opened)
        answer = await _collect(handle, events, request)
        if answer is None:
            return Response(status_code=CLIENT_GONE)
        last, text, tokens = answer
        content, reasoning = answer_text.whole(text)
        finish, calls = last.finish_reason, None
        if job.tools is not None:
            parsed = job.tools.parse(content)
            if parsed.calls:
                content, calls = parsed.content or None, tool_calls_field(parsed)
                finish = finish_reason(finish, True)
        response = chat_response(rid, model, content, finish, last.report, reasoning, calls)
        return _tokens(response, tokens, body)

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request):
        job = await _job(service, "completion", body)
        rid = new_id("cmpl")
        handle, events = _submit(service, job, body.stream)
        if body.stream:
            opened = await _opening(job, handle, events, request)
            if opened is GONE:
                return Response(status_code=CLIENT_GONE)
            return _stream(
                handle,
                events,
                None,
                lambda ev: (
                    _tokens(completion_response(rid, model, ev.text, None), ev.tokens, body)
                    if ev.text or (body.return_tokens and ev.tokens)
                    else None
                ),
                lambda ev: completion_response(rid, model, "", ev.finish_reason, ev.report),
                body.return_tokens,
                opened,
            )
        answer = await _collect(handle, events, request)
        if answer is None:
            return Response(status_code=CLIENT_GONE)
        last, text, tokens = answer
        return _tokens(completion_response(rid, model, text, last.finish_reason, last.report), tokens, body)

    return app


def _tokens(payload: dict, tokens: list[int], body) -> dict:
    """With `return_tokens`, the token ids behind the choice's text (the answer's, or this chunk's)."""
    if body.return_tokens:
        payload["choices"][0]["tokens"] = list(tokens)
    return payload


async def _job(service: Service, kind: str, body):
    """Tokenize off the event loop (a long prompt takes milliseconds); a bad request becomes a 400."""
    make = service.chat_job if kind == "chat" else service.completion_job
    try:
        return await run_in_threadpool(make, body)
    except RequestError as error:
        service.metrics.request(kind, "invalid")
        raise ApiError(400, error.message, "invalid_request_error", error.param, error.code) from None


class Feed:
    """A request's events, from the engine thread to the event loop: every one for a stream; for
    a whole answer only the last, the ones before it kept aside until it comes. Each hop wakes
    the loop, whose Python then runs beside llama_decode on the cores it computes on: a whole
    answer wakes it once, not once per step."""

    def __init__(self, loop: asyncio.AbstractEventLoop, every: bool):
        self.loop = loop
        self.every = every
        self.queue: asyncio.Queue = asyncio.Queue()
        self.before: list[Event] = []  # events before the last, when only the last hops

    def sink(self, event: Event) -> None:
        """Called on the engine thread."""
        if self.every or event.done or event.error:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, event)
        else:
            self.before.append(event)  # read on the loop after the last event, which hops after it

    async def get(self) -> Event:
        return await self.queue.get()


def _submit(service: Service, job, stream: bool) -> tuple[Handle, Feed]:
    events = Feed(asyncio.get_running_loop(), every=stream)
    try:
        return service.worker.submit(job, events.sink), events
    except QueueFull as full:
        service.metrics.request(job.kind, "rejected")
        state = service.worker.snapshot()
        raise ApiError(
            503,
            f"the server is busy ({state['active']} requests answering, {state['queued']} waiting); retry later",
            "server_error",
            None,
            "queue_full",
            {"Retry-After": str(full.retry_after)},
        ) from None
    except ShuttingDown:
        service.metrics.request(job.kind, "rejected")
        raise ApiError(
            503, "the server is shutting down", "server_error", None, "shutting_down", {"Retry-After": "5"}
        ) from None
    except EngineStopped as stopped:
        service.metrics.request(job.kind, "rejected")
        raise ApiError(
            503, f"the engine stopped ({stopped.reason}); restart the server", "server_error", None, "engine_stopped"
        ) from None


def _event_error(event: Event) -> ApiError:
    if event.error == "shutting_down":
        return ApiError(
            503,
            event.message or "the server is shutting down",
            "server_error",
            None,
            "shutting_down",
            {"Retry-After": "5"},
        )
    if event.error == "engine_stopped":
        return ApiError(503, event.message or "the engine stopped", "server_error", None, "engine_stopped")
    if event.error == "invalid_schema":
        return ApiError(400, event.message or "invalid constraint", "invalid_request_error", event.param, event.error)
    return ApiError(500, event.message or "the request failed", "server_error", None, event.error)


async def _next(events: Feed, gone: asyncio.Future) -> Event | None:
    """The request's next event; None once the client has gone."""
    get = asyncio.ensure_future(events.get())
    done, _ = await asyncio.wait({get, gone}, return_when=asyncio.FIRST_COMPLETED)
    if get not in done:
        get.cancel()
        return None
    return get.result()


async def _opening(job: Job, handle: Handle, events: Feed, request: Request) -> Event | None | object:
    """A constrained stream's first event, awaited before the response starts, so that a constraint
    the engine refuses when the request starts is a 400 rather than an error inside a 200 stream:
    the error is raised; GONE when the client left meanwhile (the request is cancelled); None, at
    once, for a stream without a constraint."""
    if job.settings.constraint is None:
        return None
    gone = asyncio.ensure_future(_disconnected(request))
    event = None
    try:
        event = await _next(events, gone)
    finally:
        gone.cancel()
        if event is None or event.error:
            handle.cancel()
    if event is None:
        return GONE
    if event.error:
        raise _event_error(event)
    return event


async def _collect(handle: Handle, events: Feed, request: Request) -> tuple[Event, str, list[int]] | None:
    """Wait for the whole answer (last event, text, tokens); None when the client disconnected
    meanwhile (the request is cancelled)."""
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        while True:
            event = await _next(events, gone)
            if event is None:
                return None
            if event.error:
                raise _event_error(event)
            if event.done:
                answer = [*events.before, event]
                return event, "".join(e.text for e in answer), [t for e in answer for t in e.tokens]
            events.before.append(event)
    finally:
        gone.cancel()
        handle.cancel()


async def _disconnected(request: Request) -> None:
    """Returns when the client has gone away (the request body was already read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _sse(payload) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


def _tool_chunks(rid: str, model: str, delta: dict, calls: ToolDeltas, ev: Event, body) -> list[dict]:
    """A step's chunks when the answer may call tools: its reasoning as it comes, its content
    through the call reader (content pieces, then each call's name and arguments)."""
    chunks = []
    if "reasoning_content" in delta:
        chunks.append(chat_chunk(rid, model, {"reasoning_content": delta["reasoning_content"]}))
    for part in calls.feed(delta.get("content", ""), final=ev.done):
        chunks.append(chat_chunk(rid, model, part))
    if body.return_tokens and ev.tokens:
        if not chunks:
            chunks.append(chat_chunk(rid, model, {}))
        chunks[-1] = _tokens(chunks[-1], ev.tokens, body)
    return chunks


def _stream(
    handle: Handle,
    events: Feed,
    first: dict | None,
    piece: Callable[[Event], dict | list[dict] | None],
    last: Callable[[Event], dict],
    with_tokens: bool = False,
    opened: Event | None = None,
) -> StreamingResponse:
    """Server-sent events: an opening chunk, one chunk per step with new text (or new tokens, when
    they are asked for; `piece` gives None when a step has nothing to send), a final chunk with
    finish_reason, usage and timings, then [DONE]. A closed connection cancels the request.
    `opened`: the first event, when it was awaited before the response started. `piece` may give
    several chunks for one step (a tool call's name, then its arguments)."""

    async def body() -> AsyncIterator[str]:
        held = opened
        try:
            if first is not None:
                yield _sse(first)
            while True:
                if held is not None:
                    event, held = held, None
                else:
                    event = await events.get()
                if event.error:
                    yield _sse(_event_error(event).body)
                    break
                payload = piece(event) if event.text or event.done or (with_tokens and event.tokens) else None
                for chunk in payload if isinstance(payload, list) else [payload] if payload is not None else []:
                    yield _sse(chunk)
                if event.done:
                    yield _sse(last(event))
                    break
            yield "data: [DONE]\n\n"
        finally:
            handle.cancel()

    return StreamingResponse(body(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


def _install_errors(app: FastAPI, service: Service) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, error: ApiError):
        return _response(error)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError):
        endpoint = "chat" if request.url.path.endswith("chat/completions") else "completion"
        service.metrics.request(endpoint, "invalid")
        return _response(validation_error(error.errors()))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException):
        kind = "not_found_error" if error.status_code == 404 else "invalid_request_error"
        return JSONResponse(error_body(str(error.detail), kind), status_code=error.status_code, headers=error.headers)

    @app.exception_handler(Exception)
    async def internal(request: Request, error: Exception):
        if os.environ.get("SPECRUN_DEBUG"):
            import traceback

            traceback.print_exception(error, file=sys.stderr)
        return JSONResponse(
            error_body(f"internal error: {type(error).__name__}: {error}", "server_error"), status_code=500
        )


def validation_error(errors: list[dict]) -> ApiError:
    """The validation error that matters as OpenAI reports one: a message and the parameter at
    fault. Of a union's failed members, the one whose type matched says what is wrong."""
    if not errors:
        return ApiError(400, "invalid request", "invalid_request_error")
    first = next((e for e in errors if not str(e.get("type", "")).endswith("_type")), errors[0])
    if first.get("type") == "json_invalid":
        return ApiError(
            400,
            f"the request body is not valid JSON ({first.get('ctx', {}).get('error', first['msg'])})",
            "invalid_request_error",
            None,
            "invalid_json",
        )
    param = _param(first.get("loc", ()))
    if param is None and first.get("type") in ("model_attributes_type", "dict_type", "model_type"):
        return ApiError(
            400,
            "the request body must be a JSON object (sent with Content-Type: application/json)",
            "invalid_request_error",
            None,
            "invalid_json",
        )
    where = f"{param}: " if param else ""
    if first.get("type") == "extra_forbidden":
        return ApiError(
            400,
            f"{where}unknown parameter (this server refuses what it does not implement rather than ignore it)",
            "invalid_request_error",
            param,
            "unknown_parameter",
        )
    return ApiError(400, f"{where}{first['msg']}", "invalid_request_error", param, first.get("type"))


def _param(loc) -> str | None:
    """The parameter an error's loc names: the path to the field, without pydantic's union tags;
    for a bad key of an object, the object (the key itself may be text that cannot be shown)."""
    parts = list(loc)
    path: list[str] = []
    for i, part in enumerate(parts):
        if part == "[key]" or (i + 1 < len(parts) and parts[i + 1] == "[key]"):
            continue
        if part != "body" and not (isinstance(part, str) and UNION_TAG.search(part)):
            path.append(str(part))
    return ".".join(path) or None


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
            allow_headers=["Authorization", "Content-Type"],
            max_age=600,
        )
    if loopback:
        app.add_middleware(LoopbackHostOnly)


def _openapi(app: FastAPI, ctx_size: int) -> dict:
    """FastAPI's document of the endpoints, with max_tokens bounded by the context as the server bounds it."""
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version="1", routes=app.routes)
        for model in schema.get("components", {}).get("schemas", {}).values():
            for name in MAX_TOKENS_FIELDS:
                for branch in model.get("properties", {}).get(name, {}).get("anyOf", []):
                    if branch.get("type") == "integer":
                        branch["maximum"] = ctx_size
        app.openapi_schema = schema
    return app.openapi_schema
