"""Where a prompt comes from: the argument, piped stdin, or both (stdin first, then the argument)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from ..errors import InputError


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
    if path is None:
        return None
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"--predict {path}: no such file", "give the file the answer is expected to repeat") from None
    except IsADirectoryError:
        raise InputError(f"--predict {path} is a directory", "give a text file") from None
    except UnicodeDecodeError:
        raise InputError(f"--predict {path} is not UTF-8 text", "give a text file") from None
    except OSError as error:
        raise InputError(f"--predict {path}: {error.strerror}", "give a readable text file") from None
