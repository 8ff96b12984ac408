"""The server's batch engine on tiny models, without HTTP: requests decoded together get the answers
they get alone, one target pass per step, caches reused and evicted, drafts where they pay."""

from __future__ import annotations

import time

import numpy as np
import pytest
from serve_helpers import FLAT_COSTS, load_pair

from specrun.engine.batch import Segment, SharedContext
from specrun.engine.drafting.batched_model import BatchedModelDrafter, DraftJob
from specrun.engine.drafting.model import ModelDrafter
from specrun.engine.llama import LoadOptions, Model
from specrun.engine.loop import GenerationSettings
from specrun.engine.sampling import SamplingParams, make_rng
from specrun.errors import ContextOverflowError
from specrun.runtime.pair import Pair, PairConfig
from specrun.serve.batch_engine import BatchEngine, EngineConfig
from specrun.serve.costs import BatchCosts
from specrun.serve.sequence import Job

PROMPTS = ["hello world", "abc abc abc abc abc", "the quick brown fox", "def f(x):\n    return x"]
GREEDY = SamplingParams(temperature=0.0)


@pytest.fixture(scope="module")
def pair(tiny_target, tiny_draft):
    loaded = load_pair(tiny_target, tiny_draft)
    yield loaded
    loaded.close()


@pytest.fixture(scope="module")
def reference(tiny_target, tiny_draft):
    """The same models with single-sequence contexts: what `specrun run` decodes with."""
    loaded = Pair(PairConfig(tiny_target, tiny_draft, ctx_size=512, threads=1))
    yield loaded
    loaded.close()


def engine_for(pair: Pair, mode: str, *, parallel: int = 4, costs: dict | None = None, draft_costs: dict | None = None,
               ctx_size: int = 512, idle_slots: int | None = None, k_cap: int = 8) -> BatchEngine:
    config = EngineConfig(parallel=parallel, ctx_size=ctx_size, threads=1, mode=mode, k_cap=k_cap, idle_slots=idle_slots)
    seeded = BatchCosts.of(costs or FLAT_COSTS, draft_costs or FLAT_COSTS)
    return BatchEngine(pair.target_model, pair.draft_model, pair.bridge, config, seeded)


def job(pair: Pair, prompt: str, max_tokens: int = 24, sampling: SamplingParams = GREEDY) -> Job:
    tokens = pair.target_model.tokenize(prompt, add_special=True, parse_special=True)
    return Job("completion", tokens, GenerationSettings(max_tokens=max_tokens, sampling=sampling, ignore_eos=True), max_tokens)


def drive(engine: BatchEngine, jobs: list[Job]) -> tuple[dict[int, list[int]], list]:
    """Admit every job, step until all are done; each job's tokens, and the step reports."""
    out = {j.id: [] for j in jobs}
    for j in jobs:
        engine.admit(j, time.perf_counter())
    reports = []
    while engine.active:
        report = engine.step()
        reports.append(report)
        for update in report.updates:
            out[update.generation.job.id].extend(update.tokens)
    return out, reports


def alone(reference: Pair, j: Job) -> list[int]:
    loop = reference.loop(j.settings, mode="off")
    return [t for step in loop.run(j.prompt) for t in step.tokens]


@pytest.mark.parametrize("mode", ["off", "ngram", "draft", "hybrid", "auto"])
def test_requests_decoded_together_get_the_answers_they_get_alone(pair, reference, mode):
    engine = engine_for(pair, mode)
    try:
        jobs = [job(pair, p) for p in PROMPTS]
        together, _ = drive(engine, jobs)
        for j in jobs:
            assert together[j.id] == alone(reference, j), (mode, j.prompt)
    finally:
        engine.close()


def test_every_step_is_one_target_pass_over_all_requests(pair):
    engine = engine_for(pair, "draft")
    calls = []
    decode = engine.target.decode
    engine.target.decode = lambda segments: calls.append(len(segments)) or decode(segments)
    try:
        _, reports = drive(engine, [job(pair, p, max_tokens=12) for p in PROMPTS])
        assert len(calls) == len(reports)
        assert calls[0] == len(PROMPTS)  # the four prompts read in one batch
        assert max(calls) == len(PROMPTS) and any(r.rows > len(PROMPTS) for r in reports)  # drafts ride along
    finally:
        engine.close()


def test_a_follow_up_reuses_the_cache_of_the_conversation_it_continues(pair, reference):
    engine = engine_for(pair, "off")
    try:
        first = job(pair, "hello world", max_tokens=10)
        answer, _ = drive(engine, [first])
        follow = Job("completion", first.prompt + answer[first.id] + pair.target_model.tokenize(" and more", add_special=False, parse_special=False),
                     first.settings, 10)
        gen = engine.admit(follow, time.perf_counter())
        assert gen.cached == len(first.prompt) + len(answer[first.id]) - 1  # all but the answer's last token
        out = {follow.id: []}
        while engine.active:
            for update in engine.step().updates:
                out[follow.id].extend(update.tokens)
        assert out[follow.id] == alone(reference, follow)
    finally:
        engine.close()


def test_idle_caches_are_dropped_least_recently_used_first_when_cells_run_short(pair, reference):
    # One sequence's worth of cells (256: llama.cpp pads the pool to a multiple of 256) for one
    # request at a time, with three idle caches kept while they fit.
    engine = engine_for(pair, "off", parallel=1, ctx_size=256, idle_slots=3)
    try:
        jobs = [job(pair, f"{word} " * 12, max_tokens=60) for word in ("alpha", "beta", "gamma")]  # about 130 cells each
        outputs = {}
        for j in jobs:
            outputs.update(drive(engine, [j])[0])
        assert all(outputs[j.id] == alone(reference, j) for j in jobs)
        kept = [len(t) for t in engine.target.tokens if t]
        assert engine.target.used() <= engine.target.n_ctx and len(kept) < len(jobs)  # the oldest made room
        assert engine.slots.evictable()  # the latest cache is still there for a follow-up
    finally:
        engine.close()


def test_a_cancelled_request_leaves_the_batch_and_frees_its_sequence(pair):
    engine = engine_for(pair, "off", parallel=2)
    try:
        a, b = job(pair, "hello world", 40), job(pair, "abc abc", 40)
        gen_a = engine.admit(a, time.perf_counter())
        engine.admit(b, time.perf_counter())
        engine.step()
        engine.cancel(gen_a)
        assert list(engine.active) == [engine.active[next(iter(engine.active))].slot]
        assert gen_a.slot not in engine.slots.busy and gen_a.finished == "cancelled"
        report = engine.step()
        assert [u.generation.job.id for u in report.updates] == [b.id]
    finally:
        engine.close()


def test_a_full_context_ends_the_answer_with_length(pair):
    engine = engine_for(pair, "off", parallel=1, ctx_size=32)
    try:
        j = job(pair, "hello world, this is a prompt", max_tokens=100)
        out, reports = drive(engine, [j])
        last = [u for r in reports for u in r.updates if u.done][0]
        assert last.generation.finished == "context" and last.generation.finish_reason == "length"
        assert len(j.prompt) + len(out[j.id]) == 32 + 1  # every token is in the cache but the last, never fed
    finally:
        engine.close()


def test_auto_decodes_plain_when_batch_cost_grows_with_its_size(pair, reference):
    linear = {n: 0.01 * n for n in (1, 2, 4, 8, 16, 32, 64)}
    engine = engine_for(pair, "auto", costs=linear, draft_costs=linear)
    try:
        jobs = [job(pair, p) for p in PROMPTS]
        out, reports = drive(engine, jobs)
        assert not engine.model_viable
        assert sum(u.drafted for r in reports for u in r.updates) == 0
        assert all(out[j.id] == alone(reference, j) for j in jobs)
    finally:
        engine.close()


def test_auto_drafts_when_a_pass_costs_the_same_whatever_its_size(pair):
    engine = engine_for(pair, "auto", draft_costs={n: 0.001 for n in FLAT_COSTS})  # a draft pass a tenth of a target one
    try:
        _, reports = drive(engine, [job(pair, p) for p in PROMPTS])
        by = {u.drafter for r in reports for u in r.updates if u.drafted}
        assert engine.model_viable and "draft" in by
        assert sum(u.accepted for r in reports for u in r.updates) > 0
    finally:
        engine.close()


def test_the_batched_drafter_drafts_what_the_single_one_does(tiny_target, tiny_draft):
    target = Model(tiny_target, LoadOptions(use_extra_bufts=False))
    model = Model(tiny_draft, LoadOptions(use_extra_bufts=False))
    shared = SharedContext(model, n_seq=3, n_ctx_seq=256, n_threads=1)
    from specrun.engine.llama import Context

    single = Context(model, n_ctx=256, n_threads=1)
    try:
        histories = [target.tokenize(p, add_special=True, parse_special=True) for p in PROMPTS[:3]]
        batched = BatchedModelDrafter(shared).propose(
            [DraftJob(seq, h, k, GREEDY, make_rng(0)) for seq, (h, k) in enumerate(zip(histories, (5, 3, 1)))])
        for seq, (h, k) in enumerate(zip(histories, (5, 3, 1))):
            expected = ModelDrafter(single, GREEDY, make_rng(0)).propose(h, k).tokens
            assert batched.drafts[seq].tokens == expected
        # the catch-ups in one pass, then one row per sequence still drafting at each depth (K = 5, 3, 1)
        assert [p.tokens for p in batched.passes] == [sum(len(h) for h in histories), 2, 2, 1, 1]
    finally:
        shared.close()
        single.close()


def test_a_batch_that_does_not_fit_changes_no_sequence(tiny_target):
    model = Model(tiny_target, LoadOptions(use_extra_bufts=False))
    shared = SharedContext(model, n_seq=2, n_ctx_seq=16, n_threads=1)
    try:
        shared.decode([Segment(0, [1, 2, 3], "none")])
        with pytest.raises(ContextOverflowError):
            shared.decode([Segment(1, [4, 5], "last"), Segment(0, list(range(20)), "all")])
        assert shared.tokens == [[1, 2, 3], []]
        rows = shared.decode([Segment(1, [4, 5], "all"), Segment(0, [6], "last")])
        assert rows[0].shape == (2, model.n_vocab) and rows[1].shape == (model.n_vocab,)
        assert np.isfinite(rows[1]).all() and shared.tokens == [[1, 2, 3, 6], [4, 5]]
    finally:
        shared.close()
