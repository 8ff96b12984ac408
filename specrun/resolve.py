"""Model flags → local files and the draft length to use, through the registry and fetchers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import defaults
from .fetch import resolve_models as fetch_models
from .output import progress_display
from .registry import load_registry


@dataclass(frozen=True)
class Resolved:
    """What the model flags came to: local files and the pair's recommended K (if any)."""

    target: Path
    draft: Path | None
    draft_max: int


def resolve_models(target: str | None, draft: str | None, pair: str | None, registry: Path | None, draft_max: int | None = None) -> Resolved:
    """Resolve --target/--draft/--pair (default: the default pair), fetching or assembling with progress
    on stderr. K is --draft-max if given, else the pair's recommendation, else the built-in default."""
    reg = load_registry(registry)
    with progress_display() as hook:
        target_path, draft_path = fetch_models(target, draft, pair, reg, hook)
    if draft_max is None:
        chosen = reg.pair(pair) if pair else (reg.default_pair() if target is None and draft is None else None)
        draft_max = (chosen.draft_max if chosen is not None else None) or defaults.DRAFT_MAX
    return Resolved(target_path, draft_path, draft_max)
