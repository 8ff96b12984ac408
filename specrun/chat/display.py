"""How chat answers are shown: live on a terminal (rich), or plainly for scripts.

On a terminal the answer streams to stdout with a status line (speed, acceptance, tokens per step,
drafted/accepted, mode and K) drawn below it on stderr and redrawn in place; after each answer a
one-line summary replaces it. Scripts get the bare answers on stdout and the summaries on stderr.
"""

from __future__ import annotations

import codecs
import json
import shutil
import sys
import time
from collections import deque
from typing import TextIO

from rich.console import Console
from rich.text import Text

from .. import defaults
from ..engine.generation import Step
from ..models.reasoning import CONTENT, REASONING
from ..terminal import (
    StatusLine,
    ThinkingStream,
    isatty,
    mode_label,
    same_terminal,
    status_parts,
    summary_parts,
    write_out,
)
from .session import Answer, ChatSession, Turn

STATUS_EVERY = 0.1  # seconds between recomputed status lines
DRAFT_STYLE = "cyan"

# control characters would move the cursor or recolour the terminal: show them as symbols instead
_SAFE = {c: 0x2400 + c for c in range(0x20) if c not in (0x09, 0x0A)}
_SAFE.update({0x0D: None, 0x7F: 0x2421, **{c: 0xFFFD for c in range(0x80, 0xA0)}})


def label(mode: str, k: int) -> str:
    """The mode and K as set."""
    return "spec off" if mode == defaults.OFF else f"{mode} K={k}"


def live_label(turn: Turn) -> str:
    """What drafts right now: under auto, the controller's current choice."""
    if turn.mode == defaults.AUTO:
        return turn.generation.label()
    return label(turn.mode, turn.k)


def final_label(answer: Answer) -> str:
    """Under auto, how many steps each choice got; otherwise the mode and K."""
    return mode_label(answer.stats, answer.mode, label(answer.mode, answer.k))


def status_text(turn: Turn, elapsed: float) -> Text:
    """The live line while an answer streams."""
    text = Text()
    for i, (part, style) in enumerate(status_parts(turn.generation.stats, elapsed, live_label(turn))):
        text.append(" · " if i else "")
        text.append(part, style=style)
    text.stylize("dim", 0, len(text))
    return text


def summary_line(answer: Answer) -> str:
    """The one line after each answer."""
    s = answer.stats
    parts = [*summary_parts(s), f"prompt {s.prompt_tokens} tok, {answer.prefilled} new", final_label(answer)]
    if answer.interrupted:
        parts.append("interrupted")
    elif s.stop_reason == "context":
        parts.append("context full")
    elif s.stop_reason == "max_tokens":
        parts.append("max tokens reached")
    return " · ".join(parts)


def totals_line(session: ChatSession) -> str:
    t = session.totals.to_dict()
    parts = [f"session: {t['turns']} answer{'' if t['turns'] == 1 else 's'}", f"{t['generated_tokens']} tok"]
    if t["decode_tokens_per_s"]:
        parts.append(f"{t['decode_tokens_per_s']:.1f} tok/s")
    if t["acceptance_rate"] is not None:
        parts.append(f"accept {100 * t['acceptance_rate']:.0f}% ({t['accepted']}/{t['drafted']} drafted)")
    parts.append(session.pair.placement.brief())
    return " · ".join(parts)


class DraftColours:
    """Splits streamed text into the parts that came from accepted drafts and the target's own.

    A step's first `accepted` tokens were drafted and accepted; the last is the target's. Text is
    released in order but not token by token (split UTF-8, stop strings), so each token's character
    count is queued and consumed as its text arrives.
    """

    def __init__(self, model) -> None:
        self.model = model
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.queue: deque[list] = deque()  # [characters left, from a draft]

    def split(self, step: Step) -> list[tuple[str, bool]]:
        for i, token in enumerate(step.tokens):
            chars = len(self.decoder.decode(self.model.piece(token)))
            if chars:
                self.queue.append([chars, i < step.accepted])
        parts: list[tuple[str, bool]] = []
        text = step.text
        while text:
            if not self.queue:
                parts.append((text, False))
                break
            entry = self.queue[0]
            take = min(entry[0], len(text))
            if parts and parts[-1][1] == entry[1]:
                parts[-1] = (parts[-1][0] + text[:take], entry[1])
            else:
                parts.append((text[:take], entry[1]))
            text = text[take:]
            entry[0] -= take
            if not entry[0]:
                self.queue.popleft()
        return parts


class TerminalDisplay:
    """Live answers on a terminal: streamed text, a status line below it, a summary after."""

    def __init__(
        self,
        model,
        *,
        show_drafts: bool = False,
        quiet: bool = False,
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
        hide_thinking: bool = False,
    ):
        self.model = model
        self.show_drafts = show_drafts
        self.hide_thinking = hide_thinking
        self.quiet = quiet
        self.out = stdout or sys.stdout
        self.err = stderr or sys.stderr
        self.console = Console(file=self.out, highlight=False, soft_wrap=True, emoji=False)
        self.console_err = Console(file=self.err, highlight=False, soft_wrap=True, emoji=False)
        self.live = not quiet and isatty(self.err)
        self.shared = self.live and same_terminal(self.out, self.err)
        self.status_line = StatusLine(self.err, shared=self.shared)
        self._line = ""
        self.errors = 0

    # -- messages ------------------------------------------------------------------------------

    def banner(self, session: ChatSession) -> None:
        config = session.pair.config
        models = f"target {config.target.name}" + (f" · draft {config.draft.name}" if config.draft else " · no draft")
        self.console_err.print(
            Text(f"specrun chat · {models} · {label(session.mode, session.k)} · ctx {session.n_ctx}", style="bold")
        )
        self.console_err.print(Text(session.pair.placement.describe(), style="dim"))
        hints = '/help lists commands · """ starts a multi-line message · Ctrl-C stops an answer · Ctrl-D exits'
        if self.show_drafts:
            hints += " · text from accepted drafts is shown in " + DRAFT_STYLE
        self.console_err.print(Text(hints, style="dim"))

    def info(self, text: str) -> None:
        self.console_err.print(Text(text))

    def warn(self, text: str) -> None:
        self.console_err.print(Text(text, style="yellow"))

    def error(self, text: str) -> None:
        self.errors += 1
        self.console_err.print(Text(text, style="red"))

    def farewell(self, session: ChatSession) -> None:
        if session.totals.turns and not self.quiet:
            self.console_err.print(Text(totals_line(session), style="dim"))

    # -- answers -------------------------------------------------------------------------------

    def begin_answer(self, turn: Turn) -> None:
        self._started = time.perf_counter()
        self._drawn_at = 0.0
        self._colours = DraftColours(self.model) if self.show_drafts else None
        self._coloured: deque[list] = deque()  # [text, from a draft] of raw text not yet shown
        self._thinking = ThinkingStream(self.err, hidden=self.hide_thinking, clean=lambda text: text.translate(_SAFE))
        self._ends_with_newline = True
        if self.live:  # a long prompt takes a while before the first token: say what is happening
            self._line = self._render(
                Text(f"reading {turn.prefilled} new prompt tokens… · {live_label(turn)}", style="dim")
            )
            self._draw()

    def step(self, step: Step, turn: Turn) -> None:
        # the raw text's draft colours (a step whose text is still held back only queues its tokens' sizes)
        coloured = self._colours.split(step) if self._colours is not None else [(step.text, False)] if step.text else []
        self._coloured.extend([text, drafted] for text, drafted in coloured)
        if turn.parts:
            self._write(turn.parts)
        if not self.live:
            return
        now = time.perf_counter()
        if now - self._drawn_at >= STATUS_EVERY:
            self._line = self._render(status_text(turn, now - self._started))
            self._drawn_at = now
        self._draw()

    def end_answer(self, answer: Answer) -> None:
        self._clear()
        self._end_thinking()
        if not self._ends_with_newline:
            self.out.write("\n")
            self.out.flush()
        if answer.error:
            self.error(answer.error)
        if answer.interrupted:
            self.console_err.print(Text("[interrupted: the partial answer stays in the conversation]", style="dim"))
        if not self.quiet:
            self.console_err.print(Text(summary_line(answer), style="dim"))
        self.console_err.print()

    def before_prompt(self) -> None:
        self._clear()

    # -- the status line -----------------------------------------------------------------------

    def _write(self, parts: list[tuple[str, str]]) -> None:
        """Stream text below which the status line sits; it is cleared first, as text may wrap onto it
        (cell widths of arbitrary text cannot be predicted reliably), and redrawn after. A thinking
        model's reasoning goes to stderr, dimmed; the answer to stdout."""
        self._clear()
        for kind, text in parts:
            pieces = self._take(len(text))  # the raw text's draft colours, in step with the parts
            if kind == REASONING:
                self._thinking.write(text)
                self.status_line.shared = True  # below the reasoning on stderr, as below text
            elif kind == CONTENT:
                self._end_thinking()
                self._content(pieces)

    def _end_thinking(self) -> None:
        if self._thinking.open:
            self._thinking.close()
            self.status_line.shared = self.shared

    def _take(self, n: int) -> list[tuple[str, bool]]:
        taken: list[tuple[str, bool]] = []
        while n > 0 and self._coloured:
            entry = self._coloured[0]
            piece = entry[0][:n]
            taken.append((piece, entry[1]))
            entry[0] = entry[0][len(piece) :]
            n -= len(piece)
            if not entry[0]:
                self._coloured.popleft()
        return taken

    def _content(self, pieces: list[tuple[str, bool]]) -> None:
        text = "".join(p for p, _ in pieces).translate(_SAFE)
        if self._colours is not None:
            styled = Text()
            for part, drafted in pieces:
                styled.append(part.translate(_SAFE), style=DRAFT_STYLE if drafted else None)
            self.console.print(styled, end="")
        else:
            self.out.write(text)
        self.out.flush()
        if text:
            self._ends_with_newline = text.endswith("\n")

    def _render(self, text: Text) -> str:
        width = shutil.get_terminal_size().columns
        text.truncate(max(10, width - 1), overflow="ellipsis")
        with self.console_err.capture() as captured:
            self.console_err.print(text, end="")
        return captured.get()

    def _draw(self) -> None:
        self.status_line.draw(self._line)

    def _clear(self) -> None:
        self.status_line.clear()


class PlainDisplay:
    """Scripts: answers as they stream to stdout, one per message; summaries to stderr."""

    def __init__(
        self,
        *,
        quiet: bool = False,
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
        hide_thinking: bool = False,
    ):
        self.out = stdout or sys.stdout
        self.err = stderr or sys.stderr
        self.quiet = quiet
        self.hide_thinking = hide_thinking
        self.errors = 0

    def banner(self, session: ChatSession) -> None:
        pass

    def info(self, text: str) -> None:
        self._err(text)

    def warn(self, text: str) -> None:
        self._err(text)

    def error(self, text: str) -> None:
        self.errors += 1
        self._err(f"specrun: error: {text}")

    def farewell(self, session: ChatSession) -> None:
        if session.totals.turns and not self.quiet:
            self._err(totals_line(session))

    def begin_answer(self, turn: Turn) -> None:
        self._ends_with_newline = True
        self._thinking = ThinkingStream(self.err, hidden=self.hide_thinking)

    def step(self, step: Step, turn: Turn) -> None:
        for kind, text in turn.parts:
            if kind == REASONING:
                self._thinking.write(text)
            elif kind == CONTENT:
                self._thinking.close()
                self._out(text)
                self._ends_with_newline = text.endswith("\n")

    def end_answer(self, answer: Answer) -> None:
        self._thinking.close()
        if not self._ends_with_newline:
            self._out("\n")
        if answer.error:
            self.error(answer.error)
        if not self.quiet:
            self._err(summary_line(answer))

    def _out(self, text: str) -> None:
        write_out(self.out, text)

    def _err(self, text: str) -> None:
        self.err.write(text + "\n")
        self.err.flush()


class JsonlDisplay(PlainDisplay):
    """--jsonl: each answer as one JSON message line on stdout, written when it is complete."""

    def step(self, step: Step, turn: Turn) -> None:
        pass

    def end_answer(self, answer: Answer) -> None:
        message = {"role": "assistant", "content": answer.text}
        if answer.reasoning:
            message["reasoning_content"] = answer.reasoning
        if answer.interrupted:
            message["interrupted"] = True
        self._out(json.dumps(message, ensure_ascii=False) + "\n")
        if answer.error:
            self.error(answer.error)
        if not self.quiet:
            self._err(summary_line(answer))
