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
The matcher consumes every token verification keeps, and nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .matcher import Matcher
from .sampling import Dist, Rng, SamplingParams
from .shortlist import Shortlist
from .verify import Verdict


def restricted_row(row: np.ndarray, matcher: Matcher) -> np.ndarray:
    """The row with every token the constraint refuses at -inf (a copy: rows may be llama.cpp's buffer)."""
    return np.where(matcher.allowed(), row, -np.inf).astype(np.float32, copy=False)


def constrained_dist(row: np.ndarray, sampling: SamplingParams, matcher: Matcher) -> Dist:
    """The target's distribution at this position under the constraint (sampling only). Few allowed
    tokens (a number, a key) are taken as a shortlist of their own; most of the vocabulary (inside a
    string) as the row with the rest masked, where top-k's threshold search stays quick."""
    mask = matcher.allowed()
    ids = np.flatnonzero(mask)
    if len(ids) * 2 < len(mask):
        dist = sampling.dist(Shortlist(ids.astype(np.int32), row[ids]))
    else:
        dist = sampling.dist(np.where(mask, row, -np.inf).astype(np.float32, copy=False))
    if all(p > 0 for p in dist.p):
        return dist
    kept = [(i, p) for i, p in zip(dist.ids, dist.p) if p > 0]
    return Dist(tuple(i for i, _ in kept), tuple(p for _, p in kept))


def guided_row(row, matcher: Matcher):
    """A draft's row restricted to what its constraint allows: a full row masked, or a shortlist
    cut to its allowed candidates (None when none is: the draft stops there)."""
    mask = matcher.allowed()
    if isinstance(row, Shortlist):
        ids = np.asarray(row.ids)
        keep = mask[ids]
        if not keep.any():
            return None
        return Shortlist(ids[keep], np.asarray(row.logits)[keep])
    ids = np.flatnonzero(mask)
    if len(ids) * 2 < len(mask):  # few allowed: their own shortlist, as constrained_dist takes them
        return Shortlist(ids.astype(np.int32), row[ids]) if len(ids) else None
    return np.where(mask, row, -np.inf).astype(np.float32, copy=False)


def constrained_pick(row: np.ndarray, sampling: SamplingParams, rng: Rng, matcher: Matcher) -> int:
    """The next token from one full row under the constraint: the best allowed, or a draw."""
    if sampling.greedy:
        best = int(np.argmax(row))
        if matcher.allows(best):
            return best
        matcher.masked_rows += 1
        return int(np.argmax(restricted_row(row, matcher)))
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
        q = q_rows[i] if q_rows is not None and token is not None else None
        if i < forced or _accepts(token, rows[i - forced], q, sampling, rng, matcher):
            matcher.consume([token])
            kept.append(token)
            if matcher.stopped:  # the constraint is complete: the answer ends with this token
                return Verdict(i, kept)
            continue
        matcher.consume([choice := _replacement(token, rows[i - forced], q_rows, i, sampling, rng, matcher)])
        return Verdict(i, kept + [choice])
    raise AssertionError("unreachable: the last row always ends verification")


def _accepts(token: int | None, row, q: Dist | None, sampling: SamplingParams, rng: Rng, matcher: Matcher) -> bool:
    """Whether the draft token at this row is kept (never the row after the last draft token)."""
    if token is None:
        return False
    if sampling.greedy:
        return constrained_pick(row, sampling, rng, matcher) == token
    q_token = 1.0 if q is None else q.prob(token)
    return q_token > 0 and rng.random() * q_token < constrained_dist(row, sampling, matcher).prob(token)


def _replacement(token, row, q_rows, i: int, sampling: SamplingParams, rng: Rng, matcher: Matcher) -> int:
    """The target's token at the first rejection (or after the last draft token): the best allowed
    when greedy, else a draw from the residual of the constrained distribution."""
    if sampling.greedy:
        return constrained_pick(row, sampling, rng, matcher)
    p = constrained_dist(row, sampling, matcher)
    if token is None:
        return p.sample(rng)
    residual = p.without(token) if q_rows is None else p.minus(q_rows[i])
    return (residual or p).sample(rng)
