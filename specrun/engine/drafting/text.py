"""A draft model of another vocabulary, drafting through text.

The draft model reads the target's history as text (the target's tokens rendered, control tokens
as their text, then tokenized the draft's way), continues it in its own tokens, and its draft is
turned back into the target's tokens. Tokenizing a concatenation is not concatenating
tokenizations, so the boundary is handled by re-tokenizing a few committed target tokens with the
draft text: where those tokens come out as they were, what follows them is the proposal;
otherwise (the draft's first characters would merge with the committed ones) the draft text is
tokenized alone. Drafts are greedy, so a proposal depends only on the history, never on the
target's random draws: the point-mass rule verifies it exactly at any temperature (verify.py).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from ... import defaults
from ..llama import Context, common_prefix
from ..model import Model
from ..sampling import SamplingParams
from .model import ModelDrafter
from .protocol import Draft, DraftPass, DraftRequest, DraftTuning, Proposals, Sources, Traits

GREEDY = SamplingParams(temperature=0.0)
TAIL = 3  # committed target tokens re-tokenized with each draft


def complete_utf8(data: bytes) -> bytes:
    """`data` without a UTF-8 sequence cut short at its end (a draft may stop mid-character)."""
    for cut in range(min(3, len(data)) + 1):
        head = data[: len(data) - cut]
        try:
            head.decode("utf-8")
            return head
        except UnicodeDecodeError:
            continue
    return data.decode("utf-8", "ignore").encode("utf-8")


def with_host_time(made: Proposals, seconds: float) -> Proposals:
    """`made` with its passes costing all of `seconds`: the host's rendering and re-tokenizing
    (which the draft model's passes do not time) spread over them evenly. Auto, the statistics and
    the bench's cost model then weigh a text drafter at what it really costs."""
    if made.passes:
        extra = max(0.0, seconds - made.seconds) / len(made.passes)
        made.passes = [DraftPass(p.rows, p.seconds + extra) for p in made.passes]
    return made


class _Rendered:
    """One sequence's history as the draft reads it: the target tokens rendered so far, their
    bytes, and the draft's tokens for the last text tokenized."""

    def __init__(self):
        self.tokens: list[int] = []
        self.ends: list[int] = []  # byte offset after each rendered token
        self.data = bytearray()
        self.key: int | None = None
        self.ids: list[int] = []


class TextDrafter(Traits):
    """Drafts for the target with a model of another vocabulary on its own context (sequence ids
    shared with the target's); stops a draft early below `draft_p_min` after `draft_min` tokens, as
    the draft model does."""

    name = defaults.TEXT
    title = "draft model, through text"
    runs_model = True

    def __init__(self, ctx: Context, target: Model, *, tuning: DraftTuning = DraftTuning()):
        self.ctx = ctx
        self.target = target
        self.draft = ctx.model
        self.inner = ModelDrafter(ctx, tuning=tuning)
        self._rendered: dict[int, _Rendered] = {}

    def configure(self, tuning: DraftTuning) -> None:
        self.inner.configure(tuning)

    def begin(self, seq: int, prompt: Sequence[int], given: object | None) -> None:
        """The rendering follows the history at the next proposal; nothing to do here."""

    def finish(self, seq: int, history: Sequence[int]) -> None:
        """Nothing outlives a generation here."""

    # -- the target's history as the draft's tokens -------------------------------------------

    def _piece(self, token: int) -> bytes:
        return b"" if token == self.target.bos else self.target.piece(token, special=True)

    def draft_ids(self, seq: int, history: Sequence[int]) -> list[int]:
        """The draft's tokens for the text of `history` (its complete characters)."""
        rendered = self._rendered.setdefault(seq, _Rendered())
        keep = common_prefix(rendered.tokens, history)
        if keep < len(rendered.tokens):
            del rendered.tokens[keep:]
            del rendered.ends[keep:]
            del rendered.data[rendered.ends[-1] if rendered.ends else 0 :]
        for token in history[keep:]:
            rendered.data += self._piece(token)
            rendered.tokens.append(token)
            rendered.ends.append(len(rendered.data))
        text = complete_utf8(bytes(rendered.data))
        if rendered.key != len(text):
            rendered.ids = self.draft.tokenize(text, add_special=True, parse_special=True)
            rendered.key = len(text)
        return rendered.ids

    def to_target(self, draft_tokens: Sequence[int], history: Sequence[int]) -> list[int]:
        """The target's tokens for the text of a draft that follows `history` (see the module docstring)."""
        text = complete_utf8(b"".join(self.draft.piece(t, special=True) for t in draft_tokens))
        if not text:
            return []
        for tail in range(min(TAIL, len(history)), 0, -1):
            committed = list(history[-tail:])
            head = b"".join(self._piece(t) for t in committed)
            if complete_utf8(head) != head or not head:
                continue  # the tail starts inside a character: take fewer tokens
            ids = self.target.tokenize(head + text, add_special=False, parse_special=True)
            if ids[:tail] == committed:
                return ids[tail:]
            break
        return self.target.tokenize(text, add_special=False, parse_special=True)

    # -- the drafter interface ----------------------------------------------------------------

    def lag(self, seq: int, history: Sequence[int]) -> int:
        ids = self.draft_ids(seq, history)
        return len(ids) - self.ctx.common_prefix(seq, ids)

    def read(self, items: Sequence[tuple[int, Sequence[int]]]) -> Proposals:
        start = time.perf_counter()
        made = self.inner.read([(seq, self.draft_ids(seq, history)) for seq, history in items])
        return with_host_time(made, time.perf_counter() - start)

    def propose(self, requests: Sequence[DraftRequest]) -> Proposals:
        start = time.perf_counter()
        inner = [DraftRequest(r.seq, self.draft_ids(r.seq, r.history), r.k, GREEDY, r.rng) for r in requests]
        made = self.inner.propose(inner)
        out = Proposals(passes=made.passes)
        for request in requests:
            drafted = made.drafts.get(request.seq)
            tokens = self.to_target(drafted.tokens, request.history)[: request.k] if drafted is not None else []
            out.drafts[request.seq] = Draft(tokens, None, [1.0] * len(tokens))
        return with_host_time(out, time.perf_counter() - start)

    def learn(self, seq: int, drafted: int, accepted: int) -> None:
        """The cache follows the history at the next proposal; nothing to do here."""

    def forget(self, seq: int) -> None:
        self._rendered.pop(seq, None)
        self.ctx.clear(seq)


def build(sources: Sources) -> TextDrafter | None:
    """The draft model's drafter, for a draft of another vocabulary."""
    if sources.draft is None or not sources.text:
        return None
    return TextDrafter(sources.draft, sources.target.model)
