"""Verification under a constraint: the target's distribution restricted to what the constraint
allows at each position, and the draft checked against it, so constrained speculative decoding
draws exactly what constrained plain decoding draws.

The constrained distribution at a position is the row with every refused token masked out, then
the usual sampling chain (top-k, top-p, min-p, temperature): the grammar first, as llama.cpp
applies it. Greedy: the best allowed token, which is the row's argmax whenever the constraint
allows it (one cheap check), so the mask is computed only where the model's favourite is refused.
Sampling: the accept rule and the residual run on the restricted p; a draft's q is whatever its
tokens were drawn from, restricted or not, and the rule stays exact either way. Forced tokens
(the only ones the constraint allows) lead a draft: they are accepted without a look at their rows.
The matcher consumes every token verification keeps, and nothing else. A draft under a constraint
starts with the constraint's lead and is cut where the constraint refuses a drafted token
(`constrained_draft`); drafters that draw tokens follow the constraint (`guide`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from .drafting.protocol import Draft
from .matcher import Matcher
from .sampling import Dist, Rng, SamplingParams
from .shortlist import Shortlist, argmax
from .verify import Verdict

if TYPE_CHECKING:
    from .sequence import Lead, SequenceState


def restricted_row(row: np.ndarray, matcher: Matcher) -> np.ndarray:
    """The row with every token the constraint refuses at -inf (a copy: rows may be llama.cpp's buffer)."""
    return np.where(matcher.allowed(), row, -np.inf).astype(np.float32, copy=False)


def _restricted(row: np.ndarray | Shortlist, matcher: Matcher) -> np.ndarray | Shortlist | None:
    """A row as the constraint leaves it, in the cheapest form that gives the same distribution: a
    shortlist cut to its allowed candidates; few allowed tokens of a full row (a number, a key) as
    a shortlist of their own, so top-k does not search a row of -inf; most of the vocabulary
    (inside a string) as the row masked. None when nothing allowed is left."""
    mask = matcher.allowed()
    if isinstance(row, Shortlist):
        ids = np.asarray(row.ids)
        keep = mask[ids]
        return Shortlist(ids[keep], np.asarray(row.logits)[keep]) if keep.any() else None
    ids = np.flatnonzero(mask)
    if len(ids) * 2 < len(mask):
        return Shortlist(ids.astype(np.int32), row[ids]) if len(ids) else None
    return np.where(mask, row, -np.inf).astype(np.float32, copy=False)


def constrained_dist(row: np.ndarray, sampling: SamplingParams, matcher: Matcher) -> Dist:
    """The target's distribution at this position under the constraint (sampling only)."""
    dist = sampling.dist(_restricted(row, matcher))
    if all(p > 0 for p in dist.p):
        return dist
    kept = [(i, p) for i, p in zip(dist.ids, dist.p) if p > 0]
    return Dist(tuple(i for i, _ in kept), tuple(p for _, p in kept))


def guided_row(row: np.ndarray | Shortlist, matcher: Matcher) -> np.ndarray | Shortlist | None:
    """A draft's row restricted to what its constraint allows (None when nothing is: the draft
    stops there)."""
    return _restricted(row, matcher)


def constrained_pick(row: np.ndarray, sampling: SamplingParams, rng: Rng, matcher: Matcher) -> int:
    """The next token from one full row under the constraint: the best allowed, or a draw."""
    if sampling.greedy:
        best = int(np.argmax(row))
        if matcher.allows(best):
            return best
        matcher.masked_rows += 1
        return argmax(_restricted(row, matcher))
    return constrained_dist(row, sampling, matcher).sample(rng)


def verify_constrained(
    draft: Sequence[int],
    q_rows: Sequence[Dist] | None,
    rows: np.ndarray,
    sampling: SamplingParams,
    rng: Rng,
    matcher: Matcher,
    forced: int = 0,
) -> Verdict:
    """Verify `[last] + draft` under the constraint; the first `forced` draft tokens are certain,
    and `rows` are the full rows from theirs on: (len(draft) + 1 - forced, n_vocab), or one row
    alone for a plain step (the rows predicting forced tokens are never read, so a pass need not
    return them). The matcher consumes the verdict's tokens."""
    if len(rows.shape) == 1:
        rows = rows.reshape(1, -1)
    kept: list[int] = []
    for i in range(len(draft) + 1):
        token = draft[i] if i < len(draft) else None
        choice = token if i < forced else _verdict_at(token, rows[i - forced], q_rows, i, sampling, rng, matcher)
        matcher.consume([choice])
        if choice != token:  # rejected, or the row after the last draft token
            return Verdict(i, kept + [choice])
        kept.append(token)
        if matcher.stopped:  # the constraint is complete: the answer ends with this token
            return Verdict(i, kept)
    raise AssertionError("unreachable: the last row always ends verification")


def _verdict_at(token: int | None, row, q_rows, i: int, sampling: SamplingParams, rng: Rng, matcher: Matcher) -> int:
    """The token verification keeps at this row: the draft's `token` when accepted, else the
    target's own (the best allowed when greedy; a draw from the residual of the constrained
    distribution at a rejection, or from that distribution after the last draft token). The row
    is restricted once."""
    if sampling.greedy:
        return constrained_pick(row, sampling, rng, matcher)
    p = constrained_dist(row, sampling, matcher)
    if token is None:
        return p.sample(rng)
    q_token = 1.0 if q_rows is None else q_rows[i].prob(token)
    if q_token > 0 and rng.random() * q_token < p.prob(token):
        return token
    residual = p.without(token) if q_rows is None else p.minus(q_rows[i])
    return (residual or p).sample(rng)


def guide(state: SequenceState, leads: Mapping[int, Lead]) -> Matcher | None:
    """What a drafter that draws its tokens follows: the sequence's constraint after its lead."""
    if state.matcher is None:
        return None
    lead = leads.get(state.seq)
    return state.matcher.fork(lead.tokens if lead is not None else ())


LIKELY = 0.9  # the chance a likely token of forced text is the model's own tokenization of it


def constrained_draft(state: SequenceState, lead: Lead | None, own: Draft) -> Draft:
    """The constraint's lead, then the drafter's tokens up to the first one the constraint refuses.
    A sampled draft (with q) is left whole when sampling: cutting it where a token was refused
    would change what follows a rejection there; verification rejects that token instead."""
    head = lead.tokens if lead is not None else []
    if own.tokens and (state.sampling.greedy or own.q is None):
        own = own.cut(max(0, state.matcher.valid_prefix(head + own.tokens) - len(head)))
    if lead is None:
        return own
    q = None if own.q is None else [Dist.point(t) for t in head] + list(own.q)
    certain = [1.0] * lead.certain + [LIKELY] * (len(head) - lead.certain)
    return Draft(head + own.tokens, q, certain + (own.confidence or [1.0] * len(own.tokens)))
