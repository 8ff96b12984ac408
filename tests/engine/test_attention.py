"""How a context computes attention: unfused on the CPU while its score buffer fits, else llama.cpp's choice."""

import pytest

from specrun.engine.attention import SCORE_MEMORY_SHARE, choose_attention, score_bytes

GIB = 1 << 30


def choice(mode="auto", *, offloaded=False, sequences=1, n_cells=32768, n_batch=512, n_head=12, memory=16 * GIB):
    return choose_attention(
        mode, offloaded=offloaded, sequences=sequences, n_cells=n_cells, n_batch=n_batch, n_head=n_head, memory=memory
    )


def test_a_cpu_context_runs_unfused():
    assert choice().fused is False
    assert choice().label == "off"


def test_an_offloaded_context_keeps_llama_cpps_choice():
    assert choice(offloaded=True).fused is None


def test_sequences_sharing_the_cache_keep_llama_cpps_choice():
    """Unfused attention would score every other sequence's cached cells; the fused kernel skips them."""
    assert choice(sequences=4).fused is None
    assert choice("off", sequences=4).fused is False


def test_a_score_buffer_over_its_share_of_memory_keeps_llama_cpps_choice():
    needed = score_bytes(131072, 512, 32)
    assert choice(n_cells=131072, n_head=32, memory=needed * SCORE_MEMORY_SHARE - 1).fused is None
    assert choice(n_cells=131072, n_head=32, memory=needed * SCORE_MEMORY_SHARE).fused is False
    assert "MiB" in choice(n_cells=131072, n_head=32, memory=GIB).reason


def test_unknown_memory_has_a_fixed_budget():
    assert choice(memory=None).fused is False  # 805 MiB of scores: within the 1 GiB fallback
    assert choice(memory=None, n_head=32).fused is None


@pytest.mark.parametrize("offloaded", [False, True])
def test_the_flag_overrides_the_choice(offloaded):
    assert choice("on", offloaded=offloaded).fused is True
    assert choice("off", offloaded=offloaded, n_head=4096).fused is False


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="auto, on, off"):
        choice("maybe")
