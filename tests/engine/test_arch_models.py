"""The tiny models of other architectures (tests/arch_models.py) load in llama.cpp, generate
deterministically, share the tiny target's vocabulary, and have the cache each of them stands for:
a hybrid whose recurrent state rolls back only through snapshots, a plain cache under an MTP model,
a sliding window that cells leave, MTP heads that draft from the trunk's hidden state."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from arch_models import (
    write_gemma3_gguf,
    write_gemma4_assistant_gguf,
    write_gemma4_gguf,
    write_glm4moe_gguf,
    write_qwen35_gguf,
)
from paths import SUPPORT
from tiny_models import _llama_cpp, greedy_tokens

PROMPT = "the quick brown fox"
FIXTURES = ["hybrid_target", "hybrid_mtp_target", "hybrid_draft", "dense_mtp_target", "swa_target", "gemma4_target"]
MTP_FIXTURES = ["hybrid_mtp_target", "dense_mtp_target", "chained_mtp_target"]


@contextmanager
def loaded(path, *, load_mtp=False, vocab_only=False):
    lib = _llama_cpp()
    params = lib.llama_model_default_params()
    params.n_gpu_layers = 0
    params.use_extra_bufts = False
    params.load_mtp = load_mtp
    params.vocab_only = vocab_only
    model = lib.llama_model_load_from_file(os.fsencode(str(path)), params)
    assert model, f"llama.cpp cannot load {path}"
    try:
        yield lib, model
    finally:
        lib.llama_model_free(model)


@contextmanager
def context(lib, model, **settings):
    params = lib.llama_context_default_params()
    params.n_ctx = 1024
    params.n_batch = params.n_ubatch = 512
    params.n_threads = params.n_threads_batch = 1
    for name, value in settings.items():
        setattr(params, name, value)
    ctx = lib.llama_init_from_model(model, params)
    assert ctx, "llama.cpp cannot create the context"
    try:
        yield ctx
    finally:
        lib.llama_free(ctx)


def decode(lib, ctx, tokens, pos0=0, *, all_logits=False):
    batch = lib.llama_batch_init(len(tokens), 0, 1)
    try:
        for i, token in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.seq_id[i][0] = token, pos0 + i, 1, 0
            batch.logits[i] = all_logits or i == len(tokens) - 1
        batch.n_tokens = len(tokens)
        assert lib.llama_decode(ctx, batch) == 0
    finally:
        lib.llama_batch_free(batch)


def tokenize(lib, model, text):
    data = text.encode()
    buf = (lib.llama_token * (len(data) + 16))()
    n = lib.llama_tokenize(lib.llama_model_get_vocab(model), data, len(data), buf, len(buf), True, True)
    return list(buf[:n])


def meta(lib, model, key):
    buf = ctypes.create_string_buffer(256)
    assert lib.llama_model_meta_val_str(model, key.encode(), buf, len(buf)) > 0
    return buf.value.decode()


@pytest.mark.parametrize(
    "fixture, arch, hybrid, nextn, n_swa",
    [
        ("hybrid_target", "qwen35", True, 0, 0),
        ("hybrid_mtp_target", "qwen35", True, 1, 0),
        ("hybrid_draft", "qwen35", True, 0, 0),
        ("dense_mtp_target", "glm4moe", False, 1, 0),
        ("swa_target", "gemma3", False, 0, 8),
        ("gemma4_target", "gemma4", False, 0, 8),
        ("chained_mtp_target", "step35", False, 2, 8),
    ],
)
def test_architecture_and_cache_kind(request, fixture, arch, hybrid, nextn, n_swa):
    with loaded(request.getfixturevalue(fixture)) as (lib, model):
        assert meta(lib, model, "general.architecture") == arch
        assert lib.llama_model_is_hybrid(model) is hybrid
        assert lib.llama_model_is_recurrent(model) is False
        assert lib.llama_model_n_layer_nextn(model) == nextn
        assert lib.llama_model_n_swa(model) == n_swa


def test_writers_are_fast_and_files_small(tmp_path):
    for name, write, kwargs in [
        ("qwen35", write_qwen35_gguf, {}),
        ("qwen35-mtp", write_qwen35_gguf, {"n_nextn": 1}),
        ("glm4moe", write_glm4moe_gguf, {}),
        ("gemma3", write_gemma3_gguf, {}),
        ("gemma4", write_gemma4_gguf, {}),
        ("gemma4-assistant", write_gemma4_assistant_gguf, {}),
    ]:
        start = time.perf_counter()
        path = write(tmp_path / f"{name}.gguf", **kwargs)
        assert time.perf_counter() - start < 2.0, name
        assert path.stat().st_size < 4 * 2**20, name


@pytest.mark.parametrize("fixture", FIXTURES)
def test_greedy_generation_is_deterministic_and_varied(request, fixture):
    path = request.getfixturevalue(fixture)
    first, other = greedy_tokens(path, [PROMPT, "hello world"], 32)
    assert greedy_tokens(path, [PROMPT], 32) == [first]
    assert len(set(first)) >= 8, first  # greedy runs may end early, on an end-of-generation token
    assert other != first


@pytest.mark.parametrize("fixture", FIXTURES)
def test_same_vocabulary_as_the_tiny_target(request, tiny_target, fixture):
    with (
        loaded(tiny_target, vocab_only=True) as (lib, base),
        loaded(request.getfixturevalue(fixture), vocab_only=True) as (_, model),
    ):
        va, vb = lib.llama_model_get_vocab(base), lib.llama_model_get_vocab(model)
        n = lib.llama_vocab_n_tokens(va)
        assert lib.llama_vocab_n_tokens(vb) == n
        assert [lib.llama_vocab_get_text(vb, i) for i in range(n)] == [
            lib.llama_vocab_get_text(va, i) for i in range(n)
        ]
        assert (lib.llama_vocab_bos(vb), lib.llama_vocab_eos(vb)) == (lib.llama_vocab_bos(va), lib.llama_vocab_eos(va))


def test_hybrid_cache_rolls_back_only_with_snapshots(hybrid_target):
    with loaded(hybrid_target) as (lib, model):
        for n_rs_seq, can_cut in ((0, False), (4, True)):
            with context(lib, model, n_rs_seq=n_rs_seq) as ctx:
                memory = lib.llama_get_memory(ctx)
                assert lib.llama_n_rs_seq(ctx) == n_rs_seq
                assert lib.llama_memory_can_shift(memory) is False
                decode(lib, ctx, tokenize(lib, model, PROMPT))
                end = lib.llama_memory_seq_pos_max(memory, 0) + 1
                assert lib.llama_memory_seq_rm(memory, 0, end - 2, -1) is can_cut
                assert lib.llama_memory_seq_pos_max(memory, 0) == (end - 3 if can_cut else end - 1)


def test_hybrid_draft_agrees_with_the_target_part_of_the_time(hybrid_target, hybrid_draft):
    run = greedy_tokens(hybrid_target, [PROMPT], 48)[0]
    predictions = []
    for path in (hybrid_target, hybrid_draft):
        with loaded(path) as (lib, model), context(lib, model) as ctx:
            tokens = tokenize(lib, model, PROMPT) + run
            decode(lib, ctx, tokens, all_logits=True)
            n_vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(model))
            rows = range(len(tokens) - len(run) - 1, len(tokens) - 1)
            predictions.append(
                [
                    int(np.argmax(np.ctypeslib.as_array(lib.llama_get_logits_ith(ctx, i), shape=(n_vocab,))))
                    for i in rows
                ]
            )
    assert predictions[0] == run  # the batch reproduces the target's greedy run
    agreement = np.mean([a == b for a, b in zip(*predictions)])
    assert 0.1 <= agreement <= 0.9, agreement


def probe_logits(lib, ctx, model, pos, token=42):
    """Decode `token` at `pos` and return its logits: what the cache holds shows in them."""
    decode(lib, ctx, [token], pos)
    n_vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(model))
    return np.ctypeslib.as_array(lib.llama_get_logits_ith(ctx, -1), shape=(n_vocab,)).copy()


def fresh_logits(lib, ctx, model, tokens):
    """The logits after `tokens` decoded into an emptied cache in one batch."""
    lib.llama_memory_clear(lib.llama_get_memory(ctx), True)
    decode(lib, ctx, tokens[:-1])
    return probe_logits(lib, ctx, model, len(tokens) - 1, tokens[-1])


def test_hybrid_rollback_inside_the_last_batch_is_exact(hybrid_target):
    """The speculative pattern: a batch of K + 1 tokens, then up to n_rs_seq = K of them taken back;
    the state after the cut is the one a fresh decode of the kept tokens has. One more is refused."""
    k = 4
    with loaded(hybrid_target) as (lib, model), context(lib, model, n_rs_seq=k) as ctx, context(lib, model) as ref:
        memory = lib.llama_get_memory(ctx)
        prompt = tokenize(lib, model, PROMPT)
        batch = greedy_tokens(hybrid_target, [PROMPT], k + 1)[0][::-1]  # not what the model would say
        end = len(prompt) + k + 1
        for m in range(1, k + 2):
            lib.llama_memory_clear(memory, True)
            decode(lib, ctx, prompt)
            decode(lib, ctx, batch, len(prompt))
            if m > k:
                assert lib.llama_memory_seq_rm(memory, 0, end - m, -1) is False
                assert lib.llama_memory_seq_pos_max(memory, 0) == end - 1  # a refused cut changes nothing
                continue
            assert lib.llama_memory_seq_rm(memory, 0, end - m, -1) is True
            got = probe_logits(lib, ctx, model, end - m)
            want = fresh_logits(lib, ref, model, prompt + batch[: k + 1 - m] + [42])
            assert np.abs(got - want).max() < 1e-3, m


def test_hybrid_snapshots_cover_only_the_last_decode_call(hybrid_target):
    """Snapshots are written for the tokens of the last llama_decode call only, and seq_rm does not
    check that: after single-token calls a one-token cut is accepted but leaves a wrong state. A
    second cut before the next decode is refused."""
    with loaded(hybrid_target) as (lib, model), context(lib, model, n_rs_seq=4) as ctx, context(lib, model) as ref:
        memory = lib.llama_get_memory(ctx)
        tokens = tokenize(lib, model, PROMPT) + greedy_tokens(hybrid_target, [PROMPT], 3)[0]
        decode(lib, ctx, tokens[:-3])
        for pos in range(len(tokens) - 3, len(tokens)):
            decode(lib, ctx, [tokens[pos]], pos)
        assert lib.llama_memory_seq_rm(memory, 0, len(tokens) - 1, -1) is True
        assert lib.llama_memory_seq_rm(memory, 0, len(tokens) - 2, -1) is False
        got = probe_logits(lib, ctx, model, len(tokens) - 1)
        want = fresh_logits(lib, ref, model, tokens[:-1] + [42])
        assert np.abs(got - want).max() > 0.5


def test_hybrid_context_needs_a_ubatch_longer_than_the_snapshots(hybrid_target):
    """llama.cpp keeps a sequence's last n_rs_seq + 1 tokens in one ubatch and aborts the process on
    the first decode when n_ubatch is not larger than that."""
    script = (
        "import os, sys; sys.path[:0] = sys.argv[1].split(os.pathsep)\n"
        "from test_arch_models import loaded, context, decode\n"
        "with loaded(sys.argv[2]) as (lib, model), context(lib, model, n_rs_seq=4, n_batch=int(sys.argv[3]), "
        "n_ubatch=int(sys.argv[3])) as ctx:\n"
        "    decode(lib, ctx, [5])\n"
        "print('decoded')\n"
    )
    here = os.pathsep.join([str(Path(__file__).parent), str(SUPPORT)])
    runs = {
        n: subprocess.run(
            [sys.executable, "-c", script, here, str(hybrid_target), str(n)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "GGML_NO_BACKTRACE": "1"},
        )
        for n in (5, 6)
    }
    assert runs[6].returncode == 0 and "decoded" in runs[6].stdout, runs[6].stderr[-2000:]
    assert runs[5].returncode != 0 and "decoded" not in runs[5].stdout
    assert "n_ubatch > n_keep_tail" in runs[5].stderr


def test_dense_mtp_trunk_has_a_plain_cache(dense_mtp_target):
    with loaded(dense_mtp_target) as (lib, model), context(lib, model, n_rs_seq=4) as ctx:
        memory = lib.llama_get_memory(ctx)
        assert lib.llama_n_rs_seq(ctx) == 0  # llama.cpp drops snapshots a cache does not need
        assert lib.llama_memory_can_shift(memory) is True
        decode(lib, ctx, tokenize(lib, model, PROMPT))
        assert lib.llama_memory_seq_rm(memory, 0, 1, -1) is True
        assert lib.llama_memory_seq_pos_max(memory, 0) == 0


def test_sliding_window_cells_leave_the_cache(swa_target):
    # The window cache holds n_swa + n_ubatch cells, rounded up to 256: past that, old cells go.
    tokens = greedy_tokens(swa_target, [PROMPT], 1)[0] * 300
    with loaded(swa_target) as (lib, model):
        for swa_full, expect_gone in ((False, True), (True, False)):
            with context(lib, model, n_batch=16, n_ubatch=16, swa_full=swa_full) as ctx:
                memory = lib.llama_get_memory(ctx)
                for pos, token in enumerate(tokens):
                    decode(lib, ctx, [token], pos)
                pos_min = lib.llama_memory_seq_pos_min(memory, 0)
                assert lib.llama_memory_seq_pos_max(memory, 0) == 299
                if expect_gone:
                    assert 0 < pos_min <= 300 - 8, pos_min
                else:
                    assert pos_min == 0


def test_sliding_window_cut_keeps_a_usable_cache_only_with_its_window(swa_target):
    """After a cut at p0 the next token attends to positions p0 - n_swa + 1 .. p0 - 1: the kept cache
    is right while its lowest position (seq_pos_min) is at most p0 - n_swa + 1, and wrong below
    that, though seq_rm says True either way. (llama.cpp's default context has swa_full on.)"""
    assert _llama_cpp().llama_context_default_params().swa_full is True
    tokens = [(37 * i) % 250 + 3 for i in range(300)]  # more than the 256-cell window cache holds
    with (
        loaded(swa_target) as (lib, model),
        context(lib, model, n_batch=16, n_ubatch=16, swa_full=False) as ctx,
        context(lib, model, swa_full=True) as ref,
    ):
        memory, n_swa = lib.llama_get_memory(ctx), lib.llama_model_n_swa(model)
        for usable in (True, False):
            lib.llama_memory_clear(memory, True)
            for pos, token in enumerate(tokens):
                decode(lib, ctx, [token], pos)
            pos_min = lib.llama_memory_seq_pos_min(memory, 0)
            assert pos_min > 0
            p0 = pos_min + n_swa - (1 if usable else 2)
            assert lib.llama_memory_seq_rm(memory, 0, p0, -1) is True
            assert lib.llama_memory_seq_pos_min(memory, 0) == pos_min
            got = probe_logits(lib, ctx, model, p0)
            want = fresh_logits(lib, ref, model, tokens[:p0] + [42])
            difference = np.abs(got - want).max()
            assert (difference < 0.05) if usable else (difference > 0.5), (usable, difference)


def test_sequences_sharing_a_sliding_window_cache_cut_back_exactly(swa_target):
    """Two sequences in one cache, decoded in turns and cut back past the window (8 tokens): every
    row equals a fresh single-sequence pass over the same history. llama.cpp hands a cell that has
    left its sequence's window to the next token stored, whichever sequence's, so a cut would
    otherwise find part of the window gone."""
    from specrun.engine.llama import Context
    from specrun.engine.model import LoadOptions, Model
    from specrun.engine.segments import Segment

    model = Model(swa_target, LoadOptions(use_extra_bufts=False))
    ctx = Context(model, n_seq=2, n_ctx=256, n_threads=1, n_batch=64)
    ref = Context(model, n_seq=1, n_ctx=256, n_threads=1, n_batch=256)
    rng = np.random.default_rng(0)
    histories: list[list[int]] = [[], []]
    try:
        for step in range(80):
            seq = int(rng.integers(0, 2))
            tokens = [int(t) for t in rng.integers(0, model.n_vocab, int(rng.integers(1, 9)))]
            if len(histories[seq]) + len(tokens) > 200:
                ctx.clear(seq)
                histories[seq] = []
            got = np.asarray(ctx.decode([Segment(seq, tokens, "last")])[0])
            histories[seq] += tokens
            ref.clear()
            want = np.asarray(ref.decode([Segment(0, histories[seq], "last")])[0])
            assert np.abs(got - want).max() < 0.05, (step, seq, len(histories[seq]))
            if rng.random() < 0.5:
                keep = max(0, len(histories[seq]) - int(rng.integers(1, 13)))
                ctx.trim(seq, keep)
                histories[seq] = histories[seq][:keep]
    finally:
        ctx.close()
        ref.close()
        model.close()


def test_a_recurrent_cache_serving_several_sequences_cuts_each_back_exactly(hybrid_target):
    """Server-shaped passes on a hybrid target with rollback snapshots: requests admitted between
    steps (some reusing part of a kept cache), a verification pass over every active sequence (1..8
    tokens each), snapshot cuts of rejected tokens right after it. Every row equals a fresh
    single-sequence pass over the same history."""
    from specrun.engine.llama import Context
    from specrun.engine.model import LoadOptions, Model
    from specrun.engine.segments import Segment

    model = Model(hybrid_target, LoadOptions(use_extra_bufts=False))
    ctx = Context(model, n_seq=4, n_ctx=256, n_threads=1, n_batch=64, rollback=8)
    ref = Context(model, n_seq=1, n_ctx=512, n_threads=1, n_batch=512)
    rng = np.random.default_rng(0)
    histories: list[list[int]] = [[] for _ in range(4)]
    active: set[int] = set()

    def tokens(n: int) -> list[int]:
        return [int(t) for t in rng.integers(0, model.n_vocab, n)]

    try:
        assert ctx.rewind == "snapshots"
        for step in range(60):
            for seq in range(4):
                if seq not in active and rng.random() < 0.3:
                    keep = int(rng.integers(0, len(histories[seq]) + 1)) if histories[seq] else 0
                    if keep < len(histories[seq]):
                        ctx.trim(seq, keep)
                        histories[seq] = histories[seq][:keep]
                    prompt = tokens(int(rng.integers(1, 20)))
                    if len(histories[seq]) + len(prompt) > 200:
                        ctx.clear(seq)
                        histories[seq] = []
                    ctx.decode([Segment(seq, prompt, "last")])
                    histories[seq] += prompt
                    ctx.checkpoint(seq)
                    active.add(seq)
            segments = []
            for seq in sorted(active, key=lambda _: rng.random()):
                if len(histories[seq]) > 200:
                    active.discard(seq)
                    continue
                segments.append(Segment(seq, tokens(int(rng.integers(1, 9))), "all"))
            for segment, rows in zip(segments, ctx.decode(segments) if segments else []):
                histories[segment.seq] += segment.tokens
                ref.clear()
                want = np.asarray(ref.decode([Segment(0, histories[segment.seq], "all")])[0])[-len(segment.tokens) :]
                assert np.abs(np.asarray(rows) - want).max() < 0.05, (step, segment.seq)
            for segment in segments:
                cut = int(rng.integers(0, len(segment.tokens)))
                if cut:
                    ctx.trim(segment.seq, len(histories[segment.seq]) - cut)
                    del histories[segment.seq][-cut:]
                if rng.random() < 0.1:
                    active.discard(segment.seq)
    finally:
        ctx.close()
        ref.close()
        model.close()


def test_a_sliding_window_context_of_more_sequences_than_it_can_pin_is_refused_with_the_fix(swa_target):
    from specrun.engine.llama import Context
    from specrun.engine.model import LoadOptions, Model
    from specrun.errors import SpecrunError

    model = Model(swa_target, LoadOptions(use_extra_bufts=False))
    try:
        with pytest.raises(SpecrunError, match="at most 128 sequences") as caught:
            Context(model, n_seq=129, n_ctx=16, n_threads=1)
        assert "--parallel to 64" in caught.value.hint
        Context(model, n_seq=128, n_ctx=16, n_threads=1).close()
    finally:
        model.close()


def head_logits(lib, head, tokens, rows, n_vocab):
    """The MTP head's logits at every position p, given the token at p and the hidden row `rows[p]`
    (one llama_batch_ext entry each: a token with its hidden state as the entry's embedding)."""
    lib.llama_memory_clear(lib.llama_get_memory(head), True)
    batch = lib.llama_batch_ext_init(head)
    try:
        for p, (token, row) in enumerate(zip(tokens, rows)):
            i = lib.llama_batch_ext_add_token(batch, 0, token)
            assert lib.llama_batch_ext_set_pos(batch, i, (lib.llama_pos * 1)(p))
            data = row.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            assert lib.llama_batch_ext_set_embd_token(batch, i, lib.llama_embd(data, 1, len(row)))
            assert lib.llama_batch_ext_set_output_logits(batch, i, True)
        assert lib.llama_process(head, lib.LLAMA_PROCESS_TYPE_DECODE, batch) == 0
    finally:
        lib.llama_batch_ext_free(batch)
    return np.stack(
        [np.ctypeslib.as_array(lib.llama_get_logits_ith(head, i), shape=(n_vocab,)).copy() for i in range(len(tokens))]
    )


@pytest.mark.parametrize("fixture", MTP_FIXTURES)
def test_mtp_head_drafts_from_the_trunk_hidden_state(request, fixture):
    """The head at position p takes the token at p and the target's hidden row of p - 1 and
    predicts the token at p + 1: it agrees with the target sometimes, and the hidden row matters."""
    import llama_cpp.llama_cpp_ext as ext

    path = request.getfixturevalue(fixture)
    prompts = [PROMPT, "hello world", "def count(n): return", "print the answer"]
    agree, changed = [], []
    with loaded(path, load_mtp=True) as (lib, model):
        n_vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(model))
        n_embd = lib.llama_model_n_embd_out(model)
        zeros = np.zeros(n_embd, dtype=np.float32)
        with context(lib, model) as target, context(lib, model, ctx_type=lib.LLAMA_CONTEXT_TYPE_MTP) as head:
            ext.llama_set_embeddings_nextn(target, True, False)  # a hidden row for every batch entry
            ext.llama_set_embeddings_nextn(head, True, True)
            for prompt, run in zip(prompts, greedy_tokens(path, prompts, 48)):
                tokens = tokenize(lib, model, prompt) + run
                lib.llama_memory_clear(lib.llama_get_memory(target), True)
                decode(lib, target, tokens, all_logits=True)
                want = [
                    int(np.argmax(np.ctypeslib.as_array(lib.llama_get_logits_ith(target, i), shape=(n_vocab,))))
                    for i in range(len(tokens))
                ]
                hidden = [
                    np.ctypeslib.as_array(ext.llama_get_embeddings_nextn_ith(target, i), shape=(n_embd,)).copy()
                    for i in range(len(tokens))
                ]
                drafted = head_logits(lib, head, tokens, [zeros] + hidden[:-1], n_vocab)
                blind = head_logits(lib, head, tokens, [zeros] * len(tokens), n_vocab)
                assert np.isfinite(drafted).all()
                agree += [int(np.argmax(drafted[p])) == want[p] for p in range(1, len(tokens))]
                changed += list(np.argmax(drafted[1:], axis=1) != np.argmax(blind[1:], axis=1))
    assert 0.03 <= np.mean(agree) < 0.9, np.mean(agree)
    assert np.mean(changed) >= 0.05, np.mean(changed)  # the head's drafts depend on the hidden row


def test_hybrid_writer_refuses_a_trunk_without_attention(tmp_path):
    with pytest.raises(ValueError, match="full-attention"):
        write_qwen35_gguf(tmp_path / "no-attention.gguf", n_layer=2)


def test_the_gemma4_assistant_drafts_over_the_target_cache_without_writing_it(gemma4_target, gemma4_assistant):
    """llama.cpp's shared-memory MTP mode on the fixtures: the assistant's context needs the
    target's (`ctx_other`), and making it empties the target's cache, so it is made first. Fed the
    target's next token and hidden row, then its own draft and hidden row, all at the one position
    after the target's cache (llama.cpp refuses a gap), it drafts; its drafts depend on the
    hidden row and on what the target's cache holds, and that cache is left as it was."""
    from llama_cpp import llama_cpp_ext as ext

    with loaded(gemma4_target) as (lib, target), loaded(gemma4_assistant) as (_, assistant):
        params = lib.llama_context_default_params()
        params.ctx_type = lib.LLAMA_CONTEXT_TYPE_MTP
        assert not lib.llama_init_from_model(assistant, params)  # without the target's context
        n_vocab, width = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(target)), lib.llama_model_n_embd_out(target)
        assert lib.llama_model_n_embd_out(assistant) == width
        tokens = tokenize(lib, target, PROMPT)
        with context(lib, target, swa_full=True) as ctx:
            memory = lib.llama_get_memory(ctx)
            decode(lib, ctx, tokens)
            with context(lib, assistant, swa_full=True, ctx_type=lib.LLAMA_CONTEXT_TYPE_MTP, ctx_other=ctx):
                assert lib.llama_memory_seq_pos_max(memory, 0) == -1  # made late, it emptied the target's cache
        with (
            context(lib, target, swa_full=True) as ctx,
            context(lib, assistant, swa_full=True, ctx_type=lib.LLAMA_CONTEXT_TYPE_MTP, ctx_other=ctx) as helper,
        ):
            memory = lib.llama_get_memory(ctx)
            ext.llama_set_embeddings_nextn(ctx, True, False)
            ext.llama_set_embeddings_nextn(helper, True, True)
            decode(lib, ctx, tokens, all_logits=True)
            hidden = np.ctypeslib.as_array(ext.llama_get_embeddings_nextn(ctx), shape=(len(tokens), width)).copy()
            first = int(np.argmax(np.ctypeslib.as_array(lib.llama_get_logits(ctx), shape=(len(tokens), n_vocab))[-1]))
            batch = lib.llama_batch_ext_init(helper)

            def draft(token: int, row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
                lib.llama_batch_ext_clear(batch)
                at = lib.llama_batch_ext_add_token(batch, 0, token)
                row = np.ascontiguousarray(row, dtype=np.float32)
                assert lib.llama_batch_ext_set_pos(batch, at, (lib.llama_pos * 1)(len(tokens)))
                assert lib.llama_batch_ext_set_embd_token(
                    batch, at, lib.llama_embd(row.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, width)
                )
                lib.llama_batch_ext_set_output_logits(batch, at, True)
                assert lib.llama_process(helper, lib.LLAMA_PROCESS_TYPE_DECODE, batch) == 0
                logits = np.ctypeslib.as_array(lib.llama_get_logits_ith(helper, at), shape=(n_vocab,)).copy()
                return logits, np.ctypeslib.as_array(
                    ext.llama_get_embeddings_nextn_ith(helper, at), shape=(width,)
                ).copy()

            try:
                depth1, own = draft(first, hidden[-1])
                depth2, _ = draft(int(np.argmax(depth1)), own)
                other, _ = draft(first, hidden[0])
                assert lib.llama_memory_seq_pos_max(memory, 0) == len(tokens) - 1  # drafting wrote nothing there
                lib.llama_memory_seq_rm(memory, 0, 1, -1)  # the same length again, of other tokens
                decode(lib, ctx, [(t * 7) % 200 + 3 for t in tokens[1:]], pos0=1)
                forgetful, _ = draft(first, hidden[-1])
            finally:
                lib.llama_batch_ext_free(batch)
            assert np.isfinite(depth1).all() and np.isfinite(depth2).all()
            assert not np.allclose(depth1, other)  # the hidden row counts
            assert not np.allclose(depth1, forgetful)  # and so does what the target's cache holds
