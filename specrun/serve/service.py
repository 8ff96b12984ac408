"""A loaded pair made ready to serve: the batch engine, its thread, the metrics, and requests turned
into jobs (chat template, tokens, settings, the context check).

The HTTP layer (app.py) only translates: bodies in, events out. Everything that decides what a
request means lives here, so the same service runs under uvicorn, in a test, or in the bench.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from .. import defaults
from ..engine.loop import GenerationSettings
from ..engine.sampling import SamplingParams
from ..errors import SpecrunError
from ..runtime.pair import Pair
from .batch_engine import BatchEngine, EngineConfig
from .costs import BatchCosts
from .metrics import Metrics
from .schemas import ChatRequest, CompletionRequest, Sampling
from .sequence import Job
from .worker import Worker


class RequestError(Exception):
    """A request this server cannot answer as asked (400): the message, and the field at fault."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


@dataclass(frozen=True)
class ServeOptions:
    """How the server runs and the defaults of a request's settings."""

    parallel: int = defaults.SERVE_PARALLEL
    queue: int = defaults.SERVE_QUEUE
    schedule: str = defaults.SERVE_SCHEDULE
    api_key: str | None = None
    mode: str = defaults.SPEC_MODE
    k_cap: int = defaults.AUTO_K_MAX
    base: GenerationSettings = GenerationSettings()  # filters, drafters' tuning; temperature when a request gives none


class Service:
    """Everything a running server holds."""

    def __init__(self, pair: Pair, options: ServeOptions, *, costs: BatchCosts | None = None,
                 warn: Callable[[str], None] | None = None, before_step: Callable[[], None] | None = None):
        self.pair = pair
        self.options = options
        self.model_name = Path(pair.config.target).stem
        self.ctx_size = pair.config.ctx_size
        base = options.base
        config = EngineConfig(parallel=options.parallel, ctx_size=pair.config.ctx_size, threads=pair.threads, mode=options.mode,
                              k_cap=options.k_cap, draft_min=base.draft_min, draft_p_min=base.draft_p_min, n_batch=pair.config.n_batch)
        self.engine = BatchEngine(pair.target_model, pair.draft_model, pair.bridge, config, costs, warn)
        self.metrics = Metrics(gauges=self._gauges)
        self.worker = Worker(self.engine, parallel=options.parallel, queue=options.queue, schedule=options.schedule,
                             metrics=self.metrics, before_step=before_step)

    def _gauges(self) -> dict[str, tuple[str, float]]:
        state = self.worker.snapshot()
        return {
            "specrun_queue_length": ("Requests waiting for a sequence.", state["queued"]),
            "specrun_active_requests": ("Requests being decoded.", state["active"]),
            "specrun_parallel": ("Sequences decoded together at most (--parallel).", self.options.parallel),
            "specrun_kv_cells_used": ("Cells of the target's shared KV cache holding a token.", self.engine.target.used()),
            "specrun_kv_cells": ("Cells of the target's shared KV cache.", self.engine.target.n_ctx),
            "specrun_draft_model_enabled": ("1 when the draft model may draft (its measured cost can pay), else 0.",
                                            float(self.engine.model_viable)),
        }

    # -- requests → jobs ---------------------------------------------------------------------

    def chat_job(self, body: ChatRequest) -> Job:
        messages = [{"role": "system" if m.role == "developer" else m.role, "content": m.text()} for m in body.messages]
        try:
            tokens = self.pair.tokens_for_messages(messages)
        except SpecrunError as error:
            raise RequestError(f"{error.message}; use /v1/completions with a formatted prompt", "messages") from None
        return self._job("chat", tokens, body, "messages", body.answer_limit())

    def completion_job(self, body: CompletionRequest) -> Job:
        text = body.text()
        if not text:
            raise RequestError("the prompt is empty", "prompt")
        tokens = self.pair.target_model.tokenize(text, add_special=True, parse_special=True)
        limit = body.answer_limit()
        return self._job("completion", tokens, body, "prompt", limit if limit is not None else defaults.COMPLETION_MAX_TOKENS)

    def _job(self, kind: str, tokens: list[int], body: Sampling, param: str, max_tokens: int | None) -> Job:
        """The job for a request's tokens; `max_tokens` None: until the end of the answer or of the context."""
        if not tokens:
            raise RequestError("the prompt is empty", param)
        if len(tokens) >= self.ctx_size:
            raise RequestError(
                f"the prompt is {len(tokens)} tokens but each request's context holds {self.ctx_size} "
                "(shorten it, or start the server with a larger --ctx-size)", param, "context_length_exceeded")
        base = self.options.base
        filters = base.sampling
        sampling = SamplingParams(
            temperature=body.temperature if body.temperature is not None else filters.temperature,
            top_k=body.top_k if body.top_k is not None else filters.top_k,
            top_p=body.top_p if body.top_p is not None else filters.top_p,
            min_p=body.min_p if body.min_p is not None else filters.min_p,
        )
        seed = body.seed % 2**64 if body.seed is not None else None  # any integer, as OpenAI's API takes (numpy wants ≥ 0)
        settings = replace(base, max_tokens=max_tokens if max_tokens is not None else self.ctx_size, sampling=sampling,
                           seed=seed, stop=body.stops(), ignore_eos=False)
        return Job(kind, tokens, settings, max_tokens_given=max_tokens)

    # -- running -----------------------------------------------------------------------------

    def start(self) -> None:
        self.worker.start()

    def stop(self, grace: float = 0.0) -> None:
        """Drain within `grace` seconds and end the engine thread; the models stay loaded."""
        self.worker.stop(grace)

    def close(self) -> None:
        self.engine.close()
