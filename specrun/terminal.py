"""All terminal output goes through one Output object.

stdout carries only generated text (or one JSON document); status, progress, warnings, errors and
summaries go to stderr, decorated only when stderr is a terminal. When stdout and stderr are the same
terminal, the live status line sits on the line below the text and is redrawn in place.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Callable, Iterator, TextIO

from .errors import OutputClosed

SAVE, RESTORE, DOWN, UP, CLEAR = "\x1b7", "\x1b8", "\x1bD", "\x1bM", "\r\x1b[K"


def same_terminal(a: TextIO, b: TextIO) -> bool:
    """True when both streams are the same TTY device."""
    try:
        if not (a.isatty() and b.isatty()):
            return False
        sa, sb = os.fstat(a.fileno()), os.fstat(b.fileno())
        return (sa.st_dev, sa.st_ino, sa.st_rdev) == (sb.st_dev, sb.st_ino, sb.st_rdev)
    except (OSError, ValueError, AttributeError):
        return False


class StatusLine:
    """One status line on stderr, redrawn in place. When stdout shares the terminal it sits on the
    line below the text (made to exist first, so saving and restoring the cursor never straddles a
    scroll), and it is cleared before more text is written."""

    def __init__(self, err: TextIO, *, shared: bool):
        self.err = err
        self.shared = shared
        self.shown = False

    def draw(self, line: str) -> None:
        if self.shared:
            self.err.write(DOWN + UP + SAVE + DOWN + CLEAR + line + RESTORE)
        else:
            self.err.write(CLEAR + line)
        self.err.flush()
        self.shown = True

    def clear(self) -> None:
        if not self.shown:
            return
        self.err.write(SAVE + DOWN + CLEAR + RESTORE if self.shared else CLEAR)
        self.err.flush()
        self.shown = False


class Output:
    """Routes text, status, warnings and JSON to the right stream."""

    def __init__(self, *, quiet: bool = False, json_mode: bool = False, stdout: TextIO | None = None, stderr: TextIO | None = None):
        self.out = stdout or sys.stdout
        self.err = stderr or sys.stderr
        self.quiet = quiet
        self.json_mode = json_mode
        self.live = isatty(self.err) and not quiet
        self.shared = self.live and same_terminal(self.out, self.err)
        self.line = StatusLine(self.err, shared=self.shared)
        self.wrote_text = False
        self.ends_with_newline = True

    def text(self, chunk: str) -> None:
        """Generated text: to stdout, flushed at once (nothing in --json mode)."""
        if self.json_mode or not chunk:
            return
        if self.shared:
            self.line.clear()
        self._write_out(chunk)
        self.wrote_text = True
        self.ends_with_newline = chunk.endswith("\n")

    def status(self, line: str) -> None:
        """The live status line, redrawn in place; only while stderr is a terminal."""
        if self.live:
            self.line.draw(line)

    def clear_status(self) -> None:
        self.line.clear()

    def end_text(self) -> None:
        """Finish the text stream: a newline on a terminal so the prompt does not glue to the answer."""
        self.clear_status()
        if self.wrote_text and not self.ends_with_newline and isatty(self.out) and not self.json_mode:
            self._write_out("\n")

    def summary(self, line: str) -> None:
        """The one-line summary at the end (dropped by --quiet)."""
        if self.quiet:
            return
        self.clear_status()
        self.err.write(line + "\n")
        self.err.flush()

    def warn(self, line: str) -> None:
        self.clear_status()
        self.err.write(line + "\n")
        self.err.flush()

    def document(self, data: dict) -> None:
        """The single JSON document of --json mode."""
        self._write_out(json.dumps(data, ensure_ascii=False, indent=2) + "\n")

    def _write_out(self, text: str) -> None:
        """Write to stdout; a closed reader becomes OutputClosed (click would turn it into exit 1)."""
        try:
            self.out.write(text)
            self.out.flush()
        except BrokenPipeError as error:
            raise OutputClosed() from error


@contextlib.contextmanager
def progress_display(stream=None) -> Iterator[Callable[[str, int, "int | None"], None]]:
    """A progress hook for fetch/assembly: a rich bar on a terminal, start/finish lines otherwise."""
    stream = stream or sys.stderr
    if isatty(stream):
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        tasks: dict[str, int] = {}
        columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn())
        with Progress(*columns, console=Console(file=stream), transient=True) as bar:

            def hook(label: str, done: int, total: int | None) -> None:
                if label not in tasks:
                    tasks[label] = bar.add_task(label, total=total)
                bar.update(tasks[label], completed=done, total=total)

            yield hook
        return
    started: set[str] = set()

    def lines(label: str, done: int, total: int | None) -> None:
        if label not in started:
            started.add(label)
            stream.write(f"{label}{f' ({human_size(total)})' if total else ''}…\n")
        elif total and done >= total:
            stream.write(f"{label}: done\n")
        stream.flush()

    yield lines


def isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def human_size(size: int | None) -> str:
    if size is None:
        return "?"
    return f"{size / 1e9:.2f} GB" if size >= 1e8 else f"{size / 1e6:.1f} MB"
