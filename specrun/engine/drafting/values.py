"""Values a constrained answer copies from its prompt, drafted with the text the constraint puts
after them.

An answer under a JSON schema mostly restates its prompt: names, numbers, codes and phrases,
each wrapped in keys and quotes. Prompt lookup matches tokens, and a value's tokens in JSON are
not the prompt's (`"Hannah` has no space before the name, ` Hannah` in prose does), so it finds
little. This drafter works on text: it takes the value the answer has begun (the text after its
last quote, colon, comma or bracket), finds it in the prompt (at the start of a word, first
after where the last value was found: values are usually listed in the prompt's order), copies
the prompt's text up to the next delimiter, closes the value with the first of `"`, `,`, `}`, `]`
the constraint accepts there, and adds what the constraint then forces (the next key). The
text is tokenized as the vocabulary tokenizes it alone and cut where the constraint refuses. A
model may close a value with other tokens than that (`",` then `"owner`, not `","`): the closing
is drafted only with a first token this answer has already written, else the draft stops at the
value's end and the target writes the closing itself. Its proposals are deterministic (the
point-mass rule keeps sampling exact), and each carries the acceptance this sequence's earlier
proposals had.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ... import defaults
from ..llama import common_prefix
from ..matcher import Matcher
from .ahead import AheadDrafter
from .protocol import Draft, DraftRequest, DraftTuning, Proposals, Sources

VALUE_STARTS = b'":,[{'  # the answer's last one of these is where the value being written began
DELIMITERS = b',;()\n"'  # where a value copied from the prompt ends
NUMBER = b"0123456789.eE+-"
CLOSERS = (b'"', b",", b"}", b"]")  # tried in order after the copied text: the first one allowed closes it
VALUE_MAX = 96  # bytes copied at most
KEY_MAX = 256  # bytes before a value its key is looked for in
KEY_BEFORE = re.compile(rb'"((?:[^"\\]|\\.)*)"\s*:\s*"?\Z')  # the key a value is written under
FINISHED_VALUE = re.compile(rb'"((?:[^"\\]|\\.)*)"\s*:\s*"((?:[^"\\]|\\.)*)"')  # a key's finished string value
FIRST_PRIOR = 0.6  # acceptance of a proposal's first token, before any outcome
REST_PRIOR = 0.9  # of a token after an accepted one
PRIOR_WEIGHT = 4.0
DECAY = 0.9  # every outcome decays the earlier ones: the last ten or so carry the estimates


class ValueCopy:
    """One constrained sequence's copying of its prompt's values."""

    def __init__(self, prompt: Sequence[int]):
        self.prompt = prompt
        self.text: bytes | None = None  # the prompt's text, decoded on first use
        self.answer = bytearray()  # the answer's text so far
        self.seen: list[int] = []  # the answer tokens it was decoded from
        self.ends: list[int] = []  # where each of them ends in `answer`
        self.found_at = 0  # where in the prompt's text the last value was found
        self.first = [0.0, 0.0]  # [accepted, trials] of first tokens
        self.rest = [0.0, 0.0]  # of tokens after an accepted one
        self.pending: tuple[int, list[int]] | None = None  # an unjudged proposal: (history length, tokens)

    # -- estimates ----------------------------------------------------------------------------

    def confidences(self, n: int) -> list[float]:
        first = (self.first[0] + PRIOR_WEIGHT * FIRST_PRIOR) / (self.first[1] + PRIOR_WEIGHT)
        rest = (self.rest[0] + PRIOR_WEIGHT * REST_PRIOR) / (self.rest[1] + PRIOR_WEIGHT)
        return [first] + [rest] * (n - 1)

    def feedback(self, drafted: int, accepted: int) -> None:
        if self.pending is not None:
            self.pending = None
            self._learn(drafted, accepted)

    def _learn(self, drafted: int, accepted: int) -> None:
        for row in (self.first, self.rest):
            row[0] *= DECAY
            row[1] *= DECAY
        self.first[1] += 1
        if accepted:
            self.first[0] += 1
            tried = min(drafted, accepted + 1) - 1  # tokens after the first that were judged
            self.rest[0] += accepted - 1
            self.rest[1] += tried

    def _judge_unused(self, history: Sequence[int]) -> None:
        """A proposal that was not drafted is judged by the tokens that came after it."""
        if self.pending is None:
            return
        start, tokens = self.pending
        actual = list(history[start : start + len(tokens)])
        if not actual:  # nothing written after it yet (or the history was cut back before it)
            return
        self.pending = None
        self._learn(len(actual), common_prefix(tokens, actual))

    # -- proposing ----------------------------------------------------------------------------

    def propose(self, history: Sequence[int], k: int, guide: Matcher) -> Draft:
        self._judge_unused(history)
        if k <= 0:
            return Draft()
        if self.text is None:
            self.text = guide.decode(self.prompt)
        self._read_answer(history, guide)
        value, key = self._value()
        if not value:
            return Draft()
        at = self._find(value)
        if at < 0:
            return Draft()
        tokens = self._continuation(at + len(value), value, guide, self._most_words(key))[:k]
        if not tokens:
            return Draft()
        self.found_at = at
        self.pending = (len(history), tokens)
        return Draft(tokens, None, self.confidences(len(tokens)))

    def _read_answer(self, history: Sequence[int], guide: Matcher) -> None:
        """Keep `answer` the text of the history after the prompt (a lead the target rejected is
        taken back)."""
        tokens = history[len(self.prompt) :]
        keep = common_prefix(self.seen, tokens)
        if keep < len(self.seen):
            del self.seen[keep:], self.ends[keep:]
            del self.answer[self.ends[-1] if self.ends else 0 :]
        for token in tokens[keep:]:
            self.answer += guide.decode([token])
            self.seen.append(token)
            self.ends.append(len(self.answer))

    def _value(self) -> tuple[bytes, bytes | None]:
        """The value the answer is writing (its text after the last quote, colon, comma or
        bracket), and the key it is written under (None: not a key's value)."""
        answer = self.answer
        start = max(answer.rfind(b) for b in (bytes([c]) for c in VALUE_STARTS)) + 1
        value = bytes(answer[start:])
        if not value.strip():
            return b"", None
        key = KEY_BEFORE.search(answer, max(0, start - KEY_MAX), start)
        return value, (key.group(1) if key else None)

    def _most_words(self, key: bytes | None) -> int | None:
        """The most words a finished value of `key` has had in this answer (None: none finished):
        a field's values run to similar lengths, and a copy from prose runs on past a short one
        (`Rosa` in `Rosa will fix the backup job`)."""
        if key is None:
            return None
        most = None
        for match in FINISHED_VALUE.finditer(self.answer):
            if match.group(1) == key:
                words = len(match.group(2).split())
                most = words if most is None else max(most, words)
        return most

    def _find(self, value: bytes) -> int:
        """Where `value` starts a word in the prompt: first from the last value found on, else from
        the prompt's start (-1: nowhere)."""
        text = self.text
        for start in (self.found_at, 0):
            at = text.find(value, start)
            while at >= 0:
                if at == 0 or not text[at - 1 : at].isalnum():
                    return at
                at = text.find(value, at + 1)
        return -1

    def _continuation(self, end: int, value: bytes, guide: Matcher, most_words: int | None = None) -> list[int]:
        """The prompt's text after the value up to a delimiter (a number stops at its last digit;
        a string at `most_words` words, where known), the closer the constraint accepts after it
        and the text it then forces, as tokens the constraint accepts."""
        text = self.text
        numeric = all(c in NUMBER for c in value)
        stop = end
        while stop < len(text) and stop - end < VALUE_MAX:
            c = text[stop]
            if c in DELIMITERS or (numeric and c not in NUMBER):
                break
            if c == ord(".") and not text[stop + 1 : stop + 2].isdigit():
                break  # a sentence's full stop, not a decimal point
            stop += 1
        copied = text[end:stop].rstrip()
        if numeric:
            copied = copied.rstrip(b".")
        elif most_words is not None:
            copied = _within_words(value, copied, most_words)
        body = guide.tokenize(copied) if copied else []
        valid = guide.valid_prefix(body)
        if valid < len(body):
            return body[:valid]
        after = guide.fork(body)
        for closer in CLOSERS:
            close = guide.tokenize(closer)
            if after.valid_prefix(close) == len(close):
                closed = after.fork(close)
                draft = guide.tokenize(copied + closer + closed.forced_text())
                draft = draft[: guide.valid_prefix(draft)]
                own = common_prefix(body, draft)
                if own < len(draft) and draft[own] not in self.seen:
                    return body  # the model closes values with other tokens than the text's own: it writes them
                return draft
        return body


def _within_words(value: bytes, copied: bytes, most: int) -> bytes:
    """`copied` cut where the value it continues would begin word `most` + 1."""
    words = len(value.split())
    in_word = not value[-1:].isspace()
    for i, c in enumerate(copied):
        if chr(c).isspace():
            in_word = False
        elif not in_word:
            words, in_word = words + 1, True
            if words > most:
                return copied[:i].rstrip()
    return copied


class ValueDrafter(AheadDrafter):
    """Copies prompt values into each constrained sequence's answer (`begin` keeps its prompt); a
    sequence without a constraint gets no proposals."""

    name = defaults.VALUES
    title = "values copied from the prompt"

    def configure(self, tuning: DraftTuning) -> None:
        """Nothing to tune: it copies what the prompt holds, and the plan cuts it to K."""

    def begin(self, seq: int, prompt: Sequence[int], given: object | None) -> None:
        self.states[seq] = ValueCopy(list(prompt))

    def propose(self, requests: Sequence[DraftRequest]) -> Proposals:
        out = Proposals()
        for request in requests:
            state = self.states.get(request.seq)
            if state is None or request.guide is None:
                out.drafts[request.seq] = Draft()
            else:
                out.drafts[request.seq] = state.propose(request.history, request.k, request.guide)
        return out

    def finish(self, seq: int, history: Sequence[int]) -> None:
        self.states.pop(seq, None)


def build(sources: Sources) -> ValueDrafter:
    """Copying values needs nothing but the constraint's view of the vocabulary: every session."""
    return ValueDrafter()
