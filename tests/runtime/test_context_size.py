"""A server's context when no --ctx-size is given: the target's trained context, as far as the KV
caches of its sequences fit in half the memory left beside the weights."""

from __future__ import annotations

from tiny_models import write_tiny_gguf

from specrun.runtime.context_size import SMALLEST, kv_bytes_per_token, serve_context, trained_context

GIB = 2**30


def test_the_trained_context_when_memory_holds_it(tmp_path):
    target = write_tiny_gguf(tmp_path / "t.gguf", seed=0, context_length=32768)
    assert trained_context(target) == 32768
    chosen = serve_context(target, None, sequences=4, memory=8 * GIB)
    assert chosen.n_ctx == 32768 and "trained" in chosen.reason


def test_memory_bounds_it_with_the_draft_counted(tmp_path):
    target = write_tiny_gguf(tmp_path / "t.gguf", seed=0, context_length=1 << 20)
    draft = write_tiny_gguf(tmp_path / "d.gguf", seed=1, context_length=1 << 20)
    per_token = kv_bytes_per_token(target)[0] + kv_bytes_per_token(draft)[0]
    weights = kv_bytes_per_token(target)[1] + kv_bytes_per_token(draft)[1]
    memory = weights + 2 * per_token * 4 * 10_000
    chosen = serve_context(target, draft, sequences=4, memory=memory)
    assert chosen.n_ctx == 9984 and chosen.n_ctx % 256 == 0  # 10,000 rounded down to llama.cpp's padding
    assert "4 sequences" in chosen.reason
    alone = serve_context(target, None, sequences=4, memory=memory)
    assert alone.n_ctx > chosen.n_ctx


def test_never_below_the_smallest_useful_context(tmp_path):
    target = write_tiny_gguf(tmp_path / "t.gguf", seed=0, context_length=32768)
    assert serve_context(target, None, sequences=4, memory=1).n_ctx == SMALLEST
