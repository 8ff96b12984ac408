"""What specrun remembers between runs about a pair, in its cache folder: the decode costs (keyed by
models, build, threads and placement) and the acceptance auto learned (keyed by models and the
lookup's settings).

A pair's cost curve changes only when one of those does, so `auto` reads it from disk instead of
spending seconds to measure it in every run; but only a curve measured in good conditions is
stored or read back (engine.auto.costs.judge), and one that later runs find far off is dropped,
so a measurement taken on a busy machine cannot mislead every run after it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..atomic import read_json_object, update_json
from ..engine.auto.costs import CALIBRATION_SIZES, DecodeCosts, judge
from ..models.fetch import cache_dir

MAX_ENTRIES = 32
FORMAT = 2  # entries of other formats are ignored (format 1 kept no record of how costs were measured)


class KeyedStore:
    """A small JSON file of the newest MAX_ENTRIES entries by key, written atomically; a file that
    cannot be read or written only costs a measurement or a lesson. Each change re-reads the file
    under its lock and changes only its own key, so runs storing different keys at once keep both."""

    def __init__(self, name: str):
        self.name = name

    def path(self) -> Path:
        return cache_dir() / self.name

    def get(self, key: str) -> dict | None:
        entry = read_json_object(self.path()).get(key)
        return entry if isinstance(entry, dict) else None

    def put(self, key: str, value: dict) -> None:
        def change(entries: dict) -> None:
            entries.pop(key, None)
            entries[key] = value
            while len(entries) > MAX_ENTRIES:
                entries.pop(next(iter(entries)))

        self._update(change)

    def drop(self, key: str) -> None:
        self._update(lambda entries: entries.pop(key, None) is not None)

    def _update(self, change) -> None:
        try:
            self.path().parent.mkdir(parents=True, exist_ok=True)
            update_json(self.path(), change)
        except OSError:
            pass


COSTS = KeyedStore("decode-costs.json")
LEARNED = KeyedStore("acceptance.json")


def cache_file() -> Path:
    return COSTS.path()


def _identity(path: Path | None) -> list | None:
    if path is None:
        return None
    st = Path(path).stat()
    return [str(Path(path).resolve()), st.st_size, st.st_mtime_ns]


def cache_key(
    target: Path,
    draft: Path | None,
    *,
    threads: int,
    gpu_layers: int,
    draft_gpu_layers: int,
    build: str,
    placement: object = None,
) -> str:
    """A digest of everything the costs depend on."""
    parts = [
        FORMAT,
        _identity(target),
        _identity(draft),
        threads,
        gpu_layers,
        draft_gpu_layers,
        build,
        list(CALIBRATION_SIZES),
        placement,
    ]
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:32]


def learned_key(target: Path, draft: Path | None, ngrams: tuple[int, int]) -> str:
    """A digest of what acceptance depends on: the models and the lookup's match lengths."""
    parts = [FORMAT, _identity(target), _identity(draft), list(ngrams)]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


def load(key: str, threads: int = 1) -> DecodeCosts | None:
    """The stored costs for `key`; None when absent, unreadable or not to be trusted (see
    engine.auto.costs.judge): they are then measured again."""
    entry = COSTS.get(key)
    try:
        costs = DecodeCosts.from_dict(entry) if entry else None
    except (KeyError, TypeError, ValueError):
        return None
    return costs if costs is not None and not judge(costs, threads) else None


def store(key: str, costs: DecodeCosts, threads: int = 1) -> list[str]:
    """Keep costs under `key` if they were measured in good conditions; returns why not otherwise."""
    reasons = judge(costs, threads)
    if not reasons:
        COSTS.put(key, costs.to_dict())
    return reasons


def drop(key: str) -> None:
    """Forget the costs under `key` (later runs found them far off): the next run measures again."""
    COSTS.drop(key)
