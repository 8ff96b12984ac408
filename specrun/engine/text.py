"""Token bytes → text as it streams: UTF-8 sequences split across tokens and stop strings spanning
steps are handled by holding back only what could still change."""

from __future__ import annotations

import codecs
from collections.abc import Sequence

from .line_rules import LineRules


class TextAssembler:
    """Feeds token pieces in, hands out text that is final, and notices stop strings."""

    def __init__(self, stops: Sequence[str] = (), lines: LineRules | None = None):
        self._lines = lines if lines is not None and lines.cuts_text else None
        self._looked = 0  # where the line rules look next in `text` + pending
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._stops = [s for s in stops if s]
        self._hold = max((len(s) for s in self._stops), default=1) - 1
        self._pending = ""
        self.stopped = False
        self.stopped_by: str | None = None  # the stop string that ended the text
        self.text = ""  # everything emitted so far

    def feed(self, piece: bytes) -> str:
        """Add a token's bytes; return the text now safe to emit (empty after a stop string)."""
        if self.stopped:
            return ""
        self._pending += self._decoder.decode(piece)
        return self._release(final=False)

    def finish(self) -> str:
        """End of generation: release whatever is held back."""
        if self.stopped:
            return ""
        self._pending += self._decoder.decode(b"", final=True)
        return self._release(final=True)

    def _release(self, final: bool) -> str:
        cut, stop = min(((i, s) for s in self._stops if (i := self._pending.find(s)) >= 0), default=(-1, None))
        if self._lines is not None:
            ended = self._line_end(self._pending[:cut] if cut >= 0 else self._pending, final or cut >= 0)
            if ended is not None:
                cut, stop = ended, None
        if cut >= 0:
            out, self._pending, self.stopped, self.stopped_by = self._pending[:cut], "", True, stop
        elif final or len(self._pending) <= self._hold:
            out, self._pending = (self._pending, "") if final else ("", self._pending)
        else:
            split = len(self._pending) - self._hold
            if self._lines is not None:  # a line after the first is held until it is known to stay
                whole = self.text + self._pending
                newline = whole.rfind("\n")
                if newline >= 0:
                    split = min(split, max(0, newline - len(self.text)))
            out, self._pending = self._pending[:split], self._pending[split:]
        self.text += out
        return out

    def _line_end(self, pending: str, complete: bool) -> int | None:
        """Where the line rules end the answer, as an index into `pending` (None: not yet)."""
        whole = self.text + pending
        at, self._looked = self._lines.end_of(whole, self._looked, complete)
        return None if at is None else max(0, at - len(self.text))
