"""Where an infill answer ends by its lines, as editors ask: before a new line indented less than
the cursor's line (the block being completed is over), before a line that repeats the one after
the cursor (the middle has reached the suffix), and, once it has decoded for a time budget, at its
next newline. The first line, which completes the cursor's own, is never cut."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LineRules:
    """`min_indent`: a new line with less leading whitespace (spaces and tabs) ends the answer
    before it (0: no limit); `end_line`: a new line equal to it, leading and trailing whitespace
    aside, ends the answer before it ("": none); `time_limit_s`: after this long from the first
    token, the answer ends with the next token that writes a newline (None: none)."""

    min_indent: int = 0
    end_line: str = ""
    time_limit_s: float | None = None

    @property
    def cuts_text(self) -> bool:
        """Whether a line must be held back until it is known to stay."""
        return self.min_indent > 0 or bool(self.end_line.strip())

    def end_of(self, text: str, start: int, complete: bool) -> tuple[int | None, int]:
        """Where `text` ends by these rules: the index of the newline before the first line from
        the newline at or after `start` that breaks one (None: none does), and where to look next
        time (the newline before the first line not yet decided). `complete`: nothing follows."""
        end_line = self.end_line.strip()
        at = text.find("\n", start)
        while at >= 0:
            after = text.find("\n", at + 1)
            line = text[at + 1 : after if after >= 0 else len(text)]
            body = line.lstrip(" \t")
            if self.min_indent and body and len(line) - len(body) < self.min_indent:
                return at, at
            if after < 0 and not complete:
                return None, at  # the line may still grow
            if end_line and line.strip() == end_line:
                return at, at
            if after < 0:
                return None, at
            at = after
        return None, start
