"""Model flags → local files and the draft length to use, through the registry and fetchers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .. import defaults
from ..models.fetch import resolve_models as fetch_models
from ..models.registry import load_registry
from ..terminal import progress_display


@dataclass(frozen=True)
class Resolved:
    """What the model flags came to: local files, --draft-max as given, the pair's recommended K."""

    target: Path
    draft: Path | None
    draft_max: int | None = None  # --draft-max, when given
    recommended_k: int | None = None  # the registry pair's draft_max, when the models came from a pair

    def draft_max_for(self, mode: str) -> int | None:
        """The cap on draft tokens per step for `mode` (defaults.draft_max_for)."""
        return defaults.draft_max_for(mode, self.draft_max, self.recommended_k)


def resolve_models(target: str | None, draft: str | None, pair: str | None, registry: Path | None, draft_max: int | None = None) -> Resolved:
    """Resolve --target/--draft/--pair (default: the default pair), fetching or assembling with progress
    on stderr, and note the pair's recommended K."""
    reg = load_registry(registry)
    with progress_display() as hook:
        target_path, draft_path = fetch_models(target, draft, pair, reg, hook)
    chosen = reg.pair(pair) if pair else (reg.default_pair() if target is None and draft is None else None)
    return Resolved(target_path, draft_path, draft_max, chosen.draft_max if chosen is not None else None)
