"""Helpers for the model-pair tests: isolated cache/config dirs, fake pip chunk distributions, a
pre-populated Hugging Face cache, and registry files pointing at tiny models."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest


@pytest.fixture(name="isolated")
def isolated_fixture(tmp_path, monkeypatch) -> Path:
    """Fresh specrun cache, user config and HF cache under tmp_path; Hugging Face offline."""
    for var, sub in (("XDG_CACHE_HOME", "cache"), ("XDG_CONFIG_HOME", "config"), ("HF_HUB_CACHE", "hf")):
        (tmp_path / sub).mkdir()
        monkeypatch.setenv(var, str(tmp_path / sub))
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path


def record_hash(data: bytes) -> str:
    """sha256 as a wheel RECORD writes it."""
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_chunk_dists(site: Path, payload: bytes, prefix: str, n_parts: int, version: str = "1.0") -> list[Path]:
    """Split `payload` into `n_parts` distributions `{prefix}-part{n}` (each with METADATA and a
    RECORD holding the part's hash and size) under `site`; returns the part files."""
    size = -(-len(payload) // n_parts)
    files = []
    for n in range(1, n_parts + 1):
        chunk = payload[(n - 1) * size : n * size]
        package = f"{prefix.replace('-', '_')}_part{n}"
        rel = f"{package}/data/part{n:02d}.bin"
        (site / package / "data").mkdir(parents=True)
        (site / rel).write_bytes(chunk)
        info = site / f"{package}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {prefix}-part{n}\nVersion: {version}\n")
        (info / "RECORD").write_text(f"{rel},sha256={record_hash(chunk)},{len(chunk)}\n{info.name}/RECORD,,\n")
        files.append(site / rel)
    return files


def bundle_toml(prefix: str, n_parts: int, payload: bytes, version: str = "1.0") -> str:
    """The `bundle = {...}` value describing chunk distributions made by make_chunk_dists."""
    package = prefix.replace("-", "_")
    return (
        f'{{ distribution = "{prefix}-part{{n}}", file = "{package}_part{{n}}/data/part{{n:02d}}.bin", '
        f"count = {n_parts}, "
        f'version = "{version}", sha256 = "{hashlib.sha256(payload).hexdigest()}", size = {len(payload)} }}'
    )


def populate_hf_cache(root: Path, repo: str, filename: str, data: bytes, commit: str = "a" * 40) -> Path:
    """Lay out one file the way huggingface_hub caches it (blob, snapshot link, refs/main)."""
    repo_dir = root / ("models--" + repo.replace("/", "--"))
    blob = repo_dir / "blobs" / hashlib.sha256(data).hexdigest()
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(data)
    snap = repo_dir / "snapshots" / commit / filename
    snap.parent.mkdir(parents=True, exist_ok=True)
    snap.symlink_to(blob)
    (repo_dir / "refs").mkdir(exist_ok=True)
    (repo_dir / "refs" / "main").write_text(commit)
    return snap


def write_registry(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def fake_hub(monkeypatch, files: dict[str, bytes], calls: list) -> None:
    """hf_hub_download that 'downloads' `files` (name → bytes) into the HF cache, as the hub lays it out."""
    import huggingface_hub

    monkeypatch.delenv("HF_HUB_OFFLINE")

    def download(repo, name, *, revision, cache_dir, tqdm_class):
        calls.append((repo, name, revision))
        return str(populate_hf_cache(Path(cache_dir), repo, name, files[name], commit="c" * 40))

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
