"""The target's log-probabilities of the tokens it commits, and of its likeliest alternatives.

A verify pass computes the target's distribution at every position it checks, so a speculative
step has each committed token's numbers at no extra pass: row i of the pass is the distribution
token i was chosen from, whichever drafter proposed it. The numbers are the target's own
log-softmax over its whole vocabulary, before temperature, top-k/top-p/min-p and any constraint
(what vLLM returns by default): the same with and without speculation, whatever was sampled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MAX_TOP = 20  # alternatives a request may ask for, as OpenAI allows


@dataclass(frozen=True)
class TokenLogprob:
    """One committed token's log-probability, and the `top` likeliest tokens' (id, log-probability),
    likeliest first."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


ROWS_AT_ONCE = 64  # rows normalised together: vectorised, in bounded scratch memory (64 × the vocabulary)


def log_normalisers(block: np.ndarray) -> np.ndarray:
    """Each row's log-sum-exp, in float64: the exponentials in float32 and in place in one scratch
    block (the time goes there), summed pairwise in float32 (within 1e-6 of a float64 sum)."""
    peak = block.max(axis=1)
    scratch = np.subtract(block, peak[:, None])
    np.exp(scratch, out=scratch)
    return peak.astype(np.float64) + np.log(scratch.sum(axis=1).astype(np.float64))


def top_ids(block: np.ndarray, n: int) -> np.ndarray:
    """Each row's n likeliest ids, likeliest first (by argmax where one is asked for)."""
    if n == 1:
        return block.argmax(axis=1)[:, None]
    picked = np.argpartition(-block, n - 1, axis=1)[:, :n]
    order = np.argsort(-np.take_along_axis(block, picked, axis=1), axis=1, kind="stable")
    return np.take_along_axis(picked, order, axis=1)


def token_logprobs(rows: np.ndarray, tokens: Sequence[int], top: int) -> list[TokenLogprob]:
    """Each token's log-probability under its row (row i: the distribution token i came from) and
    the `top` likeliest tokens of that row. `rows` are full rows of logits, one per token at least."""
    block = np.asarray(rows).reshape(-1, rows.shape[-1])
    top = min(top, block.shape[1])
    out = []
    for start in range(0, len(tokens), ROWS_AT_ONCE):
        part = block[start : start + min(ROWS_AT_ONCE, len(tokens) - start)]
        ids = np.asarray(tokens[start : start + part.shape[0]], dtype=np.int64)
        lse = log_normalisers(part)
        chosen = part[np.arange(part.shape[0]), ids] - lse
        if top > 0:
            best = top_ids(part, top)
            values = (np.take_along_axis(part, best, axis=1) - lse[:, None]).tolist()
            pairs = [tuple(zip(row, vals)) for row, vals in zip(best.tolist(), values)]
        else:
            pairs = [()] * part.shape[0]
        out += map(TokenLogprob, ids.tolist(), chosen.tolist(), pairs)
    return out


def committed(top: int | None, rows, kept: Sequence[int]) -> list[TokenLogprob]:
    """The committed tokens' log-probabilities and `top` alternatives, when asked for (None: not;
    the sequence's rows are then full rows: SequenceState.shortlist)."""
    return token_logprobs(rows, kept, top) if top is not None and kept else []


def prompt_scores(rows: np.ndarray, prompt: Sequence[int], start: int, top: int) -> list[TokenLogprob]:
    """The log-probabilities of the prompt tokens that rows read from position `start` on predict:
    row j the token at start + j + 1 (the last prompt row predicts the answer's first token)."""
    m = min(rows.shape[0], len(prompt) - start - 1)
    return token_logprobs(rows[:m], prompt[start + 1 : start + 1 + m], top) if m > 0 else []
