"""Decode costs for auto: measured once per models and settings, cached, and used to seed the
controller so it needs no trial steps to know what a verification batch costs."""

from __future__ import annotations

from specrun.engine.auto.control import Controller
from specrun.engine.auto.costs import DecodeCosts
from specrun.runtime import cost_cache
from specrun.runtime.pair import Pair, PairConfig


def test_cache_round_trip_and_bounded_size(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    costs = DecodeCosts({1: 0.03, 16: 0.25}, 0.02)
    cost_cache.store("a", costs)
    assert cost_cache.load("a") == costs and cost_cache.load("b") is None
    for i in range(cost_cache.MAX_ENTRIES + 5):
        cost_cache.store(f"k{i}", costs)
    assert cost_cache.load("a") is None and cost_cache.load(f"k{cost_cache.MAX_ENTRIES + 4}") == costs


def test_costs_timed_at_other_batch_sizes_are_measured_again(tmp_path, monkeypatch):
    """A curve timed at other sizes (an older calibration) would hide the cheap batch sizes."""
    target = tmp_path / "t.gguf"
    target.write_bytes(b"GGUF")
    key = cost_cache.cache_key(target, None, threads=2, gpu_layers=0, draft_gpu_layers=0, build="b")
    assert key == cost_cache.cache_key(target, None, threads=2, gpu_layers=0, draft_gpu_layers=0, build="b")
    monkeypatch.setattr(cost_cache, "CALIBRATION_SIZES", (1, 2, 16))
    assert key != cost_cache.cache_key(target, None, threads=2, gpu_layers=0, draft_gpu_layers=0, build="b")


def test_unreadable_cache_is_measured_again(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cost_cache.cache_file().parent.mkdir(parents=True)
    cost_cache.cache_file().write_text("{not json")
    assert cost_cache.load("a") is None
    cost_cache.store("a", DecodeCosts({1: 0.01}))
    assert cost_cache.load("a") == DecodeCosts({1: 0.01})


def test_pair_measures_costs_once_then_reads_them(tmp_path, monkeypatch, tiny_target, tiny_draft):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    notices: list[str] = []
    first = Pair(PairConfig(tiny_target, tiny_draft, ctx_size=256, threads=1), warn=notices.append)
    costs = first.speculation.decode_costs()
    first.close()
    assert len(notices) == 1 and "measuring decode costs" in notices[0]
    assert {1, 2, 5, 15, 16, 17, 31, 32} <= set(costs.verify_s) and costs.draft_token_s > 0
    second = Pair(PairConfig(tiny_target, tiny_draft, ctx_size=256, threads=1), warn=notices.append)
    try:
        assert second.speculation.decode_costs() == costs and len(notices) == 1
        other_threads = Pair(PairConfig(tiny_target, tiny_draft, ctx_size=256, threads=2), warn=notices.append)
        other_threads.speculation.decode_costs()
        other_threads.close()
        assert len(notices) == 2  # another thread count is another machine configuration
    finally:
        second.close()


def test_seeded_controller_skips_measuring_and_never_warms_up_a_hopeless_draft():
    c = Controller(["ngram", "draft"], 16, warmup_steps=3)
    c.seed({1: 0.033, 2: 0.057, 5: 0.113, 9: 0.227, 16: 0.254, 17: 0.3}, {"draft": 0.020})
    assert c.hopeless("draft")
    choice = c.choose()
    assert choice.reason != "warmup" or choice.drafter != "draft"
    assert c.choose([]).drafter is None  # no lookup match: plain decoding, no measuring step


def test_seeded_controller_still_warms_up_a_draft_that_can_win():
    c = Controller(["draft"], 8, warmup_steps=3)
    c.seed({1: 0.020, 5: 0.022, 9: 0.024}, {"draft": 0.001})
    assert not c.hopeless("draft")
    assert c.choose() == type(c.choose())("draft", c.k_start, "warmup")


def test_a_draft_that_wins_only_at_full_acceptance_of_31_tokens_is_not_tried():
    """Measured here: a pass over 32 tokens costs 12.9× one, so 31 draft tokens at 19 ms, all
    accepted, would beat plain decoding by 3%; no real draft is accepted that reliably."""
    c = Controller(["ngram", "draft"], 31)
    c.seed({1: 0.0329, 2: 0.0583, 5: 0.1134, 9: 0.2302, 17: 0.3018, 32: 0.4239}, {"draft": 0.0192})
    assert c.ceiling("draft") > c.plain_rate()
    assert c.hopeless("draft")


def test_a_ruled_out_draft_stays_out_when_plain_steps_get_slower_at_longer_contexts():
    c = Controller(["ngram", "draft"], 31)
    c.seed({1: 0.0329, 2: 0.0583, 5: 0.1134, 9: 0.2302, 17: 0.3018, 32: 0.4239}, {"draft": 0.0192})
    for _ in range(20):  # single-token passes at a longer context
        c.observe_step(None, 0, 0, 0, 0.0, 0.045, 1)
    assert c.hopeless("draft")
    assert all(c.choose([]).drafter != "draft" for _ in range(50))
