"""One sequence's constraint, matched token by token against the model's vocabulary (llguidance).

The matcher advances only on committed tokens: verification asks it, position by position, which
tokens are allowed, and what is accepted is consumed. Its vocabulary view is built once per model
(about a second for a 150k vocabulary) and shared by every sequence.
"""

from __future__ import annotations

import threading
import warnings
import weakref
from collections.abc import Sequence

import numpy as np

from .constraint import Constraint, ConstraintError, limits
from .model import Model

_LOCK = threading.Lock()
_TOKENIZERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model → its vocabulary as llguidance sees it


def grammar_tokenizer(model: Model):
    """llguidance's view of `model`'s vocabulary, built on first use and kept while the model
    lives; every end-of-generation token ends an answer the grammar allows to end."""
    with _LOCK:
        cached = _TOKENIZERS.get(model)
        if cached is None:
            from llguidance.llamacpp import lltokenizer_from_vocab  # it loads llama_cpp: only when a constraint is used

            eog = [token for token in range(model.n_vocab) if model.is_eog(token)] or [model.eos]
            with warnings.catch_warnings():  # it reads token attributes through a deprecated binding
                warnings.simplefilter("ignore", DeprecationWarning)
                cached = _TOKENIZERS[model] = lltokenizer_from_vocab(model.vocab, n_vocab=model.n_vocab, eos_token=eog)
    return cached


_WHAT = {  # how an error names a constraint of each kind
    "json_schema": "JSON schema",
    "json_object": "JSON schema",
    "regex": "regex",
    "lark": "grammar",
    "gbnf": "grammar",
}


class Matcher:
    """Where one answer stands in its constraint: what may come next, what is forced, and whether
    it may (or must) end."""

    def __init__(self, constraint: Constraint, model: Model):
        import llguidance

        self.constraint = constraint
        self.n_vocab = model.n_vocab
        self._tokenizer = grammar_tokenizer(model)
        self._matcher = llguidance.LLMatcher(self._tokenizer, constraint.grammar, limits=limits())
        self.masked_rows = 0  # rows whose best token the constraint refused
        self._check()

    def _check(self) -> None:
        if self._matcher.is_error():
            raise ConstraintError(
                f"the {_WHAT[self.constraint.kind]} cannot be matched: "
                f"{self._matcher.get_error().splitlines()[0][:300]}",
                "fix it or simplify it",
            )

    @property
    def stopped(self) -> bool:
        """Nothing but the end of the answer may follow: the constraint is complete."""
        return self._matcher.is_stopped()

    def allows(self, token: int) -> bool:
        return self._matcher.validate_tokens([int(token)]) == 1

    def valid_prefix(self, tokens: Sequence[int]) -> int:
        """How many of `tokens`, from the current state on, the constraint accepts in a row."""
        return self._matcher.validate_tokens([int(t) for t in tokens]) if tokens else 0

    def forced(self) -> list[int]:
        """The tokens that must come next whatever the model prefers (keys, brackets, an enum's tail)."""
        return list(self._matcher.compute_ff_tokens())

    def forced_text(self) -> bytes:
        """The text that must come next (what `forced` tokenizes, and the rest a single token cannot)."""
        return bytes(self._matcher.compute_ff_bytes())

    def tokenize(self, text: bytes) -> list[int]:
        """`text` as the vocabulary tokenizes it alone."""
        return list(self._tokenizer.tokenize_bytes(text))

    def decode(self, tokens: Sequence[int]) -> bytes:
        return bytes(self._tokenizer.decode_bytes([int(t) for t in tokens]))

    def lead(self) -> tuple[list[int], list[int]]:
        """What comes next: the tokens that must (`forced`), then the likely tokens of the text
        that must follow them but that more than one tokenization could write (a key's closing
        quote and colon: `":"`), as the vocabulary tokenizes it alone. The likely ones are
        verified like any draft; the model's own tokenization wins."""
        forced = self.forced()
        text = self.forced_text()
        written = self.decode(forced)
        if not text.startswith(written) or len(text) == len(written):
            return forced, []
        return forced, self.tokenize(text[len(written) :])

    def allowed(self) -> np.ndarray:
        """A boolean mask over the vocabulary of what may come next."""
        bits = np.frombuffer(self._matcher.compute_bitmask(), dtype=np.uint8)
        return np.unpackbits(bits, bitorder="little")[: self.n_vocab].astype(bool)

    def fork(self, tokens: Sequence[int] = ()) -> Matcher:
        """A copy that has also consumed `tokens`: what a drafter follows its own draft with,
        leaving the sequence's matcher where verification left it."""
        copy = object.__new__(Matcher)
        copy.constraint, copy.n_vocab, copy._tokenizer = self.constraint, self.n_vocab, self._tokenizer
        copy._matcher = self._matcher.deep_copy()
        copy.masked_rows = 0
        copy.consume(tokens)
        return copy

    def consume(self, tokens: Sequence[int]) -> None:
        """Advance past committed tokens."""
        for token in tokens:
            if not self._matcher.consume_token(int(token)):
                raise RuntimeError(f"the constraint refused committed token {token}: {self._matcher.get_error()}")
