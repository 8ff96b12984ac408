"""Where a prompt comes from: the argument, piped stdin, or both (stdin first, then the argument)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from ..errors import InputError, read_text_file


def read_prompt(argument: str | None, stdin: TextIO | None = None) -> str:
    """The prompt text; stdin is read when it is piped or the argument is '-'."""
    stdin = stdin or sys.stdin
    piped = ""
    wants_stdin = argument == "-"
    try:
        is_tty = stdin.isatty()
    except (AttributeError, ValueError):
        is_tty = True
    if wants_stdin or (stdin is not None and not is_tty):
        piped = stdin.read() or ""
    parts = [p for p in (piped.rstrip("\n"), None if wants_stdin else argument) if p]
    if not parts:
        raise InputError("no prompt given", 'pass it as an argument, or pipe it: echo "..." | specrun run')
    return "\n".join(parts)


def read_prediction(path: Path | None) -> str | None:
    """The text of `--predict FILE` (the file an edit starts from), or None without one."""
    return read_text_file(path, "--predict") if path is not None else None
