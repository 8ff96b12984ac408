"""Decode costs measured once per (models, build, threads, GPU layers, sizes timed), kept in specrun's cache.

A pair's cost curve changes only when one of those does, so `auto` reads it from disk instead of
spending seconds to measure it in every run.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..atomic import write_atomic
from ..engine.auto.costs import CALIBRATION_SIZES, DecodeCosts
from ..models.fetch import cache_dir

MAX_ENTRIES = 32


def cache_file() -> Path:
    return cache_dir() / "decode-costs.json"


def _identity(path: Path | None) -> list | None:
    if path is None:
        return None
    st = Path(path).stat()
    return [str(Path(path).resolve()), st.st_size, st.st_mtime_ns]


def cache_key(target: Path, draft: Path | None, *, threads: int, gpu_layers: int, draft_gpu_layers: int, build: str) -> str:
    """A digest of everything the costs depend on."""
    parts = [_identity(target), _identity(draft), threads, gpu_layers, draft_gpu_layers, build, list(CALIBRATION_SIZES)]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


def _entries() -> dict:
    try:
        data = json.loads(cache_file().read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def load(key: str) -> DecodeCosts | None:
    """The stored costs for `key`; None when absent or unreadable (they are measured again)."""
    entry = _entries().get(key)
    try:
        return DecodeCosts.from_dict(entry) if entry else None
    except (KeyError, TypeError, ValueError):
        return None


def store(key: str, costs: DecodeCosts) -> None:
    """Save costs under `key`, keeping the newest MAX_ENTRIES; a cache that cannot be written is skipped."""
    entries = _entries()
    entries.pop(key, None)
    entries[key] = costs.to_dict()
    while len(entries) > MAX_ENTRIES:
        entries.pop(next(iter(entries)))
    try:
        cache_file().parent.mkdir(parents=True, exist_ok=True)
        write_atomic(cache_file(), json.dumps(entries, indent=1))
    except OSError:
        pass
