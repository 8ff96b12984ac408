"""Rows cut to their top-k inside llama.cpp's graph (engine/shortlist.py): the same candidates and
logits as the full row, the same distributions, and the engine asks for them where they suffice."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

import numpy as np
import pytest

from specrun.engine.drafting.model import ModelDrafter
from specrun.engine.drafting.protocol import DraftRequest, DraftTuning
from specrun.engine.llama import Context
from specrun.engine.model import LoadOptions, Model
from specrun.engine.sampling import SamplingParams, make_rng
from specrun.engine.segments import Segment
from specrun.engine.sequence import GenerationSettings
from specrun.engine.shortlist import Shortlist, argmax, argmax_rows
from specrun.engine.step import Engine
from specrun.engine.verify import verify
from specrun.errors import SpecrunError


def _top(row: np.ndarray, k: int) -> Shortlist:
    ids = np.argsort(-row, kind="stable")[:k].astype(np.int32)
    return Shortlist(ids, row[ids])


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(0.8, 40, 0.95, 0.05),
        SamplingParams(1.3, 40, 1.0, 0.0),
        SamplingParams(0.5, 40, 0.5, 0.2),
        SamplingParams(0.8, 10, 0.95, 0.05),  # a wider shortlist than the sampling's own k
        SamplingParams(0.8, 600, 0.99, 0.0),  # more survivors than the plain-Python path takes
    ],
)
def test_a_shortlist_gives_the_distribution_of_its_full_row(params):
    rng = np.random.default_rng(3)
    for _ in range(20):
        row = (rng.standard_normal(5000) * 3).astype(np.float32)
        full = params.dist(row)
        cut = params.dist(_top(row, max(params.top_k, 40)))
        assert np.array_equal(full.ids, cut.ids)
        assert np.allclose(full.p, cut.p, rtol=1e-12, atol=0)


def test_greedy_reads_the_argmax_of_a_shortlist_in_any_order():
    row = np.array([0.1, 3.0, -1.0, 2.5], dtype=np.float32)
    cut = Shortlist(np.array([3, 1], dtype=np.int32), np.array([2.5, 3.0], dtype=np.float32))
    greedy = SamplingParams(temperature=0)
    assert argmax(cut) == argmax(row) == 1
    assert greedy.pick(cut, make_rng(0)) == 1 and greedy.dist(cut).ids == (1,)
    rows = Shortlist(np.array([[3, 1], [0, 2]], dtype=np.int32), np.array([[2.5, 3.0], [1.0, 0.5]], dtype=np.float32))
    assert argmax_rows(rows).tolist() == [1, 0]
    assert rows.reshape(2, -1) is rows and cut.reshape(1, -1).shape == (1, 2)
    with pytest.raises(ValueError):
        cut.reshape(2, -1)


def test_verification_of_shortlisted_rows_is_that_of_full_rows():
    rng = np.random.default_rng(5)
    rows = (rng.standard_normal((5, 3000)) * 4).astype(np.float32)
    cut = Shortlist(*map(np.stack, zip(*[(_top(r, 40).ids, _top(r, 40).logits) for r in rows])))
    draft = [int(np.argmax(r)) for r in rows[:2]] + [7, 8]
    greedy = SamplingParams(temperature=0)
    assert verify(draft, None, cut, greedy, make_rng(0)) == verify(draft, None, rows, greedy, make_rng(0))
    sampling = SamplingParams(0.8)
    for seed in range(10):
        assert verify(draft, None, cut, sampling, make_rng(seed)) == verify(draft, None, rows, sampling, make_rng(seed))


@pytest.fixture
def model(tiny_target):
    return Model(tiny_target, LoadOptions(use_extra_bufts=False))


def _buffers(order: list[int], n_vocab: int, k: int):
    """llama.cpp-like sampled buffers: batch position i's row stored at output slot order[i]."""
    ids = np.zeros((len(order), n_vocab), dtype=np.int32)
    logits = np.zeros((len(order), n_vocab), dtype=np.float32)
    for position, slot in enumerate(order):
        ids[slot, :k] = np.arange(k) + 100 * position
        logits[slot, :k] = -np.arange(k) - 0.5 * position
    stride = 4 * n_vocab
    readers = (
        lambda ctx, i: ids.ctypes.data + order[i] * stride,
        lambda ctx, i: logits.ctypes.data + order[i] * stride,
        lambda ctx, i: k,
    )
    fake = SimpleNamespace(ptr=None, model=SimpleNamespace(n_vocab=n_vocab), _sampled_at=readers)
    return fake, ids, logits


@pytest.mark.parametrize("order", [[0, 1, 2, 3], [2, 0, 3, 1], [0, 1, 3, 2], [0, 2, 1, 3]])
def test_shortlisted_rows_are_read_in_batch_order_wherever_llama_cpp_stores_them(order):
    fake, ids, logits = _buffers(order, n_vocab=16, k=3)
    rows = Context._shortlist_rows(fake, 0, len(order), 3)
    assert rows.ids.tolist() == [[100 * p, 100 * p + 1, 100 * p + 2] for p in range(len(order))]
    assert rows.logits.tolist() == [[-0.5 * p, -1 - 0.5 * p, -2 - 0.5 * p] for p in range(len(order))]
    tail = Context._shortlist_rows(fake, 1, 2, 3)
    assert tail.ids[:, 0].tolist() == [100, 200]
    ids[:] = 0  # what was read is a copy: llama.cpp's next pass overwrites its buffers
    assert rows.ids[1, 0] == 100


def test_a_single_row_is_read_as_lists_that_outlive_the_pass():
    """A draft depth's one row: its k candidates as Python lists, in llama.cpp's order, copied."""
    fake, ids, _ = _buffers([1, 0], n_vocab=16, k=3)
    fake._row_types = (ctypes.c_int32 * 1, ctypes.c_float * 1)
    row = Context._shortlist_row(fake, 1, 3)
    assert row.ids == [100, 101, 102] and row.logits == [-0.5, -1.5, -2.5] and row.shape == (3,)
    ids[:] = 0
    assert row.ids == [100, 101, 102] and row.argmax() == 100
    with pytest.raises(SpecrunError, match="candidates"):
        Context._shortlist_row(fake, 0, 4)


def test_a_row_with_another_number_of_candidates_is_refused():
    fake, _, _ = _buffers([0, 1], n_vocab=8, k=3)
    with pytest.raises(SpecrunError, match="candidates"):
        Context._shortlist_rows(fake, 0, 2, 4)


def test_llama_cpp_cuts_a_sequences_rows_to_the_top_k_of_its_full_rows(model):
    """Both kinds of segment, a sequence with the cut beside one without in the same pass, and
    the cut taken off again: every row is the top k of the row a context without it computes."""
    ctx = Context(model, n_seq=2, n_ctx=128, n_threads=1, n_batch=32)
    fresh = Context(model, n_seq=2, n_ctx=128, n_threads=1, n_batch=32)
    try:
        ctx.shortlist(0, 5)
        prompt, other = [3, 14, 15, 92, 65], [35, 89, 79]
        rows = ctx.decode([Segment(0, prompt, "all"), Segment(1, other, "last")])
        expected = fresh.decode([Segment(0, prompt, "all"), Segment(1, other, "last")])
        assert isinstance(rows[0], Shortlist) and rows[0].shape == (5, 5)
        assert isinstance(rows[1], np.ndarray) and np.allclose(rows[1], expected[1], atol=5e-2)
        for cut, full in zip(rows[0], expected[0]):
            order = np.argsort(-cut.logits)
            assert cut.ids[order].tolist() == np.argsort(-full)[:5].tolist()
            assert np.allclose(cut.logits, full[cut.ids], atol=5e-2)
        last = ctx.decode([Segment(0, [26], "last")], copy=False)[0]
        full = fresh.decode([Segment(0, [26], "last")])[0]
        assert isinstance(last, Shortlist) and last.shape == (5,)
        assert sorted(last.ids) == sorted(np.argsort(-full)[:5].tolist()) and argmax(last) == int(np.argmax(full))
        ctx.shortlist(0, 0)
        again = ctx.decode([Segment(0, [53], "last")])[0]
        assert isinstance(again, np.ndarray) and again.shape == (model.n_vocab,)
    finally:
        ctx.close()
        fresh.close()


def test_a_pass_reads_every_cut_right_whichever_sequences_sit_it_out(model):
    """Passes of four greedy sequences where some have no row (idle, reading a prompt chunk, done
    drafting): every row read is the argmax of the full row a single-sequence context computes.
    llama.cpp corrupts other rows' candidate ids when a sequence holding a cut has no row in the
    pass; the context takes such cuts off for that pass."""
    ctx = Context(model, n_seq=4, n_ctx=128, n_threads=1, n_batch=64)
    fresh = Context(model, n_ctx=128, n_threads=1, n_batch=128)
    rng = np.random.default_rng(0)
    history: list[list[int]] = [[] for _ in range(4)]
    wrong = []
    try:
        for seq in range(4):
            ctx.shortlist(seq, 1)
        for step in range(300):
            segments = []
            for seq in range(4):
                if rng.random() < 0.25:
                    continue
                if len(history[seq]) > 100:
                    ctx.clear(seq)
                    history[seq] = []
                mode = str(rng.choice(["all", "last", "last", "none"]))
                segments.append(
                    Segment(seq, [int(t) for t in rng.integers(0, model.n_vocab, int(rng.integers(1, 7)))], mode)
                )
            if not segments:
                continue
            for segment, rows in zip(segments, ctx.decode(segments, copy=False)):
                history[segment.seq] += segment.tokens
                if rows is None:
                    continue
                n = len(segment.tokens) if segment.logits == "all" else 1
                fresh.clear()
                full = fresh.decode([Segment(0, history[segment.seq], "all")])[0][-n:]
                ids = np.asarray(rows.ids).reshape(n)
                for i, row in enumerate(full):
                    if not 0 <= ids[i] < model.n_vocab or row.max() - row[ids[i]] > 0.05:
                        wrong.append((step, segment.seq, i))
            for seq in range(4):
                if history[seq] and rng.random() < 0.5:
                    keep = int(rng.integers(max(0, len(history[seq]) - 6), len(history[seq]) + 1))
                    ctx.trim(seq, keep)
                    history[seq] = history[seq][:keep]
        assert wrong == []
        assert all(ctx.shortlisted(seq) == 1 for seq in range(4))
    finally:
        ctx.close()
        fresh.close()


def test_contexts_that_keep_hidden_rows_always_return_full_rows(dense_mtp_target):
    model = Model(dense_mtp_target, LoadOptions(use_extra_bufts=False))
    ctx = Context(model, n_ctx=64, n_threads=1, hidden=True)
    try:
        ctx.shortlist(0, 5)
        assert isinstance(ctx.feed(0, [1, 2, 3]), np.ndarray)
    finally:
        ctx.close()


@pytest.mark.parametrize(
    "sampling,k", [(SamplingParams(temperature=0), 1), (SamplingParams(0.8, 40), 40), (SamplingParams(0.8, 0), 0)]
)
def test_a_generation_has_its_rows_cut_to_what_its_sampling_needs(model, sampling, k):
    """The cut it asks for, and the same tokens as with full rows (the same seed draws the same
    tokens from the same distributions)."""
    outputs = []
    for cut in (True, False):
        target = Context(model, n_seq=2, n_ctx=128, n_threads=1)
        try:
            engine = Engine(target)
            state = engine.admit(
                [1, 2, 3, 4], GenerationSettings(max_tokens=12, sampling=sampling, seed=9, ignore_eos=True)
            )
            assert target.shortlisted(state.seq) == k
            if not cut:
                target.shortlist(state.seq, 0)
            while not state.done:
                engine.step([state])
            outputs.append(state.generated)
        finally:
            target.close()
    assert len(outputs[0]) == 12 and outputs[0] == outputs[1]


def test_the_draft_model_keeps_full_rows_where_its_choice_needs_them(model, tiny_draft):
    draft = Model(tiny_draft, LoadOptions(use_extra_bufts=False))
    ctx = Context(draft, n_seq=3, n_ctx=128, n_threads=1)
    try:
        drafter = ModelDrafter(ctx)
        greedy, sampled = SamplingParams(temperature=0), SamplingParams(0.8, 20)
        requests = [
            DraftRequest(0, [1, 2, 3], 2, greedy, make_rng(0)),
            DraftRequest(1, [1, 2], 2, sampled, make_rng(0)),
        ]
        made = drafter.propose(requests)
        assert [ctx.shortlisted(0), ctx.shortlisted(1)] == [1, 20] and len(made.drafts[1].q) == 2
        drafter.configure(DraftTuning(draft_p_min=0.5))  # a greedy draft's confidence is a softmax over the whole row
        drafter.propose([DraftRequest(2, [4, 5], 2, greedy, make_rng(0))])
        assert ctx.shortlisted(2) == 0
    finally:
        ctx.close()
