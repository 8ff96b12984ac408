"""Comma-separated option values (`--spec off,draft`, `--concurrency 1,2,4`), parsed once for every command."""

from __future__ import annotations

from collections.abc import Callable

from ..errors import InputError


def parse_list(text: str, convert: Callable, flag: str) -> list:
    """'1, 2,4' → [1, 2, 4]; a bad item is a usage error naming the flag."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise InputError(f"{flag} needs at least one value", f"pass a comma-separated list to {flag}")
    out = []
    for item in items:
        try:
            out.append(convert(item))
        except ValueError:
            kind = "a whole number" if convert is int else "a number" if convert is float else "valid"
            raise InputError(
                f"{flag}: {item!r} is not {kind}", f"pass a comma-separated list to {flag}, e.g. 1,2,4"
            ) from None
    return out
