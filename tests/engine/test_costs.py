"""Decode costs for auto: measured once per models and settings, cached, and used to seed the
controller so it needs no trial steps to know what a verification batch costs."""

from __future__ import annotations

import json

import pytest
from sim_control import OneSequence

from specrun.engine.auto import costs as costs_module
from specrun.engine.auto.costs import Conditions, DecodeCosts, judge
from specrun.engine.auto.drift import DISAGREE, WINDOW
from specrun.engine.sampling import SamplingParams
from specrun.engine.sequence import GenerationSettings
from specrun.runtime import cost_cache
from specrun.runtime.pair import Pair, PairConfig

GOOD = Conditions(cpu_share=0.97, major_faults=0, load_average=0.1, measured_at="2026-11-30T00:00:00+00:00")


def costs_of(verify: dict, draft: float | None = None, conditions: Conditions | None = GOOD) -> DecodeCosts:
    return DecodeCosts(verify, draft, conditions)


def test_cache_round_trip_and_bounded_size(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    costs = costs_of({1: 0.03, 16: 0.25}, 0.02)
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
    cost_cache.store("a", costs_of({1: 0.01}))
    assert cost_cache.load("a") == costs_of({1: 0.01})


def test_pair_measures_costs_once_then_reads_them(tmp_path, monkeypatch, tiny_target, tiny_draft):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(cost_cache, "judge", lambda costs, threads=1: [])  # whatever the machine is doing now
    notices: list[str] = []
    first = Pair(PairConfig(tiny_target, tiny_draft, ctx_size=256, threads=1), warn=notices.append)
    costs = first.session.decode_costs()
    first.close()
    assert len(notices) == 1 and "measuring decode costs" in notices[0]
    assert {1, 2, 5, 15, 16, 17, 31, 32} <= set(costs.verify_s) and costs.draft_token_s > 0
    second = Pair(PairConfig(tiny_target, tiny_draft, ctx_size=256, threads=1), warn=notices.append)
    try:
        assert second.session.decode_costs() == costs and len(notices) == 1
        other_threads = Pair(PairConfig(tiny_target, tiny_draft, ctx_size=256, threads=2), warn=notices.append)
        other_threads.session.decode_costs()
        other_threads.close()
        assert sum("measuring" in n for n in notices) == 2  # another thread count is another machine configuration
    finally:
        second.close()


def test_seeded_controller_skips_measuring_and_never_warms_up_a_hopeless_draft():
    c = OneSequence(["ngram", "draft"], 16, warmup_steps=3)
    c.seed({1: 0.033, 2: 0.057, 5: 0.113, 9: 0.227, 16: 0.254, 17: 0.3}, {"draft": 0.020})
    assert c.hopeless("draft")
    choice = c.choose()
    assert choice.reason != "warmup" or choice.drafter != "draft"
    assert c.choose([]).drafter is None  # no lookup match: plain decoding, no measuring step


def test_seeded_controller_still_warms_up_a_draft_that_can_win():
    c = OneSequence(["draft"], 8, warmup_steps=3)
    c.seed({1: 0.020, 5: 0.022, 9: 0.024}, {"draft": 0.001})
    assert not c.hopeless("draft")
    assert c.choose() == type(c.choose())("draft", c.k_start, "warmup")


def test_a_draft_that_wins_only_at_full_acceptance_of_31_tokens_is_not_tried():
    """Measured here: a pass over 32 tokens costs 12.9× one, so 31 draft tokens at 19 ms, all
    accepted, would beat plain decoding by 3%; no real draft is accepted that reliably."""
    c = OneSequence(["ngram", "draft"], 31)
    c.seed({1: 0.0329, 2: 0.0583, 5: 0.1134, 9: 0.2302, 17: 0.3018, 32: 0.4239}, {"draft": 0.0192})
    assert c.ceiling("draft") > c.plain_rate()
    assert c.hopeless("draft")


def test_a_ruled_out_draft_stays_out_when_plain_steps_get_slower_at_longer_contexts():
    c = OneSequence(["ngram", "draft"], 31)
    c.seed({1: 0.0329, 2: 0.0583, 5: 0.1134, 9: 0.2302, 17: 0.3018, 32: 0.4239}, {"draft": 0.0192})
    for _ in range(20):  # single-token passes at a longer context
        c.observe_step(None, 0, 0, 0, 0.0, 0.045, 1)
    assert c.hopeless("draft")
    assert all(c.choose([]).drafter != "draft" for _ in range(50))


def test_costs_measured_in_bad_conditions_are_neither_kept_nor_trusted(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    busy = Conditions(cpu_share=0.45, major_faults=0, load_average=3.9)
    paged = Conditions(cpu_share=0.99, major_faults=812, load_average=0.1)
    for name, costs in {
        "busy": costs_of({1: 3.1, 16: 15.0}, 2.65, busy),
        "paged out": costs_of({1: 0.03, 16: 0.14}, 0.015, paged),
        "no record": costs_of({1: 0.03, 16: 0.14}, 0.015, None),
        "batch cheaper than one": costs_of({1: 0.03, 2: 0.01}, 0.015),
        "draft slower than target": costs_of({1: 0.03, 16: 0.14}, 0.05),
    }.items():
        assert judge(costs, 2), name
        assert cost_cache.store(name, costs, 2) and cost_cache.load(name, 2) is None, name
    good = costs_of({1: 0.028, 16: 0.14, 32: 0.24}, 0.015)
    assert judge(good, 2) == [] and cost_cache.store("good", good, 2) == [] and cost_cache.load("good", 2) == good
    # An entry written by an older version, with no record of how it was measured, is ignored.
    entries = json.loads(cost_cache.cache_file().read_text())
    entries["old"] = {"verify_s": {"1": 3.1}, "draft_token_s": 2.65}
    cost_cache.cache_file().write_text(json.dumps(entries))
    assert cost_cache.load("old", 2) is None


class BusyMeter(costs_module.Meter):
    """As if other processes held the CPU while the calibration timed its passes."""

    @property
    def cpu_share(self):
        return 0.4


def test_a_calibration_under_load_is_used_once_and_the_next_run_measures_again(
    tmp_path, monkeypatch, tiny_target, tiny_draft
):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    notices: list[str] = []
    monkeypatch.setattr(costs_module, "Meter", BusyMeter)
    busy = Pair(PairConfig(tiny_target, tiny_draft, ctx_size=256, threads=1), warn=notices.append)
    try:
        assert busy.session.decode_costs().conditions.cpu_share == 0.4
    finally:
        busy.close()
    assert any("not kept" in n and "CPU" in n for n in notices)
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    idle = Pair(PairConfig(tiny_target, tiny_draft, ctx_size=256, threads=1), warn=notices.append)
    try:
        costs = idle.session.decode_costs()
        assert costs.conditions.cpu_share != 0.4 and sum("measuring" in n for n in notices) == 2
    finally:
        idle.close()


def test_offloaded_passes_record_no_cpu_share(monkeypatch, tiny_target, tiny_draft):
    """With layers on a GPU or an RPC worker this process mostly waits: its low CPU share is no sign
    of competition and must not keep the costs out of the cache."""
    monkeypatch.setattr(costs_module, "Meter", BusyMeter)
    pair = Pair(PairConfig(tiny_target, tiny_draft, ctx_size=256, threads=1), warn=lambda line: None)
    try:
        tokens = pair.prompt_tokens("offloaded", chat=False)
        local = costs_module.measure(pair.session.target_ctx, pair.session.draft_ctx, tokens, (1, 2), reps=1)
        offloaded = costs_module.measure(
            pair.session.target_ctx, pair.session.draft_ctx, tokens, (1, 2), reps=1, offloaded=True
        )
    finally:
        pair.close()
    assert local.conditions.cpu_share == 0.4 and any("CPU" in r for r in judge(local))
    assert offloaded.conditions.cpu_share is None and not any("CPU" in r for r in judge(offloaded))
    # Passes of a few tokens cost about the same there, and jitter: 10% under a single one is noise.
    jitter = {1: 0.010, 2: 0.0091, 4: 0.0105}
    local.verify_s, offloaded.verify_s = dict(jitter), dict(jitter)
    assert any("cheaper" in r for r in judge(local)) and not any("cheaper" in r for r in judge(offloaded))


def test_cached_costs_that_steps_prove_far_too_high_are_corrected_then_dropped(
    tmp_path, monkeypatch, tiny_target, tiny_draft
):
    """The poisoning seen in the field: a cache holding 3.1 s per target pass and 2.65 s per draft
    token, measured on a busy machine but passing every check. The run's own steps time in
    milliseconds: auto corrects its costs within a few steps, and drops the entry so the next run
    measures again."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    pair = Pair(PairConfig(tiny_target, tiny_draft, ctx_size=512, threads=1), warn=lambda line: None)
    try:
        key = pair.session.costs_key
        poisoned = costs_of({1: 3.1, 2: 4.6, 5: 9.3, 16: 15.5, 32: 26.4}, 2.65)
        assert cost_cache.store(key, poisoned, 1) == []
        assert pair.session.decode_costs() == poisoned  # read back: nothing in it looks wrong
        generation = pair.generation(
            pair.prompt_tokens("poisoned", chat=False),
            GenerationSettings(max_tokens=40, sampling=SamplingParams(temperature=0), ignore_eos=True),
            mode="auto",
        )
        list(generation.run())
        factor = generation.stats.policy["seeded_costs_off_by"]
        assert factor is not None and factor < 1 / DISAGREE
        assert generation.policy.controller.verify(16) < 1.0  # every seeded cost was scaled, not only those timed
        assert cost_cache.load(key, 1) is None  # the next run measures again
    finally:
        pair.close()


def test_the_controller_rescales_seeded_costs_only_on_consistent_disagreement():
    c = OneSequence(["ngram"], 8, warmup_steps=0)
    c.seed({1: 0.030, 9: 0.100})
    for _ in range(WINDOW - 1):
        c.observe_step(None, 0, 0, 0, 0.0, 0.010, 1)  # a third of the seeded single-pass cost
    c.observe_step(None, 0, 0, 0, 0.0, 0.029, 1)  # one step agrees: no proof yet
    assert c.drift.factor == 1.0
    for _ in range(WINDOW):
        c.observe_step(None, 0, 0, 0, 0.0, 0.010, 1)
    assert c.drift.factor == pytest.approx(1 / 3, rel=0.01)
    assert c.verify(9) == pytest.approx(0.100 / 3, rel=0.02)
    noisy = OneSequence(["ngram"], 8, warmup_steps=0)
    noisy.seed({1: 0.030, 9: 0.100})
    for i in range(40):  # steps that scatter around the seeded cost never rescale it
        noisy.observe_step(None, 0, 0, 0, 0.0, 0.030 * (1.4 if i % 2 else 0.75), 1)
    assert noisy.drift.factor == 1.0


def test_what_auto_learned_carries_over_to_the_next_process(tmp_path, monkeypatch, tiny_target, tiny_draft):
    """A one-shot run starts from the acceptance earlier runs measured with the same models, not
    from priors it has to probe its way out of."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    gpu_like = costs_of({n: 0.010 + 0.0001 * n for n in (1, 2, 4, 8, 16, 32)}, 0.001)
    settings = GenerationSettings(max_tokens=60, sampling=SamplingParams(temperature=0), ignore_eos=True)
    first = Pair(PairConfig(tiny_target, tiny_draft, ctx_size=512, threads=1), warn=lambda line: None)
    try:
        first.session.costs = gpu_like
        generation = first.generation(
            first.prompt_tokens("abc abc abc abc abc abc abc abc", chat=False), settings, mode="auto"
        )
        list(generation.run())
        learned = generation.policy.controller.learned()
        assert generation.stats.drafted > 0
    finally:
        first.close()
    assert cost_cache.LEARNED.path().exists()
    second = Pair(PairConfig(tiny_target, tiny_draft, ctx_size=512, threads=1), warn=lambda line: None)
    try:
        second.session.costs = gpu_like
        policy, lookup = second.session.policy("auto", settings)
        controller = policy.controller
        fresh = OneSequence(["ngram", "draft"], controller.k_max)
        name = next(n for n, state in learned.items() if any(state["accept"]["t"]))  # a drafter the first run used
        restored = controller.tracks[name].accept.rates()
        assert restored != fresh.tracks[name].accept.rates()  # not the priors
        assert controller.tracks[name].accept.trials[0] <= 8.0  # weighed as a prior, not a verdict
        assert lookup.state()["first"]  # the lookup's estimates came back too
    finally:
        second.close()


def test_fresh_mode_starts_every_generation_anew_and_keeps_nothing(tmp_path, monkeypatch, tiny_target, tiny_draft):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    pair = Pair(PairConfig(tiny_target, tiny_draft, ctx_size=512, threads=1), warn=lambda line: None)
    try:
        session = pair.session
        session.costs = costs_of({n: 0.010 + 0.0001 * n for n in (1, 2, 4, 8, 16, 32)}, 0.001)
        settings = GenerationSettings(max_tokens=20, sampling=SamplingParams(temperature=0), ignore_eos=True)
        tokens = pair.prompt_tokens("abc abc abc", chat=False)

        def controller(fresh: bool):
            generation = session.generation(tokens, settings, mode="auto", fresh=fresh)
            return generation, generation.policy.controller

        first, first_controller = controller(True)
        assert first_controller is not controller(True)[1]
        list(first.run())
        assert not cost_cache.LEARNED.path().exists()
        assert controller(False)[1] is controller(False)[1]
    finally:
        pair.close()
