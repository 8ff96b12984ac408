"""A vocabulary's fill-in-the-middle markers, as llama.cpp reads them (models/fim.py builds the
prompts): from the GGUF keys, or by their text in the families llama.cpp knows; Codestral's
suffix-first markers, which it does not, are found here by their text."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .lib import _llama

NULL = -1  # LLAMA_TOKEN_NULL
SUFFIX_FIRST = ("[SUFFIX]", "[PREFIX]")  # Codestral's markers: suffix, then prefix, then the middle is written


@dataclass(frozen=True)
class FimTokens:
    """A vocabulary's FIM markers (None: it has no such token)."""

    pre: int
    suf: int
    mid: int | None  # None: the middle follows the last part directly (suffix first)
    pad: int | None = None
    rep: int | None = None
    sep: int | None = None
    suffix_first: bool = False
    bare_suffix: bool = False  # the suffix without the space SentencePiece puts before a text (CodeLlama's infilling)

    @property
    def repo_level(self) -> bool:
        return self.rep is not None and self.sep is not None

    def describe(self) -> str:
        """How the model infills, for `check` and `pairs`: "prefix-suffix-middle, repo-level"."""
        order = "suffix-prefix" if self.suffix_first else "prefix-suffix-middle"
        return order + (", repo-level" if self.repo_level else "")


def _token(value: int) -> int | None:
    return None if value is None or value < 0 else int(value)


def read_fim_tokens(vocab, find: Callable[[str], int | None]) -> FimTokens | None:
    """The FIM markers of a llama.cpp vocabulary pointer, or None when it cannot infill. `find`
    looks a special token up by its text (the markers llama.cpp does not know)."""
    lib = _llama()
    spm = int(lib.llama_vocab_type(vocab)) == int(lib.LLAMA_VOCAB_TYPE_SPM)
    pre, suf, mid = (
        _token(f(vocab)) for f in (lib.llama_vocab_fim_pre, lib.llama_vocab_fim_suf, lib.llama_vocab_fim_mid)
    )
    extras = {
        "pad": _token(lib.llama_vocab_fim_pad(vocab)),
        "rep": _token(lib.llama_vocab_fim_rep(vocab)),
        "sep": _token(lib.llama_vocab_fim_sep(vocab)),
    }
    if pre is not None and suf is not None and mid is not None:
        return FimTokens(pre, suf, mid, **extras, bare_suffix=spm)
    suffix, prefix = (find(text) for text in SUFFIX_FIRST)
    if suffix is not None and prefix is not None:
        return FimTokens(prefix, suffix, None, **extras, suffix_first=True)
    return None
