"""Local GGUF files a draft could come from: registry models on disk, specrun's cache, the Hugging
Face cache and directories the user names. Finding is cheap (directory walks and stat calls);
vetting each file is the caller's business."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .fetch import availability, cache_dir, hf_cache_dir
from .registry import SPLIT_RE, Registry


@dataclass(frozen=True)
class Found:
    """A GGUF file on disk; `name` is set when a registry model resolves to it."""

    path: Path
    size: int
    found_in: str
    name: str | None = None


def gguf_files(directory: Path) -> Iterator[Path]:
    """*.gguf under `directory`, recursively; of a split model only its first shard."""
    for path in sorted(directory.rglob("*")):
        if not path.name.lower().endswith(".gguf") or not path.is_file():
            continue
        shard = SPLIT_RE.match(path.name)
        if shard and int(shard.group("i")) != 1:
            continue
        yield path


def _hf_repo(path: Path, root: Path) -> str:
    top = path.relative_to(root).parts[0]  # models--OWNER--NAME
    return "/".join(top.split("--")[1:]) if top.startswith("models--") else top


def local_models(reg: Registry, search: list[Path], exclude: Path | None = None) -> list[Found]:
    """Every distinct local GGUF (by real path), registry names attached where they apply."""
    names: dict[str, str] = {}
    registry_hits: list[tuple[str, Path, str]] = []
    for model in reg.models.values():
        found = availability(model)
        if found.path is not None:
            real = os.path.realpath(found.path)
            names.setdefault(real, model.name)
            registry_hits.append((model.name, found.path, found.where))
    candidates: list[tuple[Path, str]] = [(p, where) for _, p, where in registry_hits]
    specrun_models = cache_dir() / "models"
    if specrun_models.is_dir():
        candidates += [(p, "specrun cache") for p in gguf_files(specrun_models)]
    hf_root = hf_cache_dir()
    if hf_root.is_dir():
        for repo_dir in sorted(hf_root.glob("models--*")):
            candidates += [
                (p, f"HF cache ({_hf_repo(p, hf_root)})")
                for p in gguf_files(repo_dir / "snapshots")
                if (repo_dir / "snapshots").is_dir()
            ]
    for directory in search:
        candidates += [(p, str(directory)) for p in gguf_files(directory)]
    skip = {os.path.realpath(exclude)} if exclude is not None else set()
    result = []
    for path, where in candidates:
        real = os.path.realpath(path)
        if real in skip:
            continue
        skip.add(real)
        try:
            size = os.stat(real).st_size
        except OSError:
            continue
        result.append(Found(Path(path), size, where, names.get(real)))
    return result
