"""The draft-model drafter: a small model with the target's vocabulary drafts token by token."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..llama import Context, Model
from ..sampling import SamplingParams, sample
from .protocol import Draft


def top_probability(logits: np.ndarray) -> float:
    """Softmax probability of the argmax, without materialising the distribution."""
    shifted = logits - logits.max()
    return float(1.0 / np.exp(shifted).sum())


class VocabBridge:
    """Token ids between a target and a draft whose vocabularies differ in size.

    Compatible models share every id below the smaller size (llama.cpp allows up to 128 ids of
    difference, usually padding). The draft must never propose an id the target lacks, so its
    logits are cut to the target's size before anything is chosen from them, and its proposal
    distribution q is laid out on the target's vocabulary. The draft model must never be fed an
    id it lacks, so such ids in the history are replaced, one for one, by the draft's first token
    for the same text: the draft then reads nearly the same context, and since verification
    decides alone what is kept, the output stays exactly the target's.
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

    def to_target(self, q: np.ndarray) -> np.ndarray:
        """A proposal distribution over the target's vocabulary (ids the draft lacks get 0)."""
        if len(q) >= self.target_size:
            return q[: self.target_size]
        out = np.zeros(self.target_size, dtype=q.dtype)
        out[: len(q)] = q
        return out

    def feedable(self, tokens: Sequence[int]) -> list[int]:
        """`tokens` with every id the draft lacks replaced (a copy; unchanged when none is)."""
        if self.target_size <= self.draft_size:
            return list(tokens)
        size = self.draft_size
        return [t if t < size else self._substitute(t) for t in tokens]

    def _substitute(self, token: int) -> int:
        if token not in self._substitutes:
            text = self._target.piece(token)
            ids = self._draft.tokenize(text.decode("utf-8", "replace"), add_special=False, parse_special=False) if text else []
            self._substitutes[token] = next((i for i in ids if i < self.draft_size), 0)
        return self._substitutes[token]


class ModelDrafter:
    """A small model with the target's vocabulary, drafting token by token in its own KV cache.

    Drafting stops early when the draft's top probability falls below `p_min` (after `min_draft`
    tokens): an unsure draft is likely rejected and costs a draft decode per token. With a
    `bridge`, vocabularies of different sizes are reconciled (see VocabBridge).
    """

    name = "draft"

    def __init__(
        self,
        ctx: Context,
        sampling: SamplingParams,
        rng: np.random.Generator,
        *,
        p_min: float = 0.0,
        min_draft: int = 0,
        bridge: VocabBridge | None = None,
    ):
        self.ctx = ctx
        self.sampling = sampling
        self.rng = rng
        self.p_min = p_min
        self.min_draft = min_draft
        self.bridge = bridge if bridge is not None and not bridge.identity else None

    def _feedable(self, tokens: Sequence[int]) -> Sequence[int]:
        return tokens if self.bridge is None else self.bridge.feedable(tokens)

    def sync(self, history: Sequence[int]) -> np.ndarray:
        """Bring the cache in line with history (reusing the common prefix) and return next-token logits."""
        history = self._feedable(history)
        keep = self.ctx.common_prefix(history)
        if keep == len(history):
            keep -= 1  # the last position must be decoded again for its logits
        self.ctx.trim(keep)
        return self.ctx.decode(list(history[keep:]), "last")

    def catch_up(self, history: Sequence[int]) -> None:
        """Feed all of `history` but its last token, which the next proposal decodes for its logits."""
        history = self._feedable(history)
        keep = self.ctx.common_prefix(history)
        self.ctx.trim(keep)
        if keep < len(history) - 1:
            self.ctx.decode(list(history[keep:-1]), "none")

    def behind(self, history: Sequence[int]) -> int:
        """Tokens of `history` the cache lacks: what the next proposal must feed before drafting."""
        return len(history) - self.ctx.common_prefix(self._feedable(history))

    def prefill(self, prompt: Sequence[int]) -> None:
        """Feed the prompt alongside the target's prefill, so the first draft only adds one token."""
        prompt = self._feedable(prompt)
        keep = self.ctx.common_prefix(prompt)
        self.ctx.trim(keep)
        if keep < len(prompt):
            self.ctx.decode(list(prompt[keep:]), "none")

    def propose(self, history: Sequence[int], k: int) -> Draft:
        draft = Draft(probs=None if self.sampling.greedy else [], confidence=[])
        if k <= 0:
            return draft
        bridge = self.bridge
        logits = self.sync(history)
        for i in range(k):
            if bridge is not None:
                logits = bridge.proposal_logits(logits)
            if self.sampling.greedy:
                token = int(np.argmax(logits))
                confidence = top_probability(logits) if self.p_min > 0 else 1.0
            else:
                q = self.sampling.probs(logits)
                token = sample(q, self.rng)
                confidence = float(q.max())
                draft.probs.append(q if bridge is None else bridge.to_target(q))
            if i >= self.min_draft and confidence < self.p_min:
                if draft.probs:
                    draft.probs.pop()
                break
            draft.tokens.append(token)
            draft.confidence.append(confidence)
            if i + 1 < k:
                logits = self.ctx.decode([token], "last")
        return draft

    def feedback(self, drafted: int, accepted: int) -> None:
        """The cache is re-synced from the history at the next proposal; nothing to do here."""

    @property
    def source(self) -> "ModelDrafter":
        return self
