"""Where chat input comes from: a terminal (readline editing and history), lines of text, or JSONL
messages. Each reader's `read()` returns the next input, or None at the end.

Multi-line messages: a line starting with \"\"\" opens a block and a line ending with \"\"\" closes it,
in every text mode, so a pasted snippet can be sent as one message.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable
from typing import TextIO

from ..errors import InputError

FENCE = '"""'


class BlockCollector:
    """Joins the lines of a \"\"\" block; a line outside a block is a message on its own."""

    def __init__(self) -> None:
        self.lines: list[str] | None = None  # None: not inside a block

    @property
    def open(self) -> bool:
        return self.lines is not None

    def feed(self, line: str) -> str | None:
        """Add a line; return a complete message, or None while a block is still open."""
        if self.lines is None:
            stripped = line.lstrip()
            if not stripped.startswith(FENCE):
                return line
            rest = stripped[len(FENCE) :]
            if rest.rstrip().endswith(FENCE):  # """one line"""
                return rest.rstrip()[: -len(FENCE)]
            self.lines = [rest] if rest.strip() else []
            return None
        if line.rstrip().endswith(FENCE):
            last = line.rstrip()[: -len(FENCE)]
            if last:
                self.lines.append(last)
            message, self.lines = "\n".join(self.lines), None
            return message
        self.lines.append(line)
        return None

    def cancel(self) -> None:
        self.lines = None

    def flush(self) -> str | None:
        """End of input inside a block: what was collected is still a message."""
        message, self.lines = ("\n".join(self.lines) if self.lines else None), None
        return message


class LineInput:
    """One message (or slash command) per line from a stream that is not a terminal."""

    def __init__(self, stream: TextIO | None = None):
        self.stream = stream or sys.stdin
        self.block = BlockCollector()

    def read(self) -> str | None:
        while True:
            line = self.stream.readline()
            if not line:
                return self.block.flush()
            message = self.block.feed(line.rstrip("\r\n"))
            if message is not None:
                return message


class JsonlInput:
    """One message per line as JSON: {"role": "user" | "system" | "assistant", "content": "..."}."""

    ROLES = ("system", "user", "assistant")

    def __init__(self, stream: TextIO | None = None):
        self.stream = stream or sys.stdin
        self.number = 0

    def read(self) -> dict | None:
        while True:
            line = self.stream.readline()
            if not line:
                return None
            self.number += 1
            if line.strip():
                return self.parse(line)

    def parse(self, line: str) -> dict:
        hint = 'each line must be {"role": "user", "content": "..."} (role: system, user or assistant)'
        try:
            message = json.loads(line)
        except json.JSONDecodeError as error:
            raise InputError(f"--jsonl line {self.number} is not JSON ({error.msg})", hint) from None
        if not (
            isinstance(message, dict) and message.get("role") in self.ROLES and isinstance(message.get("content"), str)
        ):
            raise InputError(f"--jsonl line {self.number} is not a message", hint)
        return {"role": message["role"], "content": message["content"]}


class TerminalInput:
    """Prompted input with readline: arrow keys edit and recall, Tab completes slash commands.

    Ctrl-C clears a line being typed (or an open block), and exits at an empty prompt; Ctrl-D at an
    empty prompt exits. `before_prompt` lets the display tidy the screen first.
    """

    def __init__(self, commands: list[str], before_prompt: Callable[[], None] = lambda: None):
        import readline  # only on a terminal: importing it can write escape codes to the screen

        self.readline = readline
        self.block = BlockCollector()
        self.before_prompt = before_prompt
        self.commands = sorted(commands)
        readline.set_completer(self._complete)
        readline.set_completer_delims(" \t\n")
        binding = "bind ^I rl_complete" if "libedit" in (readline.__doc__ or "") else "tab: complete"
        readline.parse_and_bind(binding)
        color = not os.environ.get("NO_COLOR")
        self.prompt = "\001\x1b[1;32m\002>\001\x1b[0m\002 " if color else "> "
        self.more = "\001\x1b[2m\002...\001\x1b[0m\002 " if color else "... "

    def _complete(self, text: str, state: int) -> str | None:
        if not text.startswith("/") or self.readline.get_begidx() != 0:
            return None
        matches = [c + " " for c in self.commands if c.startswith(text)]
        return matches[state] if state < len(matches) else None

    def _interrupted(self, signum, frame) -> None:  # noqa: ARG002 - signal signature
        """Note what was typed before readline discards the line, then interrupt input()."""
        self._typed = self.readline.get_line_buffer()
        raise KeyboardInterrupt

    def read(self) -> str | None:
        self.before_prompt()
        while True:
            self._typed = ""
            previous = signal.signal(signal.SIGINT, self._interrupted)
            try:
                line = input(self.more if self.block.open else self.prompt)
            except EOFError:
                sys.stdout.write("\n")
                return self.block.flush()
            except KeyboardInterrupt:
                sys.stdout.write("\n")
                if self._typed or self.block.open:
                    self.block.cancel()
                    continue
                return None
            finally:
                signal.signal(signal.SIGINT, previous)
            message = self.block.feed(line)
            if message is not None:
                return message
