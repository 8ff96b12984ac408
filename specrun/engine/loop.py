"""The draft → verify → commit generator. Plain decoding is the same loop with no drafter.

Invariant between steps: the target's KV cache holds the whole history except its last token,
which is fed first in the next verification batch, `[last] + draft`, with logits for every position.
"""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import numpy as np

from .. import defaults
from ..errors import ContextOverflowError, InputError
from .auto.policy import AutoPolicy, FixedPolicy, Plan
from .drafting.protocol import Draft
from .llama import Context
from .sampling import SamplingParams, make_rng, sample
from .stats import Stats
from .text import TextAssembler
from .verify import Verdict, verify_greedy, verify_sampling


@dataclass(frozen=True)
class GenerationSettings:
    """What to generate and when to stop; the same for plain and speculative runs."""

    max_tokens: int = defaults.MAX_TOKENS
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int | None = None
    draft_max: int | None = None  # most draft tokens per step; None: the mode's default (draft_cap)
    draft_min: int = defaults.DRAFT_MIN
    draft_p_min: float = defaults.DRAFT_P_MIN
    ngram_min: int = defaults.NGRAM_MIN
    ngram_max: int = defaults.NGRAM_MAX
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False

    def draft_cap(self, mode: str) -> int:
        """The most draft tokens one step may verify in `mode`: `draft_max` when set, else
        defaults.AUTO_K_MAX under auto (which picks K itself) and defaults.DRAFT_MAX otherwise."""
        if self.draft_max is not None:
            return self.draft_max
        return defaults.AUTO_K_MAX if mode == "auto" else defaults.DRAFT_MAX


@dataclass
class Step:
    """What one step committed: tokens, the text now final, and how the draft fared."""

    tokens: list[int]
    text: str
    drafted: int = 0
    accepted: int = 0
    drafter: str | None = None
    k: int = 0
    finished: str | None = None  # eog | max_tokens | stop | context, on the last step


class SpeculativeLoop:
    """Runs one generation on a target context; a policy decides what is drafted each step."""

    def __init__(
        self,
        target: Context,
        policy: FixedPolicy | AutoPolicy,
        settings: GenerationSettings,
        *,
        rng: np.random.Generator | None = None,
        draft_ctx: Context | None = None,
        on_step: Callable[[Plan, int, float, float], None] | None = None,
    ):
        self.target = target
        self.model = target.model
        self.policy = policy
        self.draft_ctx = draft_ctx  # only to account the draft model's llama_decode time
        self.settings = settings
        self.sampling = settings.sampling
        self.rng = rng if rng is not None else make_rng(settings.seed)
        self.on_step = on_step
        self.stats = Stats()
        self.text = TextAssembler(settings.stop)
        self.generated: list[int] = []

    # -- steps -------------------------------------------------------------------------------

    def _prefill(self, prompt: Sequence[int]) -> np.ndarray:
        """Feed the prompt, reusing any cached common prefix; logits only for the last position."""
        if not prompt:
            raise InputError("the prompt is empty", "give at least one token of prompt text")
        if len(prompt) >= self.target.n_ctx:
            raise ContextOverflowError(
                f"the prompt is {len(prompt)} tokens but the context holds {self.target.n_ctx}",
                "raise --ctx-size or shorten the prompt",
            )
        keep = min(self.target.common_prefix(prompt), len(prompt) - 1)
        self.target.trim(keep)
        logits = self.target.decode(list(prompt[keep:]), "last")
        self.policy.prefill(prompt)
        return logits

    def _pick(self, logits: np.ndarray) -> int:
        if self.sampling.greedy:
            return int(np.argmax(logits))
        return sample(self.sampling.probs(logits), self.rng)

    def _verify(self, last: int, draft: Draft) -> Verdict:
        """One target pass over [last] + draft; rewind the cache past the first rejection."""
        base = len(self.target.tokens)
        batch = [last] + draft.tokens
        # A view of llama.cpp's buffer: read before the next decode, never kept.
        rows = self.target.decode(batch, "all" if draft.tokens else "last", copy=False)
        rows = rows.reshape(len(batch), -1)
        if self.sampling.greedy:
            verdict = verify_greedy(draft.tokens, rows)
        else:
            verdict = verify_sampling(draft.tokens, draft.probs, lambda i: self.sampling.probs(rows[i]), self.rng)
        self.target.trim(base + 1 + verdict.accepted)
        return verdict

    def _budget(self) -> int:
        """Largest draft this step may use: within max_tokens and the context."""
        room_tokens = self.settings.max_tokens - len(self.generated) - 1
        room_ctx = self.target.n_ctx - len(self.target.tokens) - 1
        return max(0, min(room_tokens, room_ctx))

    def _commit(self, tokens: Sequence[int]) -> tuple[list[int], str, str | None]:
        """Append tokens up to the first stop condition; return those kept, their text, the reason."""
        kept: list[int] = []
        out: list[str] = []
        reason = None
        for token in tokens:
            kept.append(token)
            self.generated.append(token)
            if self.model.is_eog(token) and not self.settings.ignore_eos:
                reason = "eog"
                break
            out.append(self.text.feed(self.model.piece(token)))
            if self.text.stopped:
                reason = "stop"
                break
            if len(self.generated) >= self.settings.max_tokens:
                reason = "max_tokens"
                break
        return kept, "".join(out), reason

    # -- the loop ----------------------------------------------------------------------------

    def run(self, prompt: Sequence[int]) -> Iterator[Step]:
        """Yield one Step per target pass as soon as it is verified; the last one carries `finished`."""
        stats = self.stats
        stats.prompt_tokens = len(prompt)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        start = time.perf_counter()
        decode_before = None
        try:
            if self.settings.max_tokens <= 0:
                yield self._finish(Step([], ""), "max_tokens")
                return
            logits = self._prefill(prompt)
            stats.prefill_time = time.perf_counter() - start
            decode_before = self._decode_seconds()
            kept, text, reason = self._commit([self._pick(logits)])
            stats.time_to_first_token = time.perf_counter() - start
            stats.generated_tokens = len(self.generated)
            step = Step(kept, text)
            history = list(prompt) + kept
            while reason is None:
                if len(self.target.tokens) + 1 > self.target.n_ctx:
                    yield step
                    step, reason = Step([], ""), "context"
                    break
                yield step
                step = self._step(history)
                reason = step.finished
            yield self._finish(step, reason)
        finally:
            stats.total_time = time.perf_counter() - start
            now = resource.getrusage(resource.RUSAGE_SELF)
            stats.cpu_time = now.ru_utime + now.ru_stime - usage.ru_utime - usage.ru_stime
            stats.major_faults = now.ru_majflt - usage.ru_majflt
            stats.generated_tokens = len(self.generated)
            stats.policy = self.policy.summary()
            self.policy.finish()
            if decode_before is not None:
                stats.llama_decode_time = self._decode_seconds() - decode_before

    def _step(self, history: list[int]) -> Step:
        """Draft, verify, commit; extends history with the committed tokens."""
        step_start = time.perf_counter()
        plan = self.policy.plan(history, self._budget())
        verify_start = time.perf_counter()
        verdict = self._verify(history[-1], plan.draft)
        done = time.perf_counter()
        n_draft = len(plan.draft.tokens)
        if plan.source is not None and n_draft:
            plan.source.feedback(n_draft, verdict.accepted)
        t_draft, t_verify = verify_start - step_start, done - verify_start
        self.policy.observe(plan, verdict.accepted, t_draft, t_verify)
        self.stats.record_step(n_draft, verdict.accepted, t_draft, t_verify, plan.name)
        if self.on_step is not None:
            self.on_step(plan, verdict.accepted, t_draft, t_verify)
        kept, text, reason = self._commit(verdict.tokens)
        history.extend(kept)
        self.stats.generated_tokens = len(self.generated)
        return Step(kept, text, n_draft, verdict.accepted, plan.name, plan.k, finished=reason)

    def _finish(self, step: Step, reason: str) -> Step:
        """Close the text stream into the last step and record why generation stopped."""
        step.text += self.text.finish()
        step.finished = reason
        self.stats.stop_reason = reason
        return step

    def flush_text(self) -> str:
        """Text held back for stop strings or split UTF-8, released when generation is interrupted."""
        return self.text.finish()

    def _decode_seconds(self) -> float:
        """Time spent inside llama_decode by the target and the draft model so far."""
        ctx = self.draft_ctx
        return self.target.decode_seconds + (ctx.decode_seconds if ctx is not None else 0.0)
