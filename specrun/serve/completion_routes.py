"""`POST /v1/completions`: one prompt or several (each its own choice, in order), streamed or
whole; with `echo` the prompt comes back before the answer, and with `logprobs` too its tokens'
log-probabilities (the first token's null), read in the one pass over the prompt: how evaluation
harnesses score answers by likelihood (`echo`, `logprobs: 1`, `max_tokens` 0 or 1)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from ..engine.model import Model
from .answers import CLIENT_GONE, GONE, ApiError, Collected, collect, events_of, opening, submit
from .logprobs_render import TextOffsets, completion_logprobs, prompt_logprobs
from .openai_stream import openai_stream
from .requests import Job
from .schemas import CompletionRequest, completion_response, new_id, unknown_fields, with_tokens
from .service import RequestError, Service


async def completion_job(service: Service, body: CompletionRequest, index: int) -> Job:
    """The job of the `index`-th prompt, tokenized off the event loop; a bad prompt is a 400."""
    try:
        return await run_in_threadpool(service.completion_job, body, index)
    except RequestError as error:
        service.metrics.request("completion", "invalid")
        raise ApiError(400, error.message, "invalid_request_error", error.param, error.code) from None


def echoed(model: Model, prompt: str | list[int]) -> str:
    """The prompt as `echo` gives it back: its text, or the text of its token ids."""
    if isinstance(prompt, str):
        return prompt
    return b"".join(model.piece(t, special=True) for t in prompt).decode("utf-8", "replace")


class Choice:
    """One prompt's choice as it is written: its echo first (once), then its answer, and the
    log-probabilities of what it wrote, when asked."""

    def __init__(self, service: Service, body: CompletionRequest, job: Job, index: int):
        self.model = service.pair.target_model
        self.body = body
        self.job = job
        self.index = index
        self.offsets = TextOffsets()
        self.echo = echoed(self.model, body.prompts()[index]) if body.echo else None
        self.scores = body.scores_prompt()  # the echo waits for the prompt's scores, which come once it is read

    def piece(self, text: str, logprobs: list, scores: list | None) -> dict:
        """The choice's next text (its echo first) and, when asked, the log-probabilities of both."""
        choice = {"index": self.index, "text": text, "logprobs": None, "finish_reason": None}
        entries = []
        if self.echo is not None:
            choice["text"] = self.echo + text
            self.echo = None
            if self.body.logprobs is not None:
                entries = prompt_logprobs(self.job.prompt, scores or [])
        if self.body.logprobs is not None:
            choice["logprobs"] = completion_logprobs(self.model, [*entries, *logprobs], self.offsets)
        return choice


def install(app: FastAPI, service: Service) -> None:
    """Add /v1/completions to `app`."""
    model_name = service.model_name

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request):
        service.note_unknown(unknown_fields(body), "/v1/completions")
        prompts = len(body.prompts())
        if body.stream and prompts > 1:
            raise ApiError(400, "stream one prompt at a time", "invalid_request_error", "stream")
        rid = new_id("cmpl")
        if body.stream:
            job = await completion_job(service, body, 0)
            return await _stream(service, body, job, rid, request)
        answers: list[tuple[Choice, Collected]] = []
        wave = max(1, service.options.parallel)
        for first in range(0, prompts, wave):  # as many at once as decode together
            jobs = [await completion_job(service, body, i) for i in range(first, min(prompts, first + wave))]
            submitted: list = []
            try:
                for job in jobs:  # a full queue refuses one: those submitted before it are cancelled below
                    submitted.append(submit(service, job, False))
                for i, (job, (handle, events)) in enumerate(zip(jobs, submitted)):
                    answer = await collect(handle, events, request)
                    if answer is None:
                        return Response(status_code=CLIENT_GONE)
                    answers.append((Choice(service, body, job, first + i), answer))
            finally:
                for handle, _ in submitted:
                    handle.cancel()
        return _whole(answers, rid, model_name, body)

    async def _stream(service: Service, body: CompletionRequest, job: Job, rid: str, request: Request):
        handle, events = submit(service, job, True)
        opened = await opening(job, handle, events, request)
        if opened is GONE:
            return Response(status_code=CLIENT_GONE)
        choice = Choice(service, body, job, 0)
        wants = body.return_tokens or body.logprobs is not None

        async def chunks() -> AsyncIterator[dict]:
            async for ev in events_of(handle, events, opened):
                echo_due = choice.echo is not None and (ev.prompt_logprobs is not None or not choice.scores)
                if ev.text or (wants and ev.tokens) or echo_due:
                    chunk = completion_response(rid, model_name, "", None)
                    chunk["choices"][0] = choice.piece(ev.text, ev.logprobs, ev.prompt_logprobs)
                    yield with_tokens(chunk, ev.tokens, body)
                if ev.done:
                    yield completion_response(rid, model_name, "", ev.finish_reason, ev.report)

        return openai_stream(chunks(), handle.cancel)


def _whole(answers: list[tuple[Choice, Collected]], rid: str, model_name: str, body: CompletionRequest) -> dict:
    """The whole response: a choice per prompt, in order, and their usage summed."""
    first = answers[0][1].last.report or {}
    response = completion_response(rid, model_name, "", None, first)
    response["choices"] = []
    totals = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    for choice, answer in answers:
        written = choice.piece(answer.text, answer.logprobs, answer.prompt_logprobs)
        written["finish_reason"] = answer.last.finish_reason
        if body.return_tokens:
            written["tokens"] = list(answer.tokens)
        response["choices"].append(written)
        usage = (answer.last.report or {}).get("usage", {})
        for key in totals:
            totals[key] += usage.get(key, 0)
    if "usage" in response and len(answers) > 1:
        response["usage"] = {**response["usage"], **totals}
    return response
