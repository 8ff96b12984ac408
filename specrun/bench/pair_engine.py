"""The bench's view of a loaded Pair (runner.BenchEngine): runs from empty caches, the decode
costs calibrated at a real prompt's length and priced as auto prices them, and the target's logits
along an output, for the identity checks."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..engine import identity
from ..engine.auto.costs import measure as measure_costs
from ..engine.constrained import restricted_row
from ..engine.constraint import Constraint
from ..engine.matcher import Matcher, grammar_tokenizer
from ..engine.sequence import GenerationSettings
from ..engine.stats import Stats
from .prompts import BenchPrompt
from .runner import Calibration, Config, StepSample


class PairEngine:
    """The bench's view of a loaded Pair: runs from empty caches, calibration, logits at a prefix."""

    def __init__(self, pair, *, chat: bool = True, fresh: bool = False, variables: dict | None = None):
        """variables: what the chat template is given besides the messages (e.g. enable_thinking)."""
        self.pair = pair
        self.session = pair.session
        self.chat = chat
        self.fresh = fresh  # every auto run starts afresh, as a one-shot process would
        self.variables = dict(variables or {})
        self.n_ctx = self.session.n_ctx
        self.threads = pair.threads

    def prompt_tokens(self, prompt: BenchPrompt) -> list[int]:
        if prompt.constraint is not None:
            grammar_tokenizer(self.pair.target_model)  # built once per model: not in the first timed run
        return self.pair.prompt_tokens(prompt.prompt, chat=self.chat, system=prompt.system, variables=self.variables)

    def prediction_tokens(self, prompt: BenchPrompt) -> list[int] | None:
        text = prompt.prediction()
        return self.pair.prediction_tokens(text) if text else None

    def check(self, config: Config, generation: GenerationSettings) -> None:
        """Set the configuration up once, so an unknown mode fails before anything is timed."""
        self.session.policy(config.mode, generation, fresh=self.fresh, verifier=config.verifier(generation.seed or 0))

    def run(
        self, tokens: list[int], config: Config, generation: GenerationSettings, prediction: list[int] | None = None
    ) -> tuple[list[int], str, Stats, list[StepSample]]:
        """One run from empty KV caches: every run then prefills its whole prompt, as a fresh request would."""
        self.session.reset()
        steps: list[StepSample] = []

        def record(update) -> None:
            choice = update.choice
            steps.append(
                StepSample(
                    choice.drafter,
                    choice.k,
                    update.drafted,
                    update.accepted,
                    update.draft_s,
                    update.verify_s,
                    update.lead,
                    update.lead_kept,
                )
            )

        run = self.session.generation(
            tokens,
            generation,
            mode=config.mode,
            fresh=self.fresh,
            on_step=record,
            verifier=config.verifier(generation.seed or 0),
            prediction=prediction,
        )
        out: list[int] = []
        pieces: list[str] = []
        for step in run.run():
            out.extend(step.tokens)
            pieces.append(step.text)
        return out, "".join(pieces), run.stats, steps

    def calibrate(self, tokens: list[int], batch_sizes: Sequence[int], reps: int) -> Calibration:
        """Median seconds of a target pass per batch size and of one draft token, after the prompt.

        Sizes are interleaved within each repetition, like the runs, and the cache is trimmed back
        after every pass so each one sees the same context length.
        """
        costs = measure_costs(
            self.session.target_ctx, self.session.draft_ctx, tokens, batch_sizes, reps, head=self.session.head_ctx
        )
        passes, blocks = self.session.drafter_passes(costs)
        return Calibration(
            len(tokens),
            costs.verify_s.get(1, 0.0),
            costs.verify_s,
            costs.draft_token_s,
            costs.head_pass_s,
            passes,
            blocks,
        )

    def output_rows(self, prompt: list[int], output: list[int], constraint: Constraint | None = None) -> np.ndarray:
        """The target's logits at every output position, from one batched pass (engine.identity);
        the prompt's prefill is kept for the next output of the same prompt. Under a constraint,
        each row keeps only the tokens it allows there: what constrained decoding chose from."""
        if self.session.draft_ctx is not None:
            self.session.draft_ctx.clear()
        rows = identity.output_rows(self.session.target_ctx, prompt, output)
        if constraint is None:
            return rows
        matcher = Matcher(constraint, self.pair.target_model)
        allowed = []
        for row, token in zip(rows, output):
            allowed.append(restricted_row(row, matcher))
            matcher.consume([token])
        return np.stack(allowed) if allowed else rows

    def logit_noise(self, tokens: list[int]) -> float:
        """How far batching moves the target's top logits here, on the tail of `tokens`
        (engine.identity.logit_noise)."""
        self.session.reset()
        return identity.logit_noise(self.session.target_ctx, tokens)

    def output_noise(self, prompt: list[int], output: list[int]) -> float:
        """The same noise along the rows that predict `output` (engine.identity.output_noise)."""
        self.session.reset()
        return identity.output_noise(self.session.target_ctx, prompt, output)

    def piece(self, token: int) -> str:
        return self.pair.target_model.piece(token).decode("utf-8", "replace")
