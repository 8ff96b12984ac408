"""Hybrid drafting: prompt lookup where it has a confident match, the draft model everywhere else.

Copied stretches then cost nothing to draft, and free-form text still gets the model's drafts.
"""

from __future__ import annotations

from typing import Sequence

from .protocol import Draft, Drafter


class HybridDrafter:
    """Asks `lookup` first and keeps its draft when the first token's confidence reaches
    `min_confidence`; otherwise asks `model`. Feedback goes to whichever drafted, so each learns
    only from its own proposals."""

    name = "hybrid"

    def __init__(self, lookup: Drafter, model: Drafter, *, min_confidence: float = 0.6):
        self.lookup = lookup
        self.model = model
        self.min_confidence = min_confidence
        self._last: Drafter | None = None  # the drafter behind the last proposal, until its feedback

    @property
    def source(self) -> Drafter:
        return self._last if self._last is not None else self

    def propose(self, history: Sequence[int], k: int) -> Draft:
        draft = self.lookup.propose(history, k)
        if draft.tokens and draft.confidence and draft.confidence[0] >= self.min_confidence:
            self._last = self.lookup
            return draft
        self._last = self.model
        return self.model.propose(history, k)

    def prefill(self, prompt: Sequence[int]) -> None:
        self.model.prefill(prompt)

    def feedback(self, drafted: int, accepted: int) -> None:
        if self._last is not None:
            self._last.feedback(drafted, accepted)
            self._last = None
