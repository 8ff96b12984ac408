"""One sequence's state from its prompt to its last token: what is its own in a step it shares.

The engine decodes any number of these together. Each keeps its history, the random generator its
seed starts, the text assembler that holds back stop strings and split UTF-8, its stop conditions,
its statistics and its own acceptance evidence per drafter. Invariant between steps: the target's
cache of the sequence holds its history except the last token, which is fed first in the next
batch, `[last] + draft`, with logits for every position.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from .. import defaults
from ..errors import ContextOverflowError
from .auto.estimates import PositionRates
from .constraint import Constraint
from .line_rules import LineRules
from .logprobs import TokenLogprob, prompt_scores
from .matcher import Matcher
from .model import Model
from .sampling import Rng, SamplingParams, make_rng
from .stats import Stats
from .text import TextAssembler


@dataclass(frozen=True)
class GenerationSettings:
    """What to generate and when to stop; the same for plain and speculative runs."""

    max_tokens: int = defaults.MAX_TOKENS
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int | None = None
    draft_max: int | None = None  # most draft tokens per step; None: the mode's default (draft_max_for)
    draft_min: int = defaults.DRAFT_MIN
    draft_p_min: float = defaults.DRAFT_P_MIN
    ngram_min: int = defaults.NGRAM_MIN
    ngram_max: int = defaults.NGRAM_MAX
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    constraint: Constraint | None = None  # what the answer must match (a JSON schema, a regex, a grammar)
    lines: LineRules | None = None  # where an infill answer ends by its lines (line_rules.py)
    logprobs: int | None = None  # each token's log-probability and this many alternatives' (None: none; logprobs.py)
    score_prompt: bool = False  # the prompt's tokens get theirs too: it is read whole, every row's logits kept

    def k_max_for(self, mode: str) -> int:
        """K's ceiling for `mode`, the most draft tokens one step may verify: the caller's
        `draft_max` when set, else the mode's default (defaults.draft_max_for)."""
        return self.draft_max if self.draft_max is not None else defaults.draft_max_for(mode, None)


def check_prompt_fits(n_prompt: int, n_ctx: int, max_tokens: int | None = None) -> None:
    """Refuse a prompt of `n_prompt` tokens that leaves no room in a context of `n_ctx` for the
    answer's first token; the hint names the size that holds `max_tokens` more, when given."""
    if n_prompt >= n_ctx:
        above = f" above {n_prompt + max_tokens}" if max_tokens is not None else ""
        raise ContextOverflowError(
            f"the prompt is {n_prompt} tokens but the context holds {n_ctx}",
            f"raise --ctx-size{above} or shorten the prompt",
        )


def check_prediction_fits(n_prediction: int, n_ctx: int) -> None:
    """Refuse a predicted output longer than the context: no answer could follow it that far."""
    if n_prediction > n_ctx:
        raise ContextOverflowError(
            f"the prediction is {n_prediction} tokens but the context holds {n_ctx}",
            "shorten the prediction or raise --ctx-size",
        )


@dataclass(frozen=True)
class Lead:
    """The head of a constrained sequence's draft: tokens its constraint forces (the first
    `certain`, kept without a look at their rows), then the likely tokens of forced text, verified."""

    tokens: list[int]
    certain: int


@dataclass
class Timings:
    """Wall-clock moments of one sequence (time.perf_counter seconds)."""

    arrived: float
    admitted: float | None = None
    first_token: float | None = None
    finished: float | None = None


class SequenceState:
    """A generation on sequence `seq` of the engine's contexts, from admission to its last token.

    `cached` prompt tokens were found in the cache; the rest (`pending`) are read in chunks before
    the first token. `k_max` is the most draft tokens a step may verify for it.
    """

    def __init__(
        self,
        seq: int,
        prompt: Sequence[int],
        settings: GenerationSettings,
        model: Model,
        *,
        cached: int = 0,
        k_max: int = 0,
        rng: Rng | None = None,
        arrived: float | None = None,
        admitted: float | None = None,
        read_in_cache: int = 0,
        expected_tokens: float | None = None,
    ):
        now = time.perf_counter() if admitted is None else admitted
        self.seq = seq
        self.prompt = list(prompt)
        self.settings = settings
        self.sampling = settings.sampling
        self.model = model
        self.rng = rng if rng is not None else make_rng(settings.seed)
        self.text = TextAssembler(settings.stop, settings.lines)
        self.history: list[int] = list(prompt)
        self.generated: list[int] = []
        self.cached = cached
        self.read_in_cache = read_in_cache  # of the `cached` tokens, those read at admission (kv_reuse.py)
        self.pending: list[int] = list(prompt[cached:])
        self.save_at: list[int] = []  # prompt positions whose cache goes to the prompt cache once read
        self.k_max = k_max
        self.expected_tokens = expected_tokens  # how long answers like this one ran (a server's estimate)
        self.prompt_logprobs: list[TokenLogprob] = []  # of prompt[1:], when the settings score the prompt
        self.own: dict[str, PositionRates] = {}  # this sequence's acceptance evidence per drafter
        self.stats = Stats(prompt_tokens=len(prompt))
        self.timings = Timings(arrived=arrived if arrived is not None else now, admitted=now)
        self.finished: str | None = None  # eog | max_tokens | stop | time_limit | context | cancelled
        self.done = False
        # Where the answer stands in its constraint; it reads full rows, since the constraint may
        # refuse every candidate of a shortlist.
        self.matcher = Matcher(settings.constraint, model) if settings.constraint is not None else None

    @property
    def shortlist(self) -> int:
        """How many candidates of a row this sequence needs (0: the full row, as a constraint and
        log-probabilities do)."""
        full = self.matcher is not None or self.settings.logprobs is not None or self.settings.score_prompt
        return 0 if full else self.sampling.shortlist

    def lead(self, limit: int) -> Lead | None:
        """Up to `limit` tokens the constraint puts at the head of the next draft (None without a
        constraint, or when it leaves the next token open)."""
        if self.matcher is None or limit <= 0:
            return None
        forced, likely = self.matcher.lead()
        tokens = (forced + likely)[:limit]
        return Lead(tokens, min(len(forced), len(tokens))) if tokens else None

    @property
    def prefilled(self) -> bool:
        return not self.pending

    def score_read(self, n: int, rows):
        """Keep the log-probabilities of the prompt tokens that the `n` rows just read predict
        (row j: the token after the j-th read); returns the last row, the first answer token's."""
        start = len(self.prompt) - len(self.pending)
        block = rows.reshape(n, -1)
        self.prompt_logprobs += prompt_scores(block, self.prompt, start, self.settings.logprobs or 0)
        return block[-1]

    def read_until_save(self) -> int:
        """Prompt tokens to read before the next position to save (all that are left when none)."""
        if not self.save_at:
            return len(self.pending)
        return self.save_at[0] - (len(self.prompt) - len(self.pending))

    def step_k_max(self, n_ctx: int, cached_now: int) -> int:
        """Most draft tokens this step may verify: within max_tokens, the context and its k_max."""
        room_tokens = self.settings.max_tokens - len(self.generated) - 1
        room_ctx = n_ctx - cached_now - 1
        return max(0, min(room_tokens, room_ctx, self.k_max))

    def remaining(self) -> int:
        """Tokens this sequence may still produce."""
        return max(0, self.settings.max_tokens - len(self.generated))

    def expected_remaining(self) -> int:
        """Tokens this sequence is expected to produce still, never more than it may: what is left
        of the length answers like it ran to, or, once it has run past that, as many again as it
        has produced. Without an estimate, all it may. Exploring a drafter repays itself only over
        the tokens still to come, and an agent's max_tokens says little about them."""
        may = self.remaining()
        if self.expected_tokens is None:
            return may
        produced = len(self.generated)
        return min(may, max(1, round(self.expected_tokens) - produced, produced))

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
            piece = self.model.piece(token)
            out.append(self.text.feed(piece))
            if self.text.stopped:
                self.finished = "stop"
                break
            if b"\n" in piece and self._out_of_time():
                self.finished = "time_limit"
                break
            if len(self.generated) >= settings.max_tokens:
                self.finished = "max_tokens"
                break
        self.history.extend(kept)
        if self.finished is None and self.matcher is not None and self.matcher.stopped:
            self.finished = "stop"  # the constraint is complete: nothing may follow
        self.stats.generated_tokens = len(self.generated)
        if self.timings.first_token is None and kept:
            self.timings.first_token = time.perf_counter()
        return kept, "".join(out)

    def _out_of_time(self) -> bool:
        """Past the time budget its line rules give the answer, counted from the first token."""
        lines = self.settings.lines
        if lines is None or lines.time_limit_s is None or self.timings.first_token is None:
            return False
        return time.perf_counter() - self.timings.first_token > lines.time_limit_s

    def finish(self, reason: str) -> str:
        """Close the text stream; return what it held back (nothing when cancelled)."""
        if self.finished is None or reason == "cancelled":
            self.finished = reason
        self.done = True
        self.stats.stop_reason = self.finished
        self.timings.finished = time.perf_counter()
        return self.text.finish() if reason != "cancelled" else ""
