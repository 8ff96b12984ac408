"""Drafting token by token, one pass per depth for every asking sequence at once: the loop the draft
model, the target's MTP heads and a Gemma 4 assistant share.

Each depth runs one pass over the sequences still drafting, picks each one's next token from its
row (greedy, or sampled with its distribution kept as q so verification stays exact), and stops a
sequence's draft at its K, at the drafter's own cap, or where its confidence falls below
`draft_p_min` after `draft_min` tokens. What a pass reads is the drafter's business: the loop only
tells it which sequences go on and with which token.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..constrained import guided_row
from ..shortlist import Shortlist, argmax
from .protocol import Draft, DraftPass, DraftRequest, DraftTuning, Proposals

# One depth's pass for the sequences still drafting (depth 0 first): each one's logits, with
# whatever the drafter needs to feed that sequence's next depth, and the pass as timed.
DepthPass = Callable[[Sequence[DraftRequest], int], tuple[Sequence[tuple[np.ndarray, Any]], DraftPass]]
# A sequence goes on to the next depth with the token just drafted and what its row carried.
Advance = Callable[[DraftRequest, int, Any], None]


def top_probability(logits) -> float:
    """Softmax probability of the argmax, without materialising the distribution (of a full row,
    or of a shortlist's candidates)."""
    if isinstance(logits, Shortlist):
        logits = np.asarray(logits.logits, dtype=np.float32)
    shifted = logits - logits.max()
    return float(1.0 / np.exp(shifted).sum())


def choose(request: DraftRequest, logits: np.ndarray, draft: Draft, depth: int, tuning: DraftTuning) -> int | None:
    """The token at `depth` of one sequence's draft, appended to it with its confidence (and its
    distribution q when sampling, so verification stays exact); None when the draft stops here:
    its confidence fell below `draft_p_min` after `draft_min` tokens, or its guide allows none of
    the row's candidates. A guided draft chooses among what its constraint allows, q restricted
    the same way, and the guide takes the token."""
    guide = request.guide
    if guide is not None:
        logits = guided_row(logits, guide)
        if logits is None:
            return None
    q = None
    if request.sampling.greedy:
        token = argmax(logits)
        confidence = top_probability(logits) if tuning.draft_p_min > 0 else 1.0
    else:
        q = request.sampling.dist(logits)
        token = q.sample(request.rng)
        confidence = q.top()
    if depth > tuning.draft_min and confidence < tuning.draft_p_min:
        return None
    draft.tokens.append(token)
    draft.confidence.append(confidence)
    if q is not None:
        draft.q.append(q)
    if guide is not None:
        guide.consume([token])
    return token


def draft_by_depth(
    requests: Sequence[DraftRequest], run: DepthPass, advance: Advance, tuning: DraftTuning, k_max: int | None = None
) -> Proposals:
    """Up to each request's k tokens (and at most `k_max`, the drafter's own cap), one `run` per
    depth for every request still drafting."""
    out = Proposals()
    live = list(requests)
    for request in live:
        out.drafts[request.seq] = Draft(q=None if request.sampling.greedy else [], confidence=[])
    depth = 0
    while live:
        rows, made = run(live, depth)
        out.passes.append(made)
        depth += 1
        still = []
        for request, (logits, carried) in zip(live, rows):
            token = choose(request, logits, out.drafts[request.seq], depth, tuning)
            if token is not None and depth < min(request.k, k_max or request.k):
                still.append(request)
                advance(request, token, carried)
        live = still
    return out
