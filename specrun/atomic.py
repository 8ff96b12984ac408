"""Files specrun writes (transcripts, reports, caches, records) appear whole or not at all: written
to a temp file beside the target, fsynced, renamed over it, and the folder fsynced."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path | str, data: bytes | str) -> None:
    """Write `data` (text is UTF-8 encoded) to `path` so a reader never sees half a file."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise
    fsync_dir(folder)


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
