"""sha256 of model files: what a pinned Hugging Face file must hash to, and what `specrun pull`
prints so a user can pin it.

A freshly downloaded file is hashed in full and compared with its pin; a mismatch deletes the
download, since it is not the file the registry names. A file already in the Hugging Face cache is
judged by the name of its cache blob, which huggingface_hub gives the file's LFS sha256, so a run
that uses a cached model does not read gigabytes first; it is never deleted, only refused. Hashes
computed in this process are remembered by (path, size, mtime), so verifying and then printing a
hash reads the file once.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import FetchError
from . import bundle as _bundle
from .bundle import ProgressHook
from .registry import SHA256_RE

_computed: dict[tuple[str, int, int], str] = {}


def _key(path: Path) -> tuple[str, int, int]:
    real = os.path.realpath(path)
    st = os.stat(real)
    return real, st.st_size, st.st_mtime_ns


def file_sha256(path: Path, progress: ProgressHook | None = None, label: str | None = None) -> str:
    """The sha256 of the file at `path` (through links), hashed once per process while unchanged."""
    key = _key(path)
    if key not in _computed:
        _computed[key] = _bundle.sha256_file(Path(key[0]), label or f"hashing {Path(path).name}", progress, key[1])
    return _computed[key]


def blob_sha256(path: Path) -> str | None:
    """The sha256 a Hugging Face cache entry is named by (its blob's name), or None when `path` is
    not a link to a blob named like one."""
    real = Path(os.path.realpath(path))
    if real == Path(path).absolute() or real.parent.name != "blobs":
        return None
    return real.name if SHA256_RE.match(real.name) else None


def known_sha256(path: Path) -> str | None:
    """The file's sha256 when it is known without reading the file: hashed earlier in this process,
    vouched for by a bundle's verification record, or named by its Hugging Face cache blob."""
    try:
        key = _key(path)
    except OSError:
        return None
    return _computed.get(key) or _bundle.recorded_sha256(Path(key[0])) or blob_sha256(path)


def fetched_sha256(path: Path, progress: ProgressHook | None = None) -> str:
    """The sha256 of a file just fetched: from its verification (this process, or a bundle's
    record), else by reading it. A cache blob's name is not enough here: this is the hash a user
    pins, so it comes from the bytes on disk."""
    try:
        key = _key(path)
    except OSError:
        key = None
    if key is not None and (key in _computed or _bundle.recorded_sha256(Path(key[0]))):
        return _computed.get(key) or _bundle.recorded_sha256(Path(key[0]))  # type: ignore[return-value]
    return file_sha256(path, progress)


def check_download(label: str, path: Path, pin: str, progress: ProgressHook | None = None) -> None:
    """Hash a downloaded file and compare it with its pin; a mismatch deletes it (the snapshot link
    and the blob it points to) and raises FetchError naming both hashes."""
    digest = file_sha256(path, progress, f"verifying {label}")
    if digest == pin:
        return
    _delete(path)
    raise FetchError(
        f"{label} has sha256 {digest}, but the registry pins {pin}; the download was deleted",
        "if the repository changed the file on purpose, update sha256 (or pin the revision) in models.toml",
    )


def check_cached(label: str, path: Path, pin: str, progress: ProgressHook | None = None) -> None:
    """Compare a file found in the Hugging Face cache with its pin, by its blob's name when it has
    one (no reading), else by hashing it; a mismatch raises FetchError and leaves the file alone."""
    digest = blob_sha256(path) or file_sha256(path, progress, f"verifying {label}")
    if digest != pin:
        raise FetchError(
            f"{label} in the Hugging Face cache has sha256 {digest}, but the registry pins {pin}",
            f"delete {path} to download the pinned file again, or update sha256 in models.toml",
        )


def _delete(path: Path) -> None:
    real = Path(os.path.realpath(path))
    for victim in (Path(path), real):
        try:
            victim.unlink()
        except OSError:
            pass
    for key in [k for k in _computed if k[0] == str(real)]:
        del _computed[key]
