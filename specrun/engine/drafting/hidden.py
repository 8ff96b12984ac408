"""The target's hidden rows, kept for a head that drafts from them (MTP heads, a Gemma 4 assistant).

A target context made with hidden=True hands its rows over after every pass (`Context.on_hidden`);
they wait here, per sequence and position, until the head has read them.
"""

from __future__ import annotations

import numpy as np

from ..llama import Context


class HiddenRows:
    """Rows of `target` by sequence and position. `latest_only`: only the rows of the target's
    latest pass are ever read (a head that drafts at the one position after the target's cache),
    so older ones go as each pass arrives, however long the head is left unused."""

    def __init__(self, target: Context, width: int, *, latest_only: bool = False):
        self.latest_only = latest_only
        self._zeros = np.zeros(width, dtype=np.float32)
        self._rows: dict[int, dict[int, np.ndarray]] = {}  # seq -> position -> the target's hidden row there
        target.on_hidden = self._hidden

    def _hidden(self, seq: int, position: int, rows: np.ndarray) -> None:
        """The target decoded rows at position.. of seq: keep them for the head."""
        if self.latest_only:
            self.forget_before(seq, position)
        kept = self._rows.setdefault(seq, {})
        for i in range(len(rows)):
            kept[position + i] = rows[i]

    def row(self, seq: int, position: int) -> np.ndarray:
        """The target's row at `position` (zeros before the first; also for a row no longer kept,
        which costs acceptance only: verification decides what is kept)."""
        return self._rows.get(seq, {}).get(position, self._zeros) if position >= 0 else self._zeros

    def forget_before(self, seq: int, position: int) -> None:
        """The target's rows of `seq` before `position` are never read again."""
        kept = self._rows.get(seq)
        if kept:
            for old in [p for p in kept if p < position]:
                del kept[old]

    def forget(self, seq: int) -> None:
        self._rows.pop(seq, None)
