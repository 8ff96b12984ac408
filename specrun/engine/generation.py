"""One generation on its own: a batch of one, stepped through the engine until it finishes.

Yields a Step per target pass as soon as it is verified (mlx-lm's layered generators: the step
loop inside, text and statistics outside), so `run`, chat, bench and the library stream the same
way the server does.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from ..errors import InputError
from .sequence import GenerationSettings, SequenceState, check_prompt_fits
from .stats import Stats
from .step import Engine, Policy, Update


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


class Generation:
    """A prompt's generation on `engine` under `policy`, run by `run()`; `stats` are complete when it ends.

    `given`: what the caller hands the drafters, typed (auto's prompt lookup, which outlives the
    generation and keeps what it learned; a predicted output); `on_step` sees every step's update;
    `on_finish` is called once the generation ends."""

    def __init__(
        self,
        engine: Engine,
        prompt: Sequence[int],
        settings: GenerationSettings,
        policy: Policy = Policy(),
        *,
        rng=None,
        given: Sequence[object] = (),
        on_step: Callable[[Update], None] | None = None,
        on_finish: Callable[[Generation], None] | None = None,
    ):
        self.engine = engine
        self.policy = policy
        self.prompt = list(prompt)
        self.settings = settings
        self.rng = rng
        self.given = given
        self.on_step = on_step
        self.on_finish = on_finish
        self.state: SequenceState | None = None
        self.stats = Stats(prompt_tokens=len(self.prompt))
        self.generated: list[int] = []

    @property
    def text(self):
        """The text assembler: everything emitted so far, and what it holds back."""
        return self.state.text if self.state is not None else None

    def label(self) -> str:
        return self.policy.label()

    def flush_text(self) -> str:
        """Text held back for stop strings or split UTF-8, released when generation is interrupted."""
        return self.state.text.finish() if self.state is not None else ""

    def _check(self) -> None:
        if not self.prompt:
            raise InputError("the prompt is empty", "give at least one token of prompt text")
        check_prompt_fits(len(self.prompt), self.engine.target.n_ctx)

    def run(self) -> Iterator[Step]:
        """Yield one Step per target pass; the last one carries `finished`."""
        self._check()
        stats = self.stats
        usage = resource.getrusage(resource.RUSAGE_SELF)
        start = time.perf_counter()
        decode_before = None
        engine = self.engine
        try:
            if self.settings.max_tokens <= 0:
                stats.stop_reason = "max_tokens"
                yield Step([], "", finished="max_tokens")
                return
            engine.configure(self.policy)
            state = self.state = engine.admit(self.prompt, self.settings, given=self.given, rng=self.rng)
            state.stats = stats
            self.generated = state.generated
            while not state.done:
                report = engine.step([state])
                update = next((u for u in report.updates if u.sequence is state), None)
                if decode_before is not None:
                    stats.host_time += report.host_seconds
                if update is None:
                    continue
                if decode_before is None:
                    stats.prefill_time = time.perf_counter() - start
                    stats.time_to_first_token = stats.prefill_time
                    decode_before = engine.decode_seconds()
                elif self.on_step is not None:
                    self.on_step(update)
                yield Step(
                    update.tokens,
                    update.text,
                    update.drafted,
                    update.accepted,
                    update.drafter,
                    update.choice.k,
                    finished=state.finished if update.done else None,
                )
        finally:
            if self.state is not None and not self.state.done:
                engine.release(self.state)
            stats.total_time = time.perf_counter() - start
            now = resource.getrusage(resource.RUSAGE_SELF)
            stats.cpu_time = now.ru_utime + now.ru_stime - usage.ru_utime - usage.ru_stime
            stats.major_faults = now.ru_majflt - usage.ru_majflt
            stats.generated_tokens = len(self.generated)
            stats.policy = self.policy.controller.summary() if self.policy.auto else None
            if decode_before is not None:
                stats.llama_decode_time = engine.decode_seconds() - decode_before
            if self.on_finish is not None:
                self.on_finish(self)
