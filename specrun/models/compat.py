"""Can this draft speak for this target? A compatibility report from GGUF metadata, no weights loaded.

A draft's tokens only mean something to the target if both vocabularies agree, so this applies the
rules of llama.cpp's common_speculative_are_compatible, in its order: vocab type; add-BOS/add-EOS
flags and BOS/EOS ids; vocab sizes within 128; identical token text from id 5 up to the smaller
size. (llama.cpp compares the vocab types through a bool, which lets SPM pass for BPE; the types
are compared here as they are meant to be.) It also reports what does not block pairing but matters:
architecture, training context length, chat template, model name.

Models are opened with llama.cpp's `vocab_only` loader (engine.model.read_vocabulary): about 0.3 s on a
1.5B file, where reading the token list with the `gguf` package takes seconds.
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..engine.model import Vocabulary, read_vocabulary
from ..errors import IncompatibleModelsError
from .modelfile import check_gguf_file

MAX_SIZE_DIFFERENCE = 128
CHECK_START_TOKEN_ID = 5
VOCAB_TYPES = {0: "none", 1: "SPM", 2: "BPE", 3: "WPM", 4: "UGM", 5: "RWKV", 6: "PLaMo-2"}


def read_vocab(path: str | os.PathLike) -> Vocabulary:
    """Load only the vocabulary of `path` (cached per file size and mtime)."""
    path = check_gguf_file(path).resolve()
    st = path.stat()
    return _read_vocab(str(path), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=4)  # a token list is megabytes; `drafts` reuses only the target's
def _read_vocab(path: str, size: int, mtime_ns: int) -> Vocabulary:  # noqa: ARG001 - cache keys
    return read_vocabulary(path)


@dataclass(frozen=True)
class Rule:
    """One of llama.cpp's checks, with both models' values."""

    name: str
    ok: bool
    target: object
    draft: object
    detail: str = ""

    def to_dict(self) -> dict:
        return {"rule": self.name, "ok": self.ok, "target": self.target, "draft": self.draft, "detail": self.detail}


@dataclass(frozen=True)
class Info:
    """Something that does not block pairing but a user should know."""

    name: str
    target: object
    draft: object
    same: bool

    def to_dict(self) -> dict:
        return {"name": self.name, "target": self.target, "draft": self.draft, "same": self.same}


@dataclass(frozen=True)
class TokenDiff:
    """The first token whose text differs (from id 5 on), and how many differ in all."""

    id: int
    target: str
    draft: str
    count: int


@dataclass(frozen=True)
class CompatReport:
    """The full report; `compatible` is what llama.cpp would decide."""

    target: Path
    draft: Path
    rules: tuple[Rule, ...]
    info: tuple[Info, ...]
    first_diff: TokenDiff | None
    seconds: float
    round_trips: tuple[bool, bool] = (True, True)  # target's, draft's: text → tokens → the same text

    @property
    def compatible(self) -> bool:
        return all(r.ok for r in self.rules)

    @property
    def text_drafting(self) -> bool:
        """The vocabularies differ but both models turn text into tokens and back: the draft can
        draft through text (engine.drafting.text)."""
        return not self.compatible and self.round_trips[0] and self.round_trips[1]

    @property
    def drafting(self) -> str | None:
        """How the draft drafts for the target: "token" (shared vocabulary), "text", or None."""
        return "token" if self.compatible else "text" if self.text_drafting else None

    @property
    def first_failure(self) -> str | None:
        """The first failing rule in llama.cpp's order, as one line."""
        failed = next((r for r in self.rules if not r.ok), None)
        return f"{failed.name}: {failed.detail}" if failed else None

    def to_dict(self) -> dict:
        diff = self.first_diff
        return {
            "target": str(self.target),
            "draft": str(self.draft),
            "compatible": self.compatible,
            "first_failure": self.first_failure,
            "drafting": self.drafting,
            "rules": [r.to_dict() for r in self.rules],
            "info": [i.to_dict() for i in self.info],
            "first_token_difference": None
            if diff is None
            else {"id": diff.id, "target": diff.target, "draft": diff.draft, "count": diff.count},
            "seconds": round(self.seconds, 3),
        }


def show_token(text: bytes) -> str:
    """Token text as readable, quoted, escaped text."""
    return repr(text.decode("utf-8", "backslashreplace"))


def _vocab_type(t: int) -> str:
    return f"{VOCAB_TYPES.get(t, 'unknown')} ({t})"


def compare(t: Vocabulary, d: Vocabulary) -> tuple[tuple[Rule, ...], TokenDiff | None]:
    """llama.cpp's rules in its order, every one evaluated so the report is complete."""
    rules = [
        Rule(
            "vocab type",
            t.vocab_type == d.vocab_type,
            _vocab_type(t.vocab_type),
            _vocab_type(d.vocab_type),
            "same" if t.vocab_type == d.vocab_type else "the tokenizers work differently",
        )
    ]
    for name, a, b in (
        ("add BOS", t.add_bos, d.add_bos),
        ("add EOS", t.add_eos, d.add_eos),
        ("BOS id", t.bos, d.bos),
        ("EOS id", t.eos, d.eos),
    ):
        rules.append(Rule(name, a == b, a, b, "same" if a == b else f"target {a}, draft {b}"))
    gap = abs(t.n_tokens - d.n_tokens)
    rules.append(
        Rule(
            "vocab size",
            gap <= MAX_SIZE_DIFFERENCE,
            t.n_tokens,
            d.n_tokens,
            f"difference {gap}, at most {MAX_SIZE_DIFFERENCE} allowed",
        )
    )
    diff = _first_text_difference(t.texts, d.texts)
    checked = max(0, min(t.n_tokens, d.n_tokens) - CHECK_START_TOKEN_ID)
    if diff is None:
        rules.append(
            Rule(
                "token text",
                True,
                None,
                None,
                f"ids {CHECK_START_TOKEN_ID}..{min(t.n_tokens, d.n_tokens) - 1} identical ({checked} tokens)",
            )
        )
    else:
        rules.append(
            Rule(
                "token text",
                False,
                diff.target,
                diff.draft,
                f"token {diff.id} differs: target {diff.target}, draft {diff.draft} ({diff.count} of {checked} tokens "
                "differ)",
            )
        )
    return tuple(rules), diff


def _first_text_difference(a: tuple[bytes, ...], b: tuple[bytes, ...]) -> TokenDiff | None:
    n = min(len(a), len(b))
    if a[CHECK_START_TOKEN_ID:n] == b[CHECK_START_TOKEN_ID:n]:
        return None
    differing = [i for i in range(CHECK_START_TOKEN_ID, n) if a[i] != b[i]]
    first = differing[0]
    return TokenDiff(first, show_token(a[first]), show_token(b[first]), len(differing))


def _info(t: Vocabulary, d: Vocabulary) -> tuple[Info, ...]:
    template = "same" if t.chat_template == d.chat_template else "different"
    return (
        Info("name", t.name, d.name, t.name == d.name),
        Info("architecture", t.architecture, d.architecture, t.architecture == d.architecture),
        Info("context length", t.n_ctx_train, d.n_ctx_train, t.n_ctx_train == d.n_ctx_train),
        Info(
            "chat template", _template_summary(t.chat_template), _template_summary(d.chat_template), template == "same"
        ),
        Info("fill in the middle", _fim_summary(t), _fim_summary(d), t.fim == d.fim),
        Info("file size", t.size, d.size, t.size == d.size),
    )


def _fim_summary(vocab: Vocabulary) -> str:
    """Whether the model can infill (/infill, `run --fim-prefix`), and how."""
    return vocab.fim.describe() if vocab.fim is not None else "no (no FIM tokens)"


def _template_summary(template: str | None) -> str:
    return "none" if template is None else f"{len(template)} chars"


def check_pair(target: str | os.PathLike, draft: str | os.PathLike) -> CompatReport:
    """The full compatibility report for two GGUF files."""
    start = time.perf_counter()
    t, d = read_vocab(target), read_vocab(draft)
    rules, diff = compare(t, d)
    return CompatReport(
        t.path, d.path, rules, _info(t, d), diff, time.perf_counter() - start, (t.round_trips, d.round_trips)
    )


def require_draftable(target: str | os.PathLike, draft: str | os.PathLike) -> CompatReport:
    """Refuse a pair whose draft can draft neither through tokens (llama.cpp's rules) nor through
    text, naming what fails; returns the report (its `drafting` says which way)."""
    report = check_pair(target, draft)
    if report.drafting is None:
        which = "the target's" if not report.round_trips[0] else "the draft's"
        raise IncompatibleModelsError(
            f"{Path(draft).name} cannot draft for {Path(target).name}: {report.first_failure}, and {which} tokenizer "
            "does not give text back as it was, so it cannot draft through text either",
            "choose a draft from `specrun drafts TARGET`, or run without one (--draft none)",
        )
    return report
