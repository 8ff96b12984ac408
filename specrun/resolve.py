"""Model flags → local files. Local paths pass straight through; names and hf: specs go to the
registry and fetchers."""

from __future__ import annotations

from pathlib import Path

from .errors import InputError
from .output import Output


def is_none(value: str | None) -> bool:
    return value is not None and value.strip().lower() == "none"


def resolve_models(target: str | None, draft: str | None, pair: str | None, registry: Path | None, out: Output) -> tuple[Path, Path | None]:
    """(target path, draft path or None for plain decoding)."""
    if not target:
        raise InputError("no target model given", "pass --target FILE.gguf")
    return Path(target), None if (draft is None or is_none(draft)) else Path(draft)
