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
from collections.abc import Callable, Iterator
from typing import TextIO

from . import defaults
from .engine.stats import Stats
from .errors import OutputClosed

SAVE, RESTORE, DOWN, UP, CLEAR = "\x1b7", "\x1b8", "\x1bD", "\x1bM", "\r\x1b[K"
Progress = Callable[..., None]  # (label, done, total, detail=""): see progress_display


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


class ThinkingStream:
    """A thinking model's reasoning on stderr as it streams (stdout keeps only the answer): dimmed
    when stderr is a terminal, plain otherwise, and ended with a line break before the answer."""

    DIM, UNDIM = "\x1b[2m", "\x1b[22m"

    def __init__(self, err: TextIO, *, hidden: bool = False, clean: Callable[[str], str] = lambda text: text):
        self.err = err
        self.hidden = hidden
        self.decorate = isatty(err)
        self.clean = clean  # e.g. control characters shown as symbols on a terminal
        self.open = False

    def write(self, text: str) -> None:
        if self.hidden or not text:
            return
        text = self.clean(text)
        self.err.write(f"{self.DIM}{text}{self.UNDIM}" if self.decorate else text)
        self.err.flush()
        self.open = True

    def close(self) -> None:
        """The reasoning is over: end its line."""
        if self.open:
            self.err.write("\n")
            self.err.flush()
            self.open = False


class Output:
    """Routes text, status, warnings and JSON to the right stream."""

    def __init__(
        self,
        *,
        quiet: bool = False,
        json_mode: bool = False,
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
        hide_thinking: bool = False,
    ):
        self.out = stdout or sys.stdout
        self.err = stderr or sys.stderr
        self.quiet = quiet
        self.json_mode = json_mode
        self.thinking_stream = ThinkingStream(self.err, hidden=hide_thinking or json_mode)
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

    def thinking(self, chunk: str) -> None:
        """A thinking model's reasoning: to stderr (see ThinkingStream); nothing in --json mode or with
        --hide-thinking. While it streams, the status line sits on the line below it, as it does
        below text when stdout shares the terminal."""
        if chunk and not self.thinking_stream.hidden:
            self.clear_status()
            self.thinking_stream.write(chunk)
            self.line.shared = True

    def end_thinking(self) -> None:
        if self.thinking_stream.open:
            self.clear_status()
            self.thinking_stream.close()
            self.line.shared = self.shared

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

    def note(self, line: str) -> None:
        """A line about the setup (where the models run), before any text; dropped by --quiet."""
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
        write_out(self.out, text)


def write_out(stream: TextIO, text: str) -> None:
    """Write and flush; a closed reader becomes OutputClosed (click would turn it into exit 1)."""
    try:
        stream.write(text)
        stream.flush()
    except BrokenPipeError as error:
        raise OutputClosed() from error


@contextlib.contextmanager
def progress_display(stream=None, *, unit: str = "bytes", quiet: bool = False) -> Iterator[Progress]:
    """A progress hook `(label, done, total, detail="")` for long work: a rich bar on a terminal,
    a line per new label otherwise (and `label: done` when a download completes); nothing when
    quiet. unit "bytes" shows sizes and transfer speed (downloads, assembling models); "steps"
    shows done/total and elapsed time (a benchmark's phases)."""
    stream = stream or sys.stderr
    if quiet:
        yield lambda *_args: None
        return
    if isatty(stream):
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )
        from rich.progress import Progress as Bar

        counts = (
            (DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn())
            if unit == "bytes"
            else (MofNCompleteColumn(), TimeElapsedColumn())
        )
        tasks: dict[str, int] = {}
        with Bar(
            TextColumn("{task.description}"), BarColumn(), *counts, console=Console(file=stream), transient=True
        ) as bar:

            def update(label: str, done: int, total: int | None, detail: str = "") -> None:
                key = label if unit == "bytes" else "steps"  # one bar for all of a benchmark's phases
                if key not in tasks:
                    tasks[key] = bar.add_task(label, total=total)
                bar.update(
                    tasks[key], completed=done, total=total, description=f"{label}: {detail}" if detail else label
                )

            yield update
        return
    started: set[str] = set()

    def lines(label: str, done: int, total: int | None, detail: str = "") -> None:  # noqa: ARG001 - hook signature
        if label not in started:
            started.add(label)
            if unit == "bytes":
                stream.write(f"{label}{f' ({human_size(total)})' if total else ''}…\n")
            else:
                stream.write(f"{label} ({done}/{total})\n")
        elif unit == "bytes" and total and done >= total:
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


# ---- the figures of a generation, as run and chat show them ---------------------------------------


def status_parts(stats: Stats, elapsed: float, label: str) -> list[tuple[str, str | None]]:
    """The live line while an answer streams, as (text, style) parts: speed, acceptance (styled by
    how good it is), tokens per step, what drafts now, tokens so far."""
    parts: list[tuple[str, str | None]] = [(f"{stats.decode_rate_at(elapsed):.1f} tok/s", "bold")]
    if stats.drafted:
        rate = stats.accepted / stats.drafted
        parts.append(
            (
                f"accept {100 * rate:.0f}% ({stats.accepted}/{stats.drafted} drafted)",
                "green" if rate >= 0.6 else "yellow" if rate >= 0.3 else "red",
            )
        )
    else:
        parts.append(("accept — (0/0 drafted)", None))
    mean = stats.mean_tokens_per_step
    parts.append((f"{mean:.2f} tok/step" if mean is not None else "— tok/step", None))
    parts += [(label, None), (f"{stats.generated_tokens} tok", None)]
    return parts


def status_line(stats: Stats, elapsed: float, label: str) -> str:
    return " · ".join(text for text, _ in status_parts(stats, elapsed, label))


def summary_parts(stats: Stats) -> list[str]:
    """The figures of a finished generation, for its one-line summary."""
    parts = [f"{stats.generated_tokens} tok"]
    if stats.decode_tokens_per_second is not None:
        parts.append(f"{stats.decode_tokens_per_second:.1f} tok/s")
    parts += [f"first token {stats.time_to_first_token:.2f} s", f"total {stats.total_time:.2f} s"]
    if stats.drafted:
        parts.append(f"accept {100 * stats.acceptance_rate:.0f}% ({stats.accepted}/{stats.drafted} drafted)")
    if stats.mean_tokens_per_step is not None:
        parts.append(f"{stats.mean_tokens_per_step:.2f} tok/step")
    return parts


def mode_label(stats: Stats, mode: str, label: str) -> str:
    """What drafted: the fixed mode's label, or under auto how many steps each choice got."""
    if mode != defaults.AUTO or not stats.by_drafter:
        return label
    return "auto: " + stats.steps_by_drafter()
