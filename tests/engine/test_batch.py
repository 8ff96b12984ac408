"""The engine with many sequences, on tiny models: sequences decoded together get the answers they
get alone, one target pass per step, caches reused and evicted, drafts where they pay."""

from __future__ import annotations

import numpy as np
import pytest
from serve_helpers import FLAT_COSTS, costs_of, load_pair

from specrun.engine.drafting.model import ModelDrafter
from specrun.engine.drafting.protocol import DraftRequest
from specrun.engine.llama import Context
from specrun.engine.model import LoadOptions, Model
from specrun.engine.sampling import SamplingParams, make_rng
from specrun.engine.segments import Segment
from specrun.engine.sequence import GenerationSettings
from specrun.errors import ContextOverflowError
from specrun.runtime.pair import Pair
from specrun.runtime.session import Session

PROMPTS = ["hello world", "abc abc abc abc abc", "the quick brown fox", "def f(x):\n    return x"]
GREEDY = SamplingParams(temperature=0.0)
# Answers alone (one sequence) against answers together (several): one attention kernel for both,
# since by default a context of one sequence on the CPU runs unfused and one of several does not.
ONE_KERNEL = "on"


@pytest.fixture(scope="module")
def pair(tiny_target, tiny_draft):
    loaded = load_pair(tiny_target, tiny_draft, flash_attn=ONE_KERNEL)
    yield loaded
    loaded.close()


def session_for(
    pair: Pair,
    mode: str,
    *,
    parallel: int = 4,
    costs: dict | None = None,
    draft_costs: dict | None = None,
    idle: int | None = None,
    k_max: int = 8,
) -> Session:
    """A session of `parallel` sequences decoded together and `idle` kept caches (default: as many)."""
    session = Session(
        pair.models(),
        n_seq=parallel + (parallel if idle is None else idle),
        n_seq_pool=parallel,
        costs=costs_of(costs or FLAT_COSTS, draft_costs or FLAT_COSTS),
    )
    policy, _ = session.policy(mode, GenerationSettings(draft_max=k_max), fresh=True, track_costs=True)
    session.engine.configure(policy)
    return session


def settings(max_tokens: int = 24, sampling: SamplingParams = GREEDY) -> GenerationSettings:
    return GenerationSettings(max_tokens=max_tokens, sampling=sampling, ignore_eos=True)


def prompt(pair: Pair, text: str) -> list[int]:
    return pair.target_model.tokenize(text, add_special=True, parse_special=True)


def drive(session: Session, prompts: list[list[int]], max_tokens: int = 24):
    """Admit every prompt, step until all are done; each one's tokens, and the step reports."""
    states = [session.engine.admit(p, settings(max_tokens)) for p in prompts]
    reports = []
    while not all(s.done for s in states):
        reports.append(session.engine.step(states))
    return [s.generated for s in states], reports


def alone(pair: Pair, tokens: list[int], max_tokens: int = 24) -> list[int]:
    return [t for step in pair.generation(tokens, settings(max_tokens), mode="off").run() for t in step.tokens]


@pytest.mark.parametrize("mode", ["off", "ngram", "draft", "hybrid", "auto"])
def test_sequences_decoded_together_get_the_answers_they_get_alone(pair, mode):
    session = session_for(pair, mode)
    try:
        prompts = [prompt(pair, p) for p in PROMPTS]
        together, _ = drive(session, prompts)
        for p, out in zip(prompts, together):
            assert out == alone(pair, p), (mode, p)
    finally:
        session.close()


def test_every_step_is_one_target_pass_over_all_sequences(pair):
    session = session_for(pair, "draft")
    calls = []
    target = session.target_ctx
    decode = target.decode
    target.decode = lambda segments, **kw: calls.append(len(segments)) or decode(segments, **kw)
    try:
        _, reports = drive(session, [prompt(pair, p) for p in PROMPTS], max_tokens=12)
        assert len(calls) == len(reports)
        assert calls[0] == len(PROMPTS)  # the four prompts read in one batch
        assert max(calls) == len(PROMPTS) and any(r.rows > len(PROMPTS) for r in reports)  # drafts ride along
    finally:
        session.close()


def test_a_follow_up_reuses_the_cache_of_the_conversation_it_continues(pair):
    session = session_for(pair, "off")
    try:
        first = prompt(pair, "hello world")
        answer = drive(session, [first], max_tokens=10)[0][0]
        follow = first + answer + pair.target_model.tokenize(" and more", add_special=False, parse_special=False)
        state = session.engine.admit(follow, settings(10))
        assert state.cached == len(first) + len(answer) - 1  # all but the answer's last token
        while not state.done:
            session.engine.step([state])
        assert state.generated == alone(pair, follow, 10)
    finally:
        session.close()


def test_idle_caches_are_dropped_least_recently_used_first_when_cells_run_short(tiny_target, tiny_draft):
    # One sequence's worth of cells (256: llama.cpp pads the pool to a multiple of 256) for one
    # request at a time, with three idle caches kept while they fit.
    small = load_pair(tiny_target, tiny_draft, ctx_size=256, flash_attn=ONE_KERNEL)
    session = session_for(small, "off", parallel=1, idle=3)
    try:
        prompts = [prompt(small, f"{word} " * 12) for word in ("alpha", "beta", "gamma")]  # about 130 cells each
        outputs = [drive(session, [p], max_tokens=60)[0][0] for p in prompts]
        assert all(out == alone(small, p, 60) for p, out in zip(prompts, outputs))
        kept = [len(t) for t in session.target_ctx.tokens if t]
        assert session.target_ctx.used() <= session.target_ctx.n_cells and len(kept) < len(
            prompts
        )  # the oldest made room
        assert session.engine.slots.evictable()  # the latest cache is still there for a follow-up
    finally:
        session.close()
        small.close()


def test_a_cancelled_sequence_leaves_the_batch_and_frees_its_slot(pair):
    session = session_for(pair, "off", parallel=2)
    engine = session.engine
    try:
        a = engine.admit(prompt(pair, "hello world"), settings(40))
        b = engine.admit(prompt(pair, "abc abc"), settings(40))
        engine.step([a, b])
        engine.cancel(a)
        assert a.seq not in engine.slots.busy and b.seq in engine.slots.busy and a.finished == "cancelled"
        report = engine.step([a, b])
        assert [u.sequence for u in report.updates] == [b]
    finally:
        session.close()


def test_a_full_context_ends_the_answer_with_context(tiny_target, tiny_draft):
    small = load_pair(tiny_target, tiny_draft, ctx_size=32, flash_attn=ONE_KERNEL)
    session = session_for(small, "off", parallel=1)
    try:
        tokens = prompt(small, "hello world, this is a prompt")
        out, reports = drive(session, [tokens], max_tokens=100)
        last = [u for r in reports for u in r.updates if u.done][0]
        assert last.sequence.finished == "context"
        assert len(tokens) + len(out[0]) == 32 + 1  # every token is in the cache but the last, never fed
    finally:
        session.close()
        small.close()


def test_auto_decodes_plain_when_batch_cost_grows_with_its_size(pair):
    linear = {n: 0.01 * n for n in (1, 2, 4, 8, 16, 32, 64)}
    session = session_for(pair, "auto", costs=linear, draft_costs=linear)
    try:
        prompts = [prompt(pair, p) for p in PROMPTS]
        assert session.engine.policy.controller.hopeless("draft")
        out, reports = drive(session, prompts)
        assert sum(u.drafted for r in reports for u in r.updates) == 0
        assert all(o == alone(pair, p) for p, o in zip(prompts, out))
    finally:
        session.close()


def test_auto_drafts_when_a_pass_costs_the_same_whatever_its_size(pair):
    session = session_for(
        pair, "auto", draft_costs={n: 0.001 for n in FLAT_COSTS}
    )  # a draft pass a tenth of a target one
    try:
        assert not session.engine.policy.controller.hopeless("draft")  # judged from the seeded costs
        _, reports = drive(session, [prompt(pair, p) for p in PROMPTS])
        by = {u.drafter for r in reports for u in r.updates if u.drafted}
        assert "draft" in by
        assert sum(u.accepted for r in reports for u in r.updates) > 0
    finally:
        session.close()


def test_the_draft_model_drafts_for_several_sequences_what_it_drafts_for_each_alone(tiny_target, tiny_draft):
    target = Model(tiny_target, LoadOptions(use_extra_bufts=False))
    model = Model(tiny_draft, LoadOptions(use_extra_bufts=False))
    shared = Context(model, n_seq=3, n_ctx=256, n_threads=1)
    single = Context(model, n_ctx=256, n_threads=1)
    try:
        histories = [target.tokenize(p, add_special=True, parse_special=True) for p in PROMPTS[:3]]
        ks = (5, 3, 1)
        batched = ModelDrafter(shared).propose(
            [DraftRequest(seq, h, k, GREEDY, make_rng(0)) for seq, (h, k) in enumerate(zip(histories, ks))]
        )
        for seq, (h, k) in enumerate(zip(histories, ks)):
            single.clear()
            expected = ModelDrafter(single).propose([DraftRequest(0, h, k, GREEDY, make_rng(0))]).drafts[0].tokens
            assert batched.drafts[seq].tokens == expected
        # the catch-ups in one pass, then one row per sequence still drafting at each depth (K = 5, 3, 1)
        assert [p.rows for p in batched.passes] == [sum(len(h) for h in histories), 2, 2, 1, 1]
    finally:
        shared.close()
        single.close()


def test_a_batch_that_does_not_fit_changes_no_sequence(tiny_target):
    model = Model(tiny_target, LoadOptions(use_extra_bufts=False))
    shared = Context(model, n_seq=2, n_ctx=16, n_threads=1)
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


def test_one_sequence_fills_the_batch_without_a_python_loop_per_row(tiny_target):
    """The batch arrays are numpy's, filled by slices: a long segment and many short ones land at
    the right positions and sequences, and every row asked for comes back."""
    model = Model(tiny_target, LoadOptions(use_extra_bufts=False))
    ctx = Context(model, n_seq=3, n_ctx=128, n_threads=1, n_batch=32)
    fresh = Context(model, n_ctx=128, n_threads=1, n_batch=32)
    try:
        tokens = [(5 * i) % 250 + 1 for i in range(70)]  # three passes of 32
        rows = ctx.decode([Segment(2, tokens, "all"), Segment(0, [7, 8], "last")])
        assert rows[0].shape == (70, model.n_vocab) and ctx.tokens[2] == tokens and ctx.tokens[0] == [7, 8]
        assert np.allclose(rows[0][-1], fresh.feed(0, tokens, "last"), atol=5e-2)
        fresh.clear()
        assert np.allclose(rows[1], fresh.feed(0, [7, 8], "last"), atol=5e-2)
    finally:
        ctx.close()
        fresh.close()


def test_logits_are_read_from_where_llama_cpp_keeps_them_as_passes_grow(tiny_target):
    """Passes of 1 to 64 outputs (llama.cpp's logits buffer grows, and may move, on the way): every
    row read, as a view or a copy, is the one this pass computed."""
    model = Model(tiny_target, LoadOptions(use_extra_bufts=False))
    ctx = Context(model, n_ctx=256, n_threads=1, n_batch=64)
    fresh = Context(model, n_ctx=256, n_threads=1, n_batch=64)
    try:
        history: list[int] = []
        addresses = set()
        for size, copy in [(1, False), (2, False), (64, False), (1, True), (33, False), (1, False)]:
            tokens = [(7 * (len(history) + i)) % 250 + 1 for i in range(size)]
            rows = ctx.decode([Segment(0, tokens, "all")], copy=copy)[0]
            addresses.add(ctx._logits_address)
            history += tokens
            fresh.clear()
            expected = fresh.feed(0, history, "all")
            assert rows.shape == (size, model.n_vocab)
            assert np.allclose(rows, expected[-size:], atol=5e-2)
        assert len(addresses) > 1  # the buffer did move: the test saw what it is about
    finally:
        ctx.close()
        fresh.close()


@pytest.mark.parametrize("skip", [1, 3])
def test_a_segment_skipping_its_first_rows_returns_the_rest_as_a_full_pass_would(tiny_target, skip):
    """Rows predicting tokens a constraint forces are never read: a segment may leave them out of
    its logits; the rows it returns are the full pass's, beside another segment's in the same pass."""
    model = Model(tiny_target, LoadOptions(use_extra_bufts=False))
    ctx = Context(model, n_ctx=256, n_threads=1, n_seq=2)
    try:
        prompt, other = [5, 9, 14, 3], [40, 41]
        ctx.decode([Segment(0, prompt, "none"), Segment(1, other, "none")])
        step = [17, 23, 31, 44, 50]
        full, beside = ctx.decode([Segment(0, step, "all"), Segment(1, [42], "last")])
        ctx.trim(0, len(prompt))
        ctx.trim(1, len(other))
        skipped, beside_again = ctx.decode([Segment(0, step, "all", skip), Segment(1, [42], "last")])
        assert skipped.shape == (len(step) - skip, model.n_vocab)
        assert np.allclose(skipped, full[skip:], atol=5e-2) and np.allclose(beside_again, beside, atol=5e-2)
    finally:
        ctx.close()


def test_auto_weighs_the_tokens_a_sequence_is_expected_to_produce(pair):
    """A sequence admitted with an expected answer length is asked of auto with what is left of
    it (or as many again as it has produced, once past it), never more than max_tokens allows."""
    session = session_for(pair, "auto", parallel=2)
    controller = session.engine.policy.controller
    asked: dict[int, list[int]] = {}
    plan = controller.plan

    def recording(asks, **kw):
        for a in asks:
            asked.setdefault(a.seq, []).append(a.remaining)
        return plan(asks, **kw)

    controller.plan = recording
    try:
        short = session.engine.admit(prompt(pair, "hello world"), settings(30), expected_tokens=3)
        plain = session.engine.admit(prompt(pair, "abc abc"), settings(30))
        for _ in range(8):
            session.engine.step([short, plain])
            done, other = len(short.generated), len(plain.generated)
            assert short.expected_remaining() == min(30 - done, max(1, 3 - done, done))
            assert plain.expected_remaining() == plain.remaining() == 30 - other
        assert asked[short.seq] and asked[plain.seq]
        assert asked[short.seq][0] <= 2 < asked[plain.seq][0]
        assert all(n <= 30 for n in asked[short.seq] + asked[plain.seq])
    finally:
        session.close()
