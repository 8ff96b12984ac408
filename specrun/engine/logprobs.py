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


def log_softmax(row: np.ndarray) -> np.ndarray:
    """The row's log-softmax, computed in float64 (a vocabulary of 150,000 logits sums badly in float32)."""
    values = np.asarray(row, dtype=np.float64)
    shifted = values - values.max()
    return shifted - np.log(np.exp(shifted).sum())


def top_of(logprobs: np.ndarray, n: int) -> tuple[tuple[int, float], ...]:
    """The n likeliest (id, log-probability), likeliest first (the lower id first on a tie)."""
    if n <= 0:
        return ()
    n = min(n, logprobs.shape[0])
    picked = np.argpartition(-logprobs, n - 1)[:n]
    ordered = sorted(picked.tolist(), key=lambda i: (-logprobs[i], i))
    return tuple((int(i), float(logprobs[i])) for i in ordered)


def token_logprobs(rows: np.ndarray, tokens: Sequence[int], top: int) -> list[TokenLogprob]:
    """Each token's log-probability under its row (row i: the distribution token i came from) and
    the `top` likeliest tokens of that row. `rows` are full rows of logits, one per token at least."""
    block = np.asarray(rows).reshape(-1, rows.shape[-1])
    out = []
    for i, token in enumerate(tokens):
        logprobs = log_softmax(block[i])
        out.append(TokenLogprob(int(token), float(logprobs[token]), top_of(logprobs, top)))
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
