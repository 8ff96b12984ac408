"""One request being answered: its tokens so far, text, stop conditions, sampling and estimates.

The batch engine decodes many of these together; each keeps what is its own: the random
generator its seed starts, the text assembler that holds back stop strings and split UTF-8, its
prompt-lookup drafter (which indexes its own history), its acceptance of the draft model by
position, and its timings.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..engine.auto.estimates import PositionRates
from ..engine.drafting.prompt_lookup import PromptLookupDrafter
from ..engine.llama import Model
from ..engine.loop import GenerationSettings
from ..engine.sampling import make_rng, sample
from ..engine.stats import Stats
from ..engine.text import TextAssembler

OWN_EVIDENCE = 4.0  # trials at which a request's own acceptance counts as much as the server's pooled estimate
_ids = itertools.count(1)

# finish reasons of the engine → OpenAI's
FINISH_REASONS = {"eog": "stop", "stop": "stop", "max_tokens": "length", "context": "length", "cancelled": "cancelled"}


@dataclass
class Job:
    """What a request asks for, validated and tokenized."""

    kind: str  # "chat" or "completion"
    prompt: list[int]
    settings: GenerationSettings
    max_tokens_given: int | None = None  # as the client sent it (None: until the end or the context)
    id: int = field(default_factory=lambda: next(_ids))


@dataclass
class Timings:
    """Wall-clock moments of one request (time.perf_counter seconds)."""

    arrived: float
    admitted: float | None = None
    first_token: float | None = None
    finished: float | None = None


def blended_rates(own: PositionRates, pooled: PositionRates, k: int) -> list[float]:
    """A request's acceptance by position, leaning on the server's pooled estimate until the
    request has evidence of its own (OWN_EVIDENCE trials weigh as much as the pool)."""
    prior = pooled.rates(k)
    return [(own.successes[i] + OWN_EVIDENCE * prior[i]) / (own.trials[i] + OWN_EVIDENCE) for i in range(min(k, own.size))]


class Generation:
    """A request from admission to its last token."""

    def __init__(self, job: Job, slot: int, model: Model, *, cached: int, k_cap: int, lookup: bool, arrived: float):
        self.job = job
        self.slot = slot
        self.model = model
        self.settings = job.settings
        self.rng = make_rng(job.settings.seed)
        self.text = TextAssembler(job.settings.stop)
        self.history: list[int] = list(job.prompt)
        self.generated: list[int] = []
        self.cached = cached  # prompt tokens found in the cache
        self.pending: list[int] = list(job.prompt[cached:])  # prompt tokens still to read
        self.k_cap = k_cap
        self.lookup = PromptLookupDrafter(job.settings.ngram_min, job.settings.ngram_max, max_draft=k_cap) if lookup and k_cap > 0 else None
        self.model_rates = PositionRates(max(k_cap, 1))
        self.stats = Stats(prompt_tokens=len(job.prompt))
        self.timings = Timings(arrived=arrived, admitted=time.perf_counter())
        self.finished: str | None = None
        self.next_probe = 0  # step count at which the draft model is tried again while estimates keep it idle
        self.probe_every = 16

    @property
    def prefilled(self) -> bool:
        return not self.pending

    def pick(self, logits: np.ndarray) -> int:
        sampling = self.settings.sampling
        return int(np.argmax(logits)) if sampling.greedy else sample(sampling.probs(logits), self.rng)

    def room(self, n_ctx_seq: int, cached_now: int) -> int:
        """Most draft tokens this step may verify: within max_tokens, the context and the cap."""
        room_tokens = self.settings.max_tokens - len(self.generated) - 1
        room_ctx = n_ctx_seq - cached_now - 1
        return max(0, min(room_tokens, room_ctx, self.k_cap))

    def commit(self, tokens: Sequence[int]) -> tuple[list[int], str]:
        """Append tokens up to the first stop condition; return those kept and the text now final.
        Sets `finished` when a stop condition was met."""
        kept: list[int] = []
        out: list[str] = []
        settings = self.settings
        for token in tokens:
            kept.append(token)
            self.generated.append(token)
            if self.model.is_eog(token) and not settings.ignore_eos:
                self.finished = "eog"
                break
            out.append(self.text.feed(self.model.piece(token)))
            if self.text.stopped:
                self.finished = "stop"
                break
            if len(self.generated) >= settings.max_tokens:
                self.finished = "max_tokens"
                break
        self.history.extend(kept)
        self.stats.generated_tokens = len(self.generated)
        if self.timings.first_token is None and kept:
            self.timings.first_token = time.perf_counter()
        return kept, "".join(out)

    def finish(self, reason: str) -> str:
        """Close the text stream; return what it held back."""
        if self.finished is None or reason == "cancelled":
            self.finished = reason
        self.stats.stop_reason = self.finished
        self.timings.finished = time.perf_counter()
        return self.text.finish() if reason != "cancelled" else ""

    @property
    def finish_reason(self) -> str:
        return FINISH_REASONS.get(self.finished or "", "stop")

    def report(self) -> dict:
        """usage and llama-server's `timings` for the response."""
        t = self.timings
        prompt_n = len(self.job.prompt) - self.cached
        end = t.finished or time.perf_counter()
        prompt_s = (t.first_token or end) - (t.admitted or t.arrived)
        predicted_s = end - (t.first_token or end)
        predicted_n = len(self.generated)
        steady = predicted_n - 1  # tokens after the first, over the time after the first: the decode speed
        return {
            "usage": {"prompt_tokens": len(self.job.prompt), "completion_tokens": predicted_n,
                      "total_tokens": len(self.job.prompt) + predicted_n},
            "timings": {
                "cache_n": self.cached,
                "prompt_n": prompt_n,
                "prompt_ms": round(prompt_s * 1000, 3),
                "prompt_per_token_ms": round(prompt_s * 1000 / prompt_n, 3) if prompt_n else None,
                "prompt_per_second": round(prompt_n / prompt_s, 3) if prompt_s > 0 and prompt_n else None,
                "predicted_n": predicted_n,
                "predicted_ms": round(predicted_s * 1000, 3),
                "predicted_per_token_ms": round(predicted_s * 1000 / steady, 3) if steady else None,
                "predicted_per_second": round(steady / predicted_s, 3) if steady and predicted_s > 0 else None,
                "draft_n": self.stats.drafted,
                "draft_n_accepted": self.stats.accepted,
                "queue_ms": round(((t.admitted or end) - t.arrived) * 1000, 3),
            },
        }
