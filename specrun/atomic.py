"""Files specrun writes (transcripts, reports, caches, records) appear whole or not at all: written
to a temp file beside the target, fsynced, renamed over it, and the folder fsynced.

Replacing a file must not change what the user set up around it: the new file keeps the old one's
permission bits (a new file gets the usual mode from the umask), and a symlink is written through
to its target, so the link stays a link. Files that several runs update (caches, records) are
read, changed and written under a lock, so two processes adding entries at once keep both.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

_TEMP_ATTEMPTS = 100


def write_atomic(path: Path | str, data: bytes | str, *, exclusive: bool = False) -> None:
    """Write `data` (text is UTF-8 encoded) to `path` so a reader never sees half a file.

    exclusive: never replace anything; an existing `path` (a dangling link included) raises
    FileExistsError, decided atomically by the file system rather than by a check before writing.
    """
    path = Path(path)
    if not exclusive and path.is_symlink():
        path = Path(os.path.realpath(path))  # write the link's target; the link itself stays
    folder = path.parent if str(path.parent) else Path(".")
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, temp = _create_temp(folder, path.name)
    linked = False
    try:
        with os.fdopen(fd, "wb") as handle:
            if not exclusive:
                _keep_mode(handle.fileno(), temp, path)
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        if exclusive:
            _link_new(temp, path)
            linked = True
        else:
            os.replace(temp, path)
    except BaseException:
        _unlink_quietly(temp)
        raise
    if linked:
        _unlink_quietly(temp)
    fsync_dir(folder)


def _create_temp(folder: Path, name: str) -> tuple[int, Path]:
    """A new temp file beside the target, created with mode 0666 so the umask decides its mode,
    as it would for any file a program opens for writing (mkstemp would make it 0600)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
    for _ in range(_TEMP_ATTEMPTS):
        temp = folder / f".{name}.{secrets.token_hex(4)}.tmp"
        try:
            return os.open(temp, flags, 0o666), temp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary file name", str(folder))


def _keep_mode(fd: int, temp: Path, path: Path) -> None:
    """Give the temp file the permission bits of the file it will replace (if there is one)."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return  # nothing to replace: the umask's mode stands
    if hasattr(os, "fchmod"):
        os.fchmod(fd, mode)
    else:  # Windows
        os.chmod(temp, mode)


def _link_new(temp: Path, path: Path) -> None:
    """Give the written temp file the name `path` only if nothing has it (os.link never replaces)."""
    try:
        os.link(temp, path)
    except FileExistsError:
        raise
    except OSError:
        # A file system without hard links: check, then rename (a narrow race, but no other way).
        if os.path.lexists(path):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(path)) from None
        os.replace(temp, path)


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def fsync_dir(folder: Path) -> None:
    """Make a rename durable; some file systems cannot open a folder, which is fine."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def lock_path(path: Path | str) -> Path:
    """The lock file beside `path` that serialises its updates."""
    path = Path(path)
    return path.with_name(path.name + ".lock")


@contextlib.contextmanager
def locked(path: Path | str) -> Iterator[None]:
    """Hold an exclusive lock on `path`'s lock file while the block runs; another process taking
    the same lock waits. Where there is no fcntl (Windows) nothing is locked: updates still land
    whole, but two at once may lose one's entries."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(lock_path(path), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def read_json_object(path: Path | str) -> dict:
    """The JSON object in `path`; {} when it is absent, unreadable or not an object."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def update_json(path: Path | str, change: Callable[[dict], bool | None], *, sort_keys: bool = False) -> dict:
    """Read the JSON object in `path`, let `change` edit it in place, and write it back atomically,
    all under `locked(path)`: entries other processes wrote meanwhile are kept, not overwritten.
    `change` returns False when there is nothing to write. OSError means the file or its folder
    cannot be written. Returns the object as written."""
    path = Path(path)
    with locked(path):
        entries = read_json_object(path)
        if change(entries) is not False:
            write_atomic(path, json.dumps(entries, indent=1, sort_keys=sort_keys))
    return entries
