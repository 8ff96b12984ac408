"""What every drafter offers the engine: proposals for the sequences that ask, and what to learn
from their fate.

One step asks each drafter once, for every sequence it drafts for, so a drafter that runs a model
batches all of them into one pass per depth. A drafter keeps its own per-sequence state (a draft
model's cache, a lookup's index), keyed by the sequence id the engine's contexts use; the engine
tells it when a generation begins on a sequence and when the sequence's caches are gone.

Every drafter is built from the registry (drafting/__init__.py): a new drafter is a module that
implements `Drafter` and one line there.

Terms: K, the most draft tokens a step may verify for a sequence, is `k_max` as a cap and `k` as a
step's choice (`draft_max` in settings and options). A proposal's `q` is the distribution each token
was drawn from; None marks a deterministic proposal, verified by the point-mass rule (see verify.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from ... import defaults
from ..sampling import Dist, Rng, SamplingParams

if TYPE_CHECKING:
    from ..llama import Context
    from ..matcher import Matcher
    from .vocab_bridge import VocabBridge


@dataclass
class Draft:
    """A proposal: tokens, the distributions they were sampled from (None: deterministic), and each
    token's estimated chance of acceptance given that those before it were accepted."""

    tokens: list[int] = field(default_factory=list)
    q: list[Dist] | None = None
    confidence: list[float] | None = None

    def cut(self, k: int) -> Draft:
        """The first k tokens of this proposal (a deterministic one may be cut anywhere)."""
        return Draft(
            self.tokens[:k],
            None if self.q is None else self.q[:k],
            None if self.confidence is None else self.confidence[:k],
        )


@dataclass(frozen=True)
class DraftTuning:
    """What a policy sets in every drafter: the most draft tokens a step may verify, the draft
    models' early stop (below `draft_p_min` after `draft_min` tokens) and prompt lookup's match
    lengths."""

    k_max: int = 0
    draft_min: int = defaults.DRAFT_MIN
    draft_p_min: float = defaults.DRAFT_P_MIN
    ngrams: tuple[int, int] = (defaults.NGRAM_MIN, defaults.NGRAM_MAX)


@dataclass(frozen=True)
class Sources:
    """What drafters are built from (the registry's input): the target's context, a draft model's
    context with how its vocabulary meets the target's, and a head context (the target's own MTP
    heads, a Gemma 4 assistant's on the target's cache, or an EAGLE-3 or DFlash head's reading
    the target's layer inputs)."""

    target: Context
    draft: Context | None = None
    text: bool = False  # the draft model has another vocabulary: it drafts through text
    bridge: VocabBridge | None = None  # the draft's vocabulary is the target's, padded to another size
    head: Context | None = None
    assistant: bool = False  # the head context is a Gemma 4 assistant's
    chained_heads: int = 0  # MTP heads trained one per depth (0: one head reused at every depth)
    feature_head: str | None = None  # the head context is an EAGLE-3 or DFlash head's (defaults.EAGLE3, DFLASH)


@dataclass(frozen=True)
class DraftRequest:
    """What one sequence asks of a drafter this step: up to k tokens to follow its history; for a
    constrained sequence, `guide`: its constraint where the history ends, for the drafter to
    follow (a drafter that draws its tokens must then draw them from what the guide allows, and
    advance it by each)."""

    seq: int
    history: Sequence[int]
    k: int
    sampling: SamplingParams
    rng: Rng
    guide: Matcher | None = None


@dataclass(frozen=True)
class DraftPass:
    """One pass a drafter ran: its rows and seconds (for its cost curve)."""

    rows: int
    seconds: float


@dataclass
class Proposals:
    """A drafter's answer to one step's requests: a draft per sequence, and the passes it ran."""

    drafts: dict[int, Draft] = field(default_factory=dict)
    passes: list[DraftPass] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return sum(p.seconds for p in self.passes)


def handed(given: Sequence[object], kind: type | None) -> object | None:
    """What a caller hands the drafter that `takes` values of `kind`: the first of `given` of that
    type (None where the drafter takes nothing, or nothing of its type was given)."""
    if kind is None:
        return None
    return next((value for value in given if isinstance(value, kind)), None)


class Drafter(Protocol):
    """Anything that drafts for sequences of the engine.

    `ahead`: its proposals cost next to nothing and know how likely each token is (prompt lookup),
    so they are made for every sequence before the step is planned and judged as they stand; other
    drafters are asked only for the sequences the plan gives them, and judged by their estimates.
    `ctx`: the context holding its own cache (sequence ids shared with the target's), or None.
    `saved_with_target`: that cache holds only what it read of its sequence's history, so the
    prompt cache saves and restores it beside the target's (engine/prompt_cache.py).
    `k_max`: the most tokens it drafts in a step (None: any).
    `runs_model`: it runs the session's draft model (one such drafter per session: its costs are
    timed as the draft model's, and modes that name the draft model draft with it).
    `reads_layer_inputs`: it reads the target's layer inputs, which the target then captures on
    every pass while it may draft.
    `drafts_blocks`: a draft of m tokens is one pass over m + 1 rows (priced per block, not per token).
    `runs_head`: it runs the session's head context (its costs are timed as the head's).
    `holds_target_tokens`: its cache holds the target's own token ids at the target's positions,
    so runs of cached tokens a new prompt keeps move in it as in the target's (engine/kv_reuse.py).
    `defers_to`: another drafter's name, whose proposal for the same sequence the step hands to
    `beside` so that what both propose is judged once (None: it stands alone).
    `takes`: the type of what a caller hands it at `begin` (None: nothing).
    `title`: what it is called where people read it ("prompt lookup")."""

    name: str
    title: str
    ahead: bool
    ctx: Context | None
    saved_with_target: bool
    k_max: int | None
    runs_model: bool
    reads_layer_inputs: bool
    drafts_blocks: bool
    runs_head: bool
    holds_target_tokens: bool
    defers_to: str | None
    takes: type | None

    def beside(self, own: Draft, other: Draft | None) -> Draft:
        """Its proposal as it stands beside `defers_to`'s for the same sequence."""

    def configure(self, tuning: DraftTuning) -> None:
        """Draft as `tuning` says from now on."""

    def begin(self, seq: int, prompt: Sequence[int], given: object | None) -> None:
        """A generation of `prompt` starts on `seq`; `given` is what its caller hands this drafter,
        a value of its `takes` type (a session's prompt lookup that outlives its generations, a
        request's predicted output), or None."""

    def finish(self, seq: int, history: Sequence[int]) -> None:
        """The generation on `seq` is over; `history` is its prompt and answer."""

    def propose(self, requests: Sequence[DraftRequest]) -> Proposals:
        """Up to `k` tokens for each request (fewer, or none, when it has nothing worth verifying)."""

    def lag(self, seq: int, history: Sequence[int]) -> int:
        """Tokens of `history` it must read before it can draft (0 for a drafter without a cache)."""

    def read(self, items: Sequence[tuple[int, Sequence[int]]]) -> Proposals:
        """Read (sequence, prompt) pairs ahead of the first proposal; drafts nothing."""

    def learn(self, seq: int, drafted: int, accepted: int) -> None:
        """How many of the sequence's last proposal's tokens the target accepted."""

    def forget(self, seq: int) -> None:
        """The sequence's caches were dropped: drop what is kept for it, its own cache included."""


class Traits:
    """The traits a drafter declares, as most drafters have them; a drafter class sets the ones
    that differ."""

    ahead = False
    ctx = None
    saved_with_target = False
    k_max = None
    runs_model = False
    reads_layer_inputs = False
    drafts_blocks = False
    runs_head = False
    holds_target_tokens = False
    defers_to = None
    takes = None

    def beside(self, own: Draft, other: Draft | None) -> Draft:
        return own
