"""Predicted outputs: the text a client expects back (the file before its edit) drafts the answer.

The prediction is followed like a copy prompt lookup found: a PromptLookup indexes the prediction
followed by the answer so far, and its copy cursor starts at the prediction's first token, keeps
its place token by token, finds it again after an insertion or deletion (near where the copy broke
off, nearest ahead first) and repeats the replacements it has seen. Its proposals are
deterministic, so they are verified by the point-mass rule and the answer's distribution is the
target's at every temperature.
"""

from __future__ import annotations

from collections.abc import Sequence

from ... import defaults
from .ahead import AheadDrafter
from .prompt_lookup import PromptLookup
from .protocol import Draft, DraftRequest, DraftTuning, Proposals, Sources

SEPARATOR = -1  # before and after the prediction: never a token, so no draft runs past its end
START_RUN = 8  # a prediction is trusted at first as a copy that has run this many tokens


class Prediction:
    """One sequence's prediction: its tokens, the prompt length the answer starts after, and the
    lookup that follows it (its own estimates of how well the prediction holds)."""

    def __init__(self, tokens: Sequence[int], n_prompt: int, tuning: DraftTuning):
        self.prefix = [SEPARATOR, *tokens, SEPARATOR]
        self.n_prompt = n_prompt
        self.lookup = PromptLookup(*tuning.ngrams, k_max=tuning.k_max)
        self.lookup.index.sync(self.prefix)
        cursor = self.lookup.cursor
        cursor.seen = len(self.prefix)
        cursor.pos, cursor.run, cursor.found_near = 1, START_RUN, True
        # Copying from the first token on, but judged by how much the answer does copy from then on,
        # as prompt lookup's copies are: trusting a whole window of copying up front kept long
        # drafts going through dense edits (a rename on every line) that prompt lookup cut short.
        cursor.copy_share, cursor.followed = 1.0, 1

    def history(self, history: Sequence[int]) -> list[int]:
        """What the lookup indexes: the prediction, then the answer so far."""
        return self.prefix + list(history[self.n_prompt :])

    def feedback(self, drafted: int, accepted: int) -> None:
        self.lookup.feedback(drafted, accepted)

    def propose(self, history: Sequence[int], k: int):
        draft = self.lookup.propose(self.history(history), k)
        if SEPARATOR in draft.tokens:
            draft = draft.cut(draft.tokens.index(SEPARATOR))
        return draft


class PredictionDrafter(AheadDrafter):
    """Drafts each sequence's answer from the prediction its request brought (`begin` with a token
    list); a sequence without one gets no proposals."""

    name = defaults.PREDICTION

    def __init__(self, tuning: DraftTuning = DraftTuning()):
        super().__init__()
        self.tuning = tuning

    def configure(self, tuning: DraftTuning) -> None:
        self.tuning = tuning

    def begin(self, seq: int, prompt: Sequence[int], given: object | None) -> None:
        self.states.pop(seq, None)
        if given is not None and len(given) > 0:
            self.states[seq] = Prediction(list(given), len(prompt), self.tuning)

    def propose(self, requests: Sequence[DraftRequest]) -> Proposals:
        """A proposal for every request, empty without a prediction: the planner then knows there
        is nothing in hand, rather than a drafter to try."""
        out = Proposals()
        for request in requests:
            state = self.states.get(request.seq)
            out.drafts[request.seq] = state.propose(request.history, request.k) if state is not None else Draft()
        return out

    def finish(self, seq: int, history: Sequence[int]) -> None:
        self.states.pop(seq, None)


def build(sources: Sources) -> PredictionDrafter:
    """A prediction needs nothing but its tokens: every session has it."""
    return PredictionDrafter()
