"""A run of cached tokens kept after the point where a new prompt parts from the cache: found,
moved into place with the changed tokens before it read at their new positions, counted as cached;
where the tokens before a run cannot change it (a model whose layers add nothing) the logits are a
cold read's; speculation keeps every greedy answer; hybrid and sliding-window caches read as before."""

from __future__ import annotations

import numpy as np
import pytest
from serve_helpers import FLAT_COSTS, costs_of, load_pair
from tiny_models import write_tiny_gguf

from specrun.engine.kv_reuse import longest_run, shared_runs
from specrun.engine.lib import _llama
from specrun.engine.sampling import SamplingParams
from specrun.engine.sequence import GenerationSettings
from specrun.runtime.session import Session

GREEDY = SamplingParams(temperature=0.0)
TEXT = "def total(items):\n    result = 0\n    for item in items:\n        result += item\n    return result\n" * 3


def test_the_longest_run_after_the_parting_point_is_found():
    old = [1, 2, 3, 9, 9, 4, 5, 6, 7, 8, 10]
    new = [1, 2, 3, 7, 7, 7, 4, 5, 6, 7, 8, 11]
    assert longest_run(old, new, 3, 4) == (5, 6, 5)
    assert longest_run(old, new, 3, 6) is None
    assert longest_run(old, new, 3, 0) is None
    assert longest_run([5] * 100, [5] * 100, 10, 8) == (10, 10, 90)


def test_runs_are_found_among_many_repeated_lines_in_bounded_time():
    line = [1, 2, 3, 4, 5, 6, 7, 8, 9]
    old = line * 2000 + [50] + list(range(100, 400))
    new = line * 2000 + [51, 52] + list(range(100, 400))
    found = longest_run(old, new, 9 * 2000, 64)
    assert found == (9 * 2000 + 1, 9 * 2000 + 2, 300)


def test_runs_on_both_sides_of_a_change_are_all_found():
    old = list(range(100, 140)) + [1, 2] + list(range(200, 240))
    new = list(range(103, 140)) + [7] + list(range(200, 240))  # three tokens gone at the start, two changed
    assert shared_runs(old, new, 0, 16) == [(3, 0, 37), (42, 38, 40)]
    assert shared_runs(old, new, 0, 38) == [(42, 38, 40)]


@pytest.fixture(scope="module")
def flat(tmp_path_factory):
    """A model whose layers add nothing: a token's logits depend on the token alone, so a moved run
    must give exactly a cold read's logits."""
    succ = {"a": "b", "b": "c", "c": "a"}
    path = write_tiny_gguf(tmp_path_factory.mktemp("reuse") / "flat.gguf", successors=succ)
    pair = load_pair(path, None)
    yield pair
    pair.close()


@pytest.fixture(scope="module")
def pairs(tiny_target, tiny_draft, hybrid_target, swa_target):
    loaded = {
        "dense": load_pair(tiny_target, tiny_draft),
        "hybrid": load_pair(hybrid_target, None),
        "swa": load_pair(swa_target, None),
    }
    yield loaded
    for pair in loaded.values():
        pair.close()


def session_for(pair, mode: str = "off", reuse: int = 16) -> Session:
    session = Session(pair.models(), n_seq=2, n_seq_pool=1, costs=costs_of(FLAT_COSTS, FLAT_COSTS))
    policy, _ = session.policy(mode, GenerationSettings(draft_max=4), fresh=True, track_costs=True)
    session.engine.configure(policy)
    session.engine.reuse_runs = reuse
    return session


def words(pair, text: str) -> list[int]:
    return pair.target_model.tokenize(text, add_special=False, parse_special=False)


def answer(session: Session, prompt: list[int], n: int = 12):
    state = session.engine.admit(prompt, GenerationSettings(max_tokens=n, sampling=GREEDY, ignore_eos=True))
    while not state.done:
        session.engine.step([state])
    return state


def edits(pair) -> list[list[int]]:
    """Prompts as an editor sends them: the text before the cursor grows, the text after it stays."""
    before, after = words(pair, TEXT[:60]), words(pair, TEXT[60:])
    typed = [words(pair, piece) for piece in ("x", "xy", "xyz = ", "xyz = 1")]
    return [before + t + after for t in typed]


def test_a_changed_line_keeps_the_text_after_it(pairs):
    pair = pairs["dense"]
    session = session_for(pair)
    try:
        first, second = edits(pair)[:2]
        answer(session, first)
        state = answer(session, second)
        target = session.engine.target
        assert len(state.prompt) - state.cached <= 4  # the typed tokens and the last one, not the text after
        assert target.reused_tokens >= len(words(pair, TEXT[60:])) - 2
        memory = target.memory
        assert _llama().llama_memory_seq_pos_min(memory, state.seq) == 0
        assert _llama().llama_memory_seq_pos_max(memory, state.seq) == len(target.tokens[state.seq]) - 1
        assert _llama().llama_memory_seq_pos_max(memory, target.spare) == -1  # the spare holds nothing after
    finally:
        session.close()


def test_a_window_that_moves_on_and_the_text_after_the_cursor_are_both_kept(pairs):
    pair = pairs["dense"]
    session = session_for(pair)
    try:
        head, body = words(pair, "# chunks of other files\n"), words(pair, TEXT * 2)
        after = words(pair, TEXT[::-1])
        assert len(body) > 200
        first = head + body[:150] + words(pair, "x = ") + after
        second = head + body[10:160] + words(pair, "y = 2") + after  # the window moved on by ten tokens
        answer(session, first)
        state = answer(session, second)
        read = len(second) - (state.cached - state.read_in_cache)
        assert read <= 10 + len(words(pair, "y = 2")) + 1
        assert session.engine.target.reused_tokens >= 140 + len(after) - 2
    finally:
        session.close()


def test_a_moved_run_gives_a_cold_reads_logits_where_nothing_before_it_counts(flat):
    cold, warm = session_for(flat, reuse=0), session_for(flat, reuse=8)
    try:
        prompts = edits(flat)
        for prompt in prompts:
            a, b = answer(cold, prompt, 6), answer(warm, prompt, 6)
            assert a.generated == b.generated
        assert warm.engine.target.reused_tokens > 0
        rows = []
        for session in (cold, warm):
            ctx = session.engine.target
            state = answer(session, prompts[0], 1)
            ctx.trim(state.seq, len(prompts[0]) - 1)
            ctx.shortlist(state.seq, 0)
            rows.append(ctx.feed(state.seq, prompts[0][-1:], "last"))
        np.testing.assert_allclose(rows[0], rows[1], rtol=1e-5, atol=1e-5)
    finally:
        cold.close()
        warm.close()


@pytest.mark.parametrize("mode", ["ngram", "draft"])
def test_speculation_keeps_every_greedy_answer_with_runs_reused(pairs, mode):
    pair = pairs["dense"]
    plain, spec = session_for(pair, "off"), session_for(pair, mode)
    try:
        for prompt in edits(pair):
            assert answer(plain, prompt, 16).generated == answer(spec, prompt, 16).generated
        assert plain.engine.target.reused_tokens > 0 and spec.engine.target.reused_tokens > 0
        if mode == "draft":  # the draft model's cache holds the target's tokens: its runs move too
            assert spec.engine.drafters["draft"].ctx.reused_tokens > 0
    finally:
        plain.close()
        spec.close()


@pytest.mark.parametrize("kind", ["hybrid", "swa"])
def test_hybrid_and_sliding_window_caches_read_the_changed_tail_again(pairs, kind):
    pair = pairs[kind]
    session, cold = session_for(pair), session_for(pair, reuse=0)
    try:
        for prompt in edits(pair):
            assert answer(session, prompt).generated == answer(cold, prompt).generated
        assert not session.engine.target.reuses_runs and session.engine.target.reused_tokens == 0
    finally:
        session.close()
        cold.close()


def test_a_kept_cache_holding_only_part_of_what_the_claimed_one_holds_is_dropped(pairs):
    pair = pairs["dense"]
    session = Session(pair.models(), n_seq=3, n_seq_pool=1, costs=costs_of(FLAT_COSTS, FLAT_COSTS))
    try:
        policy, _ = session.policy("off", GenerationSettings(draft_max=4), fresh=True, track_costs=True)
        engine = session.engine
        engine.configure(policy)
        prompt = words(pair, TEXT)
        other = words(pair, "the quick brown fox jumps over the lazy dog " * 4)
        only_read = GenerationSettings(max_tokens=0, sampling=GREEDY)
        unrelated = engine.admit(other, only_read)
        longer = engine.admit(prompt[:60], only_read)
        shorter = engine.admit(prompt[:30], only_read)  # the longer one is busy: another sequence reads it again
        while not all(s.done for s in (unrelated, longer, shorter)):
            engine.step([s for s in (unrelated, longer, shorter) if not s.done])
        tokens = engine.target.tokens
        assert tokens[shorter.seq] == prompt[:30] and tokens[longer.seq] == prompt[:60]
        state = engine.admit(prompt, GenerationSettings(max_tokens=2, sampling=GREEDY))
        assert state.seq == longer.seq and state.cached == 60
        assert tokens[shorter.seq] == [] and tokens[unrelated.seq] == other  # the unrelated cache stays
    finally:
        session.close()
