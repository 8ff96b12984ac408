"""llama-server's fill-in-the-middle endpoint, `POST /infill`, as editors call it (llama.vim,
llama.vscode): the code before the cursor (`input_prefix`, and the start of the cursor's line in
`prompt`), the code after it (`input_suffix`) and chunks of other files (`input_extra`), answered
with the middle and llama-server's fields (`content`, `tokens_predicted`, `timings`, …), or the
ones `response_fields` names, flattened under their paths ("timings/prompt_n").

`n_predict: 0` only reads the prompt, which warms the cache for the next request (an editor sends
it when its chunks change); `n_indent`, the line after the cursor and `t_max_predict_ms` end the
answer by its lines (engine/line_rules.py). `t_max_prompt_ms`, `samplers`, `id_slot` and
`cache_prompt` are accepted and change nothing: the samplers are the filters given (`top_k`,
`top_p`, `min_p`, `temperature`), in the server's order.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

from .answers import CLIENT_GONE, GONE, ApiError, collect, events_of, job_for, opening, submit
from .infill_request import InfillRequest
from .logprobs_render import llama_probabilities
from .requests import Job
from .schemas import unknown_fields
from .service import Service

ROUTE = "/infill"


def answer_body(
    service: Service, job: Job, event, text: str, tokens: list[int], *, return_tokens: bool, probs: list | None = None
) -> dict:
    """llama-server's /infill (and /completion) answer for a finished request; `probs`: its tokens'
    log-probabilities, when `n_probs` asked for them."""
    report = event.report or {}
    usage = report.get("usage", {})
    timings = report.get("timings", {})
    predicted = usage.get("completion_tokens", len(tokens))
    return {
        "index": 0,
        "content": text,
        "tokens": list(tokens) if return_tokens else [],
        "id_slot": 0,
        "stop": True,
        "model": service.model_name,
        "tokens_predicted": predicted,
        "tokens_evaluated": len(job.prompt),
        "has_new_line": "\n" in text,
        "truncated": False,
        "stop_type": "word" if event.stop_sequence else "limit" if event.finish_reason == "length" else "eos",
        "stopping_word": event.stop_sequence or "",
        "tokens_cached": len(job.prompt) + predicted,
        "timings": timings,
        **({"completion_probabilities": llama_probabilities(service.pair.target_model, probs)} if probs else {}),
    }


def only(body: dict, paths: list[str] | None) -> dict:
    """The fields `paths` names, each under its path ("timings/prompt_n"), as llama-server's
    `response_fields` returns them; every field without it."""
    if not paths:
        return body
    picked = {}
    for path in paths:
        value: Any = body
        for key in path.split("/"):
            if not isinstance(value, dict) or key not in value:
                break
            value = value[key]
        else:
            picked[path] = value
    return picked


def install(app: FastAPI, service: Service) -> None:
    """Add /infill to `app`."""

    model = service.pair.target_model

    @app.post(ROUTE)
    async def infill(body: InfillRequest, request: Request):
        service.note_unknown(unknown_fields(body), ROUTE)
        job = await job_for(service, "infill", body)
        handle, events = submit(service, job, body.stream)
        if body.stream:
            opened = await opening(job, handle, events, request)
            if opened is GONE:
                return Response(status_code=CLIENT_GONE)

            async def chunks() -> AsyncIterator[str]:
                tokens: list[int] = []
                try:
                    async for ev in events_of(handle, events, opened):
                        tokens += ev.tokens
                        if ev.text or ((body.return_tokens or body.n_probs) and ev.tokens):
                            piece = {"index": 0, "content": ev.text, "stop": False}
                            if body.return_tokens:
                                piece["tokens"] = list(ev.tokens)
                            if body.n_probs and ev.logprobs:
                                piece["completion_probabilities"] = llama_probabilities(model, ev.logprobs)
                            yield _sse(piece)
                        if ev.done:
                            last = answer_body(service, job, ev, "", tokens, return_tokens=False)
                            yield _sse(only(last, body.response_fields))
                except ApiError as error:
                    yield _sse(error.body)
                finally:
                    handle.cancel()

            return StreamingResponse(chunks(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        answer = await collect(handle, events, request)
        if answer is None:
            return Response(status_code=CLIENT_GONE)
        last, text, tokens = answer.last, answer.text, answer.tokens
        whole = answer_body(service, job, last, text, tokens, return_tokens=body.return_tokens, probs=answer.logprobs)
        return only(whole, body.response_fields)


def _sse(payload: dict) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"
