"""Predicted outputs: the text a client expects back (the file before its edit) drafts the answer.

The prediction is followed like a copy prompt lookup found: a PromptLookup indexes the prediction
followed by the answer so far, and its copy cursor starts at the prediction's first token, keeps
its place token by token, finds it again after an insertion or deletion (near where the copy broke
off, nearest ahead first) and repeats the replacements it has seen. An answer that opens with
other text (a code fence, a sentence) and then writes the prediction's first tokens has started
the copy the prediction announced: it is trusted from there as one that began at the first token.
It is not drafted before then (right after a fence): an edit often changes the first line, and a
long draft refused at its first token costs several steps where a pass over many rows costs
several over one. Its proposals are deterministic, so they are verified by the point-mass rule and
the answer's distribution is the target's at every temperature.

The file is usually in the prompt too, so prompt lookup often proposes the same tokens: the step
offers a proposal beside lookup's (`beside_lookup`), and a prediction changes a step's choice only
where it adds tokens. How many of its tokens an answer kept (`kept_tokens`) is counted by
following the answer through it, whichever drafter drafted them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ... import defaults
from ..llama import common_prefix
from .ahead import AheadDrafter
from .prompt_lookup import PromptLookup
from .protocol import Draft, DraftRequest, DraftTuning, Proposals, Sources

SEPARATOR = -1  # before and after the prediction: never a token, so no draft runs past its end
START_RUN = 8  # a prediction is trusted at first as a copy that has run this many tokens
OPENING_MAX = 32  # answer tokens before the prediction's first that may still be an opening


class Prediction:
    """One sequence's prediction: its tokens, the prompt length the answer starts after, and the
    lookup that follows it (its own estimates of how well the prediction holds)."""

    def __init__(self, tokens: Sequence[int], n_prompt: int, tuning: DraftTuning):
        self.prefix = [SEPARATOR, *tokens, SEPARATOR]
        self.n_prompt = n_prompt
        self.lookup = PromptLookup(*tuning.ngrams, k_max=tuning.k_max)
        self.lookup.index.sync(self.prefix)
        cursor = self.lookup.cursor
        cursor.seen, cursor.source_end = len(self.prefix), len(self.prefix)
        cursor.pos, cursor.run, cursor.found_near = 1, START_RUN, True
        # Copying from the first token on, but judged by how much the answer does copy from then on,
        # as prompt lookup's copies are: trusting a whole window of copying up front kept long
        # drafts going through dense edits (a rename on every line) that prompt lookup cut short.
        cursor.copy_share, cursor.followed = 1.0, 1
        self.started = False  # the answer has written the prediction's first tokens

    def history(self, history: Sequence[int]) -> list[int]:
        """What the lookup indexes: the prediction, then the answer so far."""
        return self.prefix + list(history[self.n_prompt :])

    def feedback(self, drafted: int, accepted: int) -> None:
        self.lookup.feedback(drafted, accepted)

    def propose(self, history: Sequence[int], k: int):
        self.lookup.observe(self.history(history))
        if not self.started:
            self._start(history[self.n_prompt :])
        draft = self.lookup.draft(k)
        if SEPARATOR in draft.tokens:
            draft = draft.cut(draft.tokens.index(SEPARATOR))
        return draft

    def _start(self, answer: Sequence[int]) -> None:
        """Place the copy after the answer's tokens that begin the prediction, once they are its
        latest: the opening before them (a fence, a sentence) says nothing about how well the
        prediction holds, so the copy is trusted as at the start, not judged by the opening."""
        longest = min(len(answer), len(self.prefix) - 2)
        begun = next((j for j in range(longest, 0, -1) if list(answer[-j:]) == self.prefix[1 : 1 + j]), 0)
        if begun == 0:
            self.started = len(answer) > OPENING_MAX
            return
        self.started = True
        cursor = self.lookup.cursor
        cursor.forget_rules()  # "learned" from the opening, as if it had replaced the prediction's start
        cursor.reset(cursor.seen)
        cursor.pos, cursor.run, cursor.found_near = 1 + begun, START_RUN + begun, True
        cursor.copy_share, cursor.followed = 1.0, 1


def kept_tokens(prediction: Sequence[int], answer: Sequence[int]) -> int:
    """How many of the prediction's tokens the answer kept, in order, as the copy follows it
    through edits: OpenAI's accepted prediction tokens (the rest were rejected), whichever drafter
    drafted them."""
    if not prediction or not answer:
        return 0
    state = Prediction(prediction, 0, DraftTuning())
    state.lookup.observe(state.history(answer))
    return min(state.lookup.cursor.kept, len(prediction))  # an answer that repeats a part keeps it once


def beside_lookup(prediction: Draft, lookup: Draft | None) -> Draft:
    """The prediction's proposal as an option beside prompt lookup's. Where both drafts begin with
    the same tokens, they follow one copy (the file is usually in the prompt too), and two
    estimates of one copy differ only by which outcomes each happened to see: taking the higher
    one drafts long where a rejected row is dear. So those shared tokens are judged as lookup
    judges them, and a prediction that adds no token after them is no option: the step then
    chooses as it would without the prediction. What it adds (a different token, or tokens past
    lookup's draft) keeps its own estimates."""
    if lookup is None or not lookup.tokens or not prediction.tokens:
        return prediction
    shared = common_prefix(prediction.tokens, lookup.tokens)
    if shared == 0:
        return prediction
    if shared == len(prediction.tokens):
        return Draft()
    own = prediction.confidence or [1.0] * len(prediction.tokens)
    judged = lookup.confidence or [1.0] * len(lookup.tokens)
    return Draft(prediction.tokens, prediction.q, judged[:shared] + own[shared:])


@dataclass(frozen=True)
class Predicted:
    """What a request hands the prediction drafter: the tokens its answer is expected to be."""

    tokens: tuple[int, ...]


class PredictionDrafter(AheadDrafter):
    """Drafts each sequence's answer from the prediction its request brought (`begin` with a
    `Predicted`); a sequence without one gets no proposals."""

    name = defaults.PREDICTION
    title = "predicted outputs"
    defers_to = defaults.LOOKUP  # the step offers its proposals beside lookup's (`beside`)
    takes = Predicted

    def __init__(self, tuning: DraftTuning = DraftTuning()):
        super().__init__()
        self.tuning = tuning

    def configure(self, tuning: DraftTuning) -> None:
        self.tuning = tuning

    def begin(self, seq: int, prompt: Sequence[int], given: object | None) -> None:
        self.states.pop(seq, None)
        if isinstance(given, Predicted) and given.tokens:
            self.states[seq] = Prediction(list(given.tokens), len(prompt), self.tuning)

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

    def beside(self, own: Draft, other: Draft | None) -> Draft:
        return beside_lookup(own, other)


def build(sources: Sources) -> PredictionDrafter:
    """A prediction needs nothing but its tokens: every session has it."""
    return PredictionDrafter()
