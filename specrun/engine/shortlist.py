"""A row of logits cut to its top-k candidates inside llama.cpp's graph.

Sampling starts with top-k, so once llama.cpp has applied it (a backend sampler chain on the
sequence) the host only ever needs the k survivors: their ids and untempered logits. Reading k
numbers instead of a 150k-vocabulary row spares the host the pass over the row (which runs from
cold caches right after every CPU pass) and a GPU the copy of the row to the host. Greedy rows are
cut to k = 1: the argmax. Every consumer of a row (verification, the draft's choice, the first
token after a prompt) takes a `Shortlist` wherever it takes a full row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Shortlist:
    """Candidates of one row (1-D: numpy arrays, or Python lists as a single row is read) or of
    several (2-D numpy arrays, one row each): ids and logits."""

    ids: np.ndarray | list[int]  # int32
    logits: np.ndarray | list[float]  # float32 values, same shape

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self.ids),) if isinstance(self.ids, list) else self.ids.shape

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> Shortlist:
        return Shortlist(self.ids[i], self.logits[i])

    def reshape(self, rows: int, _columns: int = -1) -> Shortlist:
        """As `rows` rows of numpy arrays (a single row becomes a block of one), as ndarray.reshape would."""
        if isinstance(self.ids, list) or self.ids.ndim == 1:
            if rows != 1:
                raise ValueError(f"one row cannot become {rows}")
            return Shortlist(
                np.asarray(self.ids, dtype=np.int32)[None, :], np.asarray(self.logits, dtype=np.float32)[None, :]
            )
        if self.ids.shape[0] != rows:
            raise ValueError(f"{self.ids.shape[0]} rows cannot become {rows}")
        return self

    def argmax(self) -> int:
        """The id of one row's largest logit (the first of equal ones, as numpy's argmax)."""
        if isinstance(self.logits, list):
            return self.ids[self.logits.index(max(self.logits))]
        return int(self.ids[int(np.argmax(self.logits))])


def argmax(row) -> int:
    """The argmax id of one row: a full vocabulary row or a Shortlist."""
    return row.argmax() if isinstance(row, Shortlist) else int(np.argmax(row))


def argmax_rows(rows) -> np.ndarray:
    """The argmax id of every row of a block: full rows or a Shortlist."""
    if isinstance(rows, Shortlist):
        return rows.ids[np.arange(rows.ids.shape[0]), np.argmax(rows.logits, axis=1)]
    return np.argmax(rows, axis=1)
