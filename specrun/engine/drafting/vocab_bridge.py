"""Token ids between a target and a draft model whose vocabularies are the same but for their size."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..model import Model


class VocabBridge:
    """Token ids between a target and a draft whose vocabularies differ in size.

    Compatible models share every id below the smaller size (llama.cpp allows up to 128 ids of
    difference, usually padding). The draft must never propose an id the target lacks, so its
    logits are cut to the target's size before anything is chosen from them (its proposal
    distribution then lies on ids the target has). The draft model must never be fed an id it
    lacks, so such ids in the history are replaced, one for one, by the draft's first token for
    the same text: the draft then reads nearly the same context, and since verification decides
    alone what is kept, the output stays exactly the target's.
    """

    def __init__(self, target: Model, draft: Model):
        self.target_size = target.n_vocab
        self.draft_size = draft.n_vocab
        self._target = target
        self._draft = draft
        self._substitutes: dict[int, int] = {}

    @property
    def identity(self) -> bool:
        return self.target_size == self.draft_size

    def proposal_logits(self, logits: np.ndarray) -> np.ndarray:
        """The draft's logits restricted to ids the target has."""
        return logits[: self.target_size] if self.draft_size > self.target_size else logits

    def feedable(self, tokens: Sequence[int]) -> list[int]:
        """`tokens` with every id the draft lacks replaced (a copy; unchanged when none is)."""
        if self.target_size <= self.draft_size:
            return list(tokens)
        size = self.draft_size
        return [t if t < size else self._substitute(t) for t in tokens]

    def _substitute(self, token: int) -> int:
        if token not in self._substitutes:
            text = self._target.piece(token)
            ids = (
                self._draft.tokenize(text.decode("utf-8", "replace"), add_special=False, parse_special=False)
                if text
                else []
            )
            self._substitutes[token] = next((i for i in ids if i < self.draft_size), 0)
        return self._substitutes[token]
