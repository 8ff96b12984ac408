"""Large byte buffers in RAM that are fast to fill the first time.

A saved cache is hundreds of megabytes at an agent's context (about 29 KB a token for a 1.5B
model). Written into fresh memory, most of the time goes to the kernel handing out and zeroing
4 KiB pages one fault at a time, not to the copy: a second of faults for a tenth of a second of
copying. Memory mapped with transparent huge pages faults 2 MiB at a time.
"""

from __future__ import annotations

import mmap

import numpy as np

HUGE_PAGE = 2 << 20  # smaller buffers take few faults either way


def host_bytes(size: int) -> np.ndarray:
    """An uninitialised byte array of `size`, backed by huge pages where the system offers them
    (Linux with transparent huge pages on `always` or `madvise`); plain numpy memory elsewhere.
    The mapping lives as long as the array."""
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if size < HUGE_PAGE or advice is None:
        return np.empty(size, dtype=np.uint8)
    try:
        mapped = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except (OSError, ValueError):
        return np.empty(size, dtype=np.uint8)
    try:
        mapped.madvise(advice)
    except OSError:
        pass  # huge pages off: a plain mapping, no slower than numpy's
    return np.frombuffer(mapped, dtype=np.uint8)
