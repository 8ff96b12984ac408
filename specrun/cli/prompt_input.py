"""Where a prompt comes from: the argument, piped stdin, or both (stdin first, then the argument)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from ..engine import constraint
from ..engine.constraint import Constraint
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


def read_fim_parts(prefix: Path | None, suffix: Path | None) -> dict[str, str]:
    """The code before and after the cursor, from `--fim-prefix FILE` and `--fim-suffix FILE` (one
    left out: nothing on that side)."""
    return {
        "prefix": read_text_file(prefix, "--fim-prefix") if prefix is not None else "",
        "suffix": read_text_file(suffix, "--fim-suffix") if suffix is not None else "",
    }


def read_prediction(path: Path | None) -> str | None:
    """The text of `--predict FILE` (the file an edit starts from), or None without one."""
    return read_text_file(path, "--predict") if path is not None else None


def read_constraint(json_schema: str | None, grammar: Path | None, regex: str | None) -> Constraint | None:
    """The constraint of `--json-schema FILE|JSON`, `--grammar FILE` or `--regex PATTERN` (at most
    one), compiled before any model loads so a bad one fails at once."""
    chosen = constraint.one_of({"--json-schema": json_schema or None, "--grammar": grammar, "--regex": regex or None})
    if chosen is None:
        return None
    flag, value = chosen
    if flag == "--json-schema":
        inline = value.lstrip().startswith(("{", "true", "false"))
        text = value if inline else read_text_file(value, flag)
        return constraint.json_schema(text, what=flag if inline else f"{flag} {value}")
    if flag == "--grammar":
        return constraint.grammar(read_text_file(value, flag), what=f"{flag} {value}")
    return constraint.regex(value)
