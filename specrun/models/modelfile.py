"""Is this path a complete GGUF file? Asked before llama.cpp sees it, because llama.cpp's own
errors are cryptic and a truncated file can crash it."""

from __future__ import annotations

import functools
import os
from pathlib import Path

from ..errors import ModelFileError
from .gguf_header import NotGGUF, Truncated, check_complete


def check_gguf_file(path: str | os.PathLike) -> Path:
    """Make sure `path` is a complete GGUF file before llama.cpp sees it (its errors are cryptic)."""
    path = Path(path).expanduser()
    if not path.exists():
        raise ModelFileError(f"model file {path} does not exist", "check the path, or name a model from `specrun pairs`")
    if path.is_dir():
        raise ModelFileError(f"{path} is a directory, not a model file", "pass the .gguf file inside it")
    try:
        st = path.stat()
        _check_complete_cached(str(path.resolve()), st.st_size, st.st_mtime_ns)
    except NotGGUF as exc:
        raise ModelFileError(f"{path} is not a GGUF model: {exc}", "pass a .gguf file (llama.cpp's convert_hf_to_gguf.py converts others)") from exc
    except Truncated as exc:
        raise ModelFileError(f"{path} is incomplete: {exc}", "download or copy it again") from exc
    except (ValueError, OSError) as exc:
        raise ModelFileError(f"{path} is not a readable GGUF model: {exc}", "download or copy it again") from exc
    return path


@functools.lru_cache(maxsize=64)
def _check_complete_cached(path: str, size: int, mtime_ns: int) -> None:  # noqa: ARG001 - cache keys
    """One header walk per file version per process (resolving and checking both ask)."""
    check_complete(path)
