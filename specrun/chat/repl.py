"""The chat loop: read an input, run a slash command or answer a message, repeat.

On a terminal, Ctrl-C during an answer stops it between steps, so the KV caches stay consistent
and the partial answer stays in the conversation; from a pipe, Ctrl-C ends the program.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import Protocol

from ..engine.generation import Step
from ..errors import OutputClosed, SpecrunError
from .interrupts import Interrupts
from .session import Answer, ChatSession, Turn
from .slash import is_command, run_command


class Display(Protocol):
    """What the loop needs from a display (terminal or plain)."""

    def begin_answer(self, turn: Turn) -> None: ...
    def step(self, step: Step, turn: Turn) -> None: ...
    def end_answer(self, answer: Answer) -> None: ...
    def info(self, text: str) -> None: ...
    def warn(self, text: str) -> None: ...
    def error(self, text: str) -> None: ...
    def farewell(self, session: ChatSession) -> None: ...


def answer(session: ChatSession, content: str, display: Display, interrupts: Interrupts | None) -> Answer | None:
    """Run one turn through the display. With `interrupts`, Ctrl-C stops the answer and returns;
    without (not a terminal), KeyboardInterrupt propagates after the partial answer is shown."""
    try:
        turn = session.prepare(content)
    except SpecrunError as error:
        display.error(error.one_line())
        return None
    for notice in turn.notices:
        display.warn(notice)
    display.begin_answer(turn)
    interrupted = broken = False
    error = None
    guard = interrupts.armed() if interrupts is not None else nullcontext()
    try:
        with guard:
            for step in turn.steps():
                display.step(step, turn)
                if interrupts is not None and interrupts.requested:
                    interrupted = True
                    break
    except KeyboardInterrupt:
        display.end_answer(turn.finish(interrupted=True, broken=True))
        if interrupts is None:
            raise
        return None
    except OutputClosed:
        raise
    except SpecrunError as failure:
        error, broken = failure.one_line(), True
    result = turn.finish(interrupted=interrupted, broken=broken, error=error)
    display.end_answer(result)
    return result


def run_session(
    session: ChatSession, read: Callable[[], str | dict | None], display: Display, interrupts: Interrupts | None
) -> None:
    """Read inputs until the end: slash commands, messages (dicts, JSONL mode) or user text."""
    while True:
        item = read()
        if item is None:
            break
        if isinstance(item, dict):
            if item["role"] == "user":
                answer(session, item["content"], display, interrupts)
            else:
                session.add_message(item)
            continue
        if not item.strip():
            continue
        if is_command(item):
            reply = run_command(session, item)
            if reply.exit:
                break
            if reply.text:
                (display.error if reply.error else display.info)(reply.text)
            continue
        answer(session, item[1:] if item.startswith("//") else item, display, interrupts)
    display.farewell(session)
