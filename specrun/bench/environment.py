"""What a benchmark result must carry to be comparable later: machine, build, packages, model files.

Model files are identified by sha256. Hashing a 1 GB model takes seconds, so a hash is reused while
the file's size and modification time are unchanged: from the record the bundle assembler keeps
next to a model (`<file>.verified.json`), else from specrun's hash cache (`hashes.json` in the
cache directory, updated under a lock so concurrent runs keep each other's entries), else it is
computed once and cached.
"""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from ..atomic import read_json_object, update_json
from ..models.bundle import recorded_sha256

PACKAGES = ("specrun", "llama_cpp_python", "numpy", "typer", "rich", "huggingface_hub", "matplotlib")


def package_versions() -> dict[str, str | None]:
    """Installed versions of the packages that shape the numbers (None: not installed)."""
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def cpu_model() -> str | None:
    """The CPU's marketing name where the OS tells it (platform.processor() is often empty):
    /proc/cpuinfo on Linux, sysctl on macOS."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if sys.platform == "darwin":
        try:
            out = subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, timeout=5, check=False
            )
            if out.stdout.strip():
                return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or None


def machine() -> dict:
    """Platform, CPU and Python: what makes two machines' numbers differ."""
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
    }


def _hash_cache_path() -> Path:
    from ..models.fetch import cache_dir

    return cache_dir() / "hashes.json"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_hash(path: Path, cache: Path | None = None, hasher: Callable[[Path], str] = _sha256) -> tuple[str, str]:
    """(sha256, where it came from: "record", "cache" or "computed")."""
    path = Path(path).resolve()
    st = path.stat()
    sha = recorded_sha256(path)
    if sha:
        return sha, "record"
    cache = cache or _hash_cache_path()
    entry = read_json_object(cache).get(str(path))
    if isinstance(entry, dict) and entry.get("size") == st.st_size and entry.get("mtime_ns") == st.st_mtime_ns:
        if isinstance(entry.get("sha256"), str):
            return entry["sha256"], "cache"
    sha = hasher(path)
    record = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha}
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        # Under the cache's lock, re-read and add only this file: another run's entries stay.
        update_json(cache, lambda entries: entries.update({str(path): record}), sort_keys=True)
    except OSError:
        pass  # a read-only cache only costs the next run a re-hash
    return sha, "computed"


def model_file(path: Path | None, cache: Path | None = None) -> dict | None:
    """Path, size and sha256 of a model file."""
    if path is None:
        return None
    path = Path(path)
    sha, source = file_hash(path, cache)
    return {
        "path": str(path.resolve()),
        "name": path.name,
        "size": path.stat().st_size,
        "sha256": sha,
        "sha256_from": source,
    }


def load_average() -> float | None:
    """The 1-minute load average (None where the OS has none): taken before the models load, it
    tells whether other processes were already busy."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def environment(pair, cache: Path | None = None, load_average_start: float | None = None) -> dict:
    """Everything about this machine, build and pair that a reader needs to compare two results."""
    from .. import __version__
    from ..engine import lib as engine_lib

    config = pair.config
    from ..engine.devices import has_gpu

    offload = has_gpu()
    return {
        "specrun": __version__,
        "packages": package_versions(),
        "machine": machine(),
        "llama_cpp_system_info": engine_lib.system_info().strip(),
        "gpu_offload": offload,
        "threads": pair.threads,
        "gpu_layers": pair.gpu_layers,
        "draft_gpu_layers": pair.draft_gpu_layers if pair.has_draft else None,
        "placement": pair.placement.to_dict(),
        "ctx_size": config.ctx_size,
        "n_batch": config.n_batch,
        "models": {"target": model_file(config.target, cache), "draft": model_file(config.draft, cache)},
        "load_average_start": load_average_start,
    }
