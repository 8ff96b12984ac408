"""A request's way through the engine as every API's routes see it: submitted, its events carried
from the engine thread to the event loop, awaited whole or streamed, cancelled when the client
goes away; and a chat request's answer as chat deltas (content, reasoning, tool calls) and its end,
which each wire format (OpenAI chat, Anthropic Messages, OpenAI Responses) renders its own way.

A client that goes away (a closed stream, or a dropped connection while it waits for a whole
answer) cancels its request, which leaves the batch at the next step; a constrained request's first
event is awaited before a stream starts, so that a constraint the engine refuses is a 400 like any
other.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from .. import defaults
from .reasoning import ChatText
from .requests import Job
from .schemas import ChatRequest, error_body
from .service import RequestError, Service
from .tools import ToolDeltas, finish_reason, tool_calls_field
from .worker import EngineStopped, Event, Handle, QueueFull, ShuttingDown

GONE = object()  # what a wait returns when the client went away meanwhile
CLIENT_GONE = 499  # nginx's status for a client that closed the connection; nobody receives it


class ApiError(Exception):
    """An error response: status, message, OpenAI's error type, the field at fault, a code, headers.
    Each API renders it in its own envelope; `body` is OpenAI's."""

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
        self.message = message
        self.kind = kind
        self.param = param
        self.code = code
        self.body = error_body(message, kind, param, code)
        self.headers = headers or {}


def renamed(error: ApiError, names: dict[str, str]) -> ApiError:
    """`error` with its field named as another API calls it (`names`: chat's top-level field →
    that API's): the param, and the message where it opens with the param."""
    if error.param is None:
        return error
    head, dot, rest = error.param.partition(".")
    if head not in names:
        return error
    param = names[head] + dot + rest
    message = error.message
    if message.startswith(error.param + ":"):
        message = param + message[len(error.param) :]
    message = message.replace(f"{head}.", f"{names[head]}.")
    return ApiError(error.status, message, error.kind, param, error.code, error.headers)


class ClientGone(Exception):
    """The client closed the connection before its answer was ready (the request is cancelled)."""


async def job_for(service: Service, kind: str, body) -> Job:
    """Tokenize off the event loop (a long prompt takes milliseconds); a bad request becomes a 400."""
    make = {"chat": service.chat_job, "completion": service.completion_job, "infill": service.infill_job}[kind]
    try:
        return await run_in_threadpool(make, body)
    except RequestError as error:
        service.metrics.request(kind, "invalid")
        raise ApiError(400, error.message, "invalid_request_error", error.param, error.code) from None


async def prompt_tokens(service: Service, body: ChatRequest) -> int:
    """The prompt tokens a chat request makes (off the event loop), for the count endpoints; a
    conversation the server cannot render is a 400."""
    try:
        return await run_in_threadpool(service.count_chat_tokens, body)
    except RequestError as error:
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


def submit(service: Service, job: Job, stream: bool) -> tuple[Handle, Feed]:
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


def event_error(event: Event) -> ApiError:
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


LATE = object()  # what _next returns when its timeout passed first


async def _next(events: Feed, gone: asyncio.Future, timeout: float | None = None) -> Event | None | object:
    """The request's next event; None once the client has gone; LATE when `timeout` seconds passed
    first (the event, when it comes, stays in the feed)."""
    get = asyncio.ensure_future(events.get())
    done, _ = await asyncio.wait({get, gone}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    if get in done:
        return get.result()
    get.cancel()
    return None if gone in done else LATE


async def opening(job: Job, handle: Handle, events: Feed, request: Request) -> Event | None | object:
    """A constrained stream's first event (the engine took its constraint, or refused it), awaited
    before the response starts, so that a constraint the engine refuses when the request starts is
    a 400 rather than an error inside a 200 stream: the error is raised; GONE when the client left
    meanwhile (the request is cancelled); None, at once, for a stream without a constraint, and
    after SERVE_KEEPALIVE_S for one still waiting for a sequence (its stream then starts, and sends
    keep-alives while it waits)."""
    if job.settings.constraint is None:
        return None
    gone = asyncio.ensure_future(disconnected(request))
    try:
        event = await _next(events, gone, defaults.SERVE_KEEPALIVE_S)
    finally:
        gone.cancel()
    if event is LATE:
        return None
    if event is None or event.error:
        handle.cancel()
    if event is None:
        return GONE
    if event.error:
        raise event_error(event)
    return event


@dataclass
class Collected:
    """A whole answer: its last event, its text, its tokens and their log-probabilities (when asked)."""

    last: Event
    text: str
    tokens: list[int]
    logprobs: list
    prompt_logprobs: list | None = None  # when the request scored its prompt


async def collect(handle: Handle, events: Feed, request: Request) -> Collected | None:
    """Wait for the whole answer; None when the client disconnected meanwhile (the request is
    cancelled)."""
    gone = asyncio.ensure_future(disconnected(request))
    try:
        while True:
            event = await _next(events, gone)
            if event is None:
                return None
            if event.error:
                raise event_error(event)
            if event.done:
                answer = [*events.before, event]
                return Collected(
                    event,
                    "".join(e.text for e in answer),
                    [t for e in answer for t in e.tokens],
                    [lp for e in answer for lp in e.logprobs],
                    next((e.prompt_logprobs for e in answer if e.prompt_logprobs is not None), None),
                )
            events.before.append(event)
    finally:
        gone.cancel()
        handle.cancel()


async def disconnected(request: Request) -> None:
    """Returns when the client has gone away (the request body was already read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def events_of(handle: Handle, events: Feed, opened: Event | None) -> AsyncIterator[Event]:
    """A streamed request's events up to its last (`opened`: the first, when it was awaited before
    the response started); an error event is raised as an ApiError. The request is cancelled
    when the stream ends early (the client closed it)."""
    held = opened
    try:
        while True:
            if held is not None:
                event, held = held, None
            else:
                event = await events.get()
            if event.error:
                raise event_error(event)
            yield event
            if event.done:
                return
    finally:
        handle.cancel()


@dataclass
class Ending:
    """How a chat answer ended: OpenAI's finish reason ("tool_calls" when it called a tool), its
    usage and timings (`report`), and the stop string that ended it, if one did."""

    finish_reason: str
    report: dict
    stop_sequence: str | None = None


@dataclass
class Piece:
    """A step's part of a streamed chat answer: chat deltas (`content`, `reasoning_content`,
    `tool_calls`), the step's tokens, and on the last piece how the answer ended."""

    deltas: list[dict] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    end: Ending | None = None
    logprobs: list = field(default_factory=list)  # of `tokens`, when asked


@dataclass
class Whole:
    """A whole chat answer: the assistant message as OpenAI's chat API gives it, and its end."""

    message: dict
    end: Ending
    tokens: list[int]
    logprobs: list = field(default_factory=list)  # of `tokens`, when asked


class ChatAnswer:
    """One chat request on its way through the engine, for any API that renders a chat answer."""

    def __init__(self, service: Service, job: Job, handle: Handle, events: Feed, opened: Event | None):
        self.service = service
        self.job = job
        self.handle = handle
        self.events = events
        self.opened = opened
        self.text = ChatText(job)

    @classmethod
    async def start(cls, service: Service, body: ChatRequest, request: Request) -> ChatAnswer:
        """Validate, tokenize and submit; for a constrained stream wait for its first event (an
        error: ApiError; the client gone meanwhile: ClientGone)."""
        job = await job_for(service, "chat", body)
        handle, events = submit(service, job, body.stream)
        opened = None
        if body.stream:
            opened = await opening(job, handle, events, request)
            if opened is GONE:
                raise ClientGone()
        return cls(service, job, handle, events, opened)

    @property
    def prompt_tokens(self) -> int:
        return len(self.job.prompt)

    def cancel(self) -> None:
        self.handle.cancel()

    async def whole(self, request: Request) -> Whole:
        """The whole answer; ClientGone when the client disconnected meanwhile."""
        answer = await collect(self.handle, self.events, request)
        if answer is None:
            raise ClientGone()
        last, text = answer.last, answer.text
        content, reasoning = self.text.whole(text)
        finish, calls = last.finish_reason, None
        if self.job.tools is not None:
            parsed = self.job.tools.parse(content)
            if parsed.calls:
                content, calls = parsed.content or None, tool_calls_field(parsed)
                finish = finish_reason(finish, True)
        message = {"role": "assistant", "content": content, **({"reasoning_content": reasoning} if reasoning else {})}
        if calls:
            message["tool_calls"] = calls
        return Whole(message, Ending(finish, last.report or {}, last.stop_sequence), answer.tokens, answer.logprobs)

    async def pieces(self) -> AsyncIterator[Piece]:
        """The streamed answer step by step (steps with nothing new included, for their tokens);
        an error is raised as an ApiError; the request is cancelled when iteration stops early."""
        calls = ToolDeltas(self.job.tools) if self.job.tools is not None else None
        async for event in events_of(self.handle, self.events, self.opened):
            delta = self.text.delta(event.text, final=event.done)
            if calls is None:
                deltas = [delta] if delta else []
            else:
                deltas = [{"reasoning_content": delta["reasoning_content"]}] if "reasoning_content" in delta else []
                deltas += calls.feed(delta.get("content", ""), final=event.done)
            end = None
            if event.done:
                reason = finish_reason(event.finish_reason, calls is not None and calls.calls > 0)
                end = Ending(reason, event.report or {}, event.stop_sequence)
            yield Piece(deltas, event.tokens, end, event.logprobs)


async def with_keepalive(items: AsyncIterator, seconds: float) -> AsyncIterator:
    """`items`, with None yielded whenever `seconds` pass without one: a stream can then send its
    API's keep-alive while a long prompt is read (minutes on a CPU), so that no client or proxy
    between takes the silence for a dead server. Ends the iteration of `items` when it ends."""
    queue: asyncio.Queue = asyncio.Queue(maxsize=1)
    done = object()

    async def pump() -> None:
        try:
            async for item in items:
                await queue.put((item, None))
            await queue.put((done, None))
        except Exception as error:  # noqa: BLE001 - handed to the reader, which raises it
            await queue.put((done, error))

    task = asyncio.ensure_future(pump())
    try:
        while True:
            try:
                item, error = await asyncio.wait_for(queue.get(), seconds)
            except asyncio.TimeoutError:
                yield None
                continue
            if error is not None:
                raise error
            if item is done:
                return
            yield item
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        aclose = getattr(items, "aclose", None)
        if aclose is not None:
            await aclose()
