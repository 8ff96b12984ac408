"""Saved caches live in buffers that fault in huge pages where the system has them; a cache saved
into one loads back as the same cache."""

from __future__ import annotations

import mmap

import numpy as np
import pytest
from serve_helpers import load_pair

from specrun.engine import host_memory
from specrun.engine.host_memory import HUGE_PAGE, host_bytes


def mapped(data: np.ndarray) -> bool:
    """Whether the array's memory is an mmap (numpy sees it through a memoryview)."""
    return isinstance(getattr(data.base, "obj", None), mmap.mmap)


def test_a_large_buffer_is_a_mapping_advised_to_use_huge_pages(monkeypatch):
    if getattr(mmap, "MADV_HUGEPAGE", None) is None:
        pytest.skip("this system has no transparent huge pages (MADV_HUGEPAGE)")
    advised = []
    real = mmap.mmap

    class Recording(real):
        def madvise(self, option, *args):
            advised.append(option)
            return super().madvise(option, *args)

    monkeypatch.setattr(host_memory.mmap, "mmap", Recording)
    data = host_bytes(HUGE_PAGE + 5)
    assert mapped(data) and advised == [mmap.MADV_HUGEPAGE]
    assert data.size == HUGE_PAGE + 5 and data.dtype == np.uint8 and data.flags.writeable
    data[:] = 7
    assert int(data[-1]) == 7
    small = host_bytes(100)
    assert not mapped(small) and small.size == 100  # below a huge page: plain numpy memory


def test_a_cache_saved_into_mapped_memory_loads_back_the_same(tiny_target, monkeypatch):
    monkeypatch.setattr(host_memory, "HUGE_PAGE", 0)  # every save takes the mapped path
    pair = load_pair(tiny_target, None)
    try:
        ctx = pair.session.target_ctx
        tokens = pair.target_model.tokenize("the quick brown fox jumps over", add_special=True, parse_special=True)
        expected = ctx.feed(0, tokens, "last").copy()
        saved = ctx.save(0)
        assert saved is not None and mapped(saved)
        ctx.clear(0)
        assert ctx.load(0, tokens, saved)
        ctx.trim(0, len(tokens) - 1)
        np.testing.assert_allclose(ctx.feed(0, tokens[-1:], "last"), expected, rtol=1e-5, atol=1e-5)
    finally:
        pair.close()
