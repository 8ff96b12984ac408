"""The prompt cache in host RAM: caches given up are saved, prompts that come back restore them, and
answers never change (dense, hybrid and sliding-window targets); bytes stay within the budget and a
state llama.cpp refuses is a miss."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from serve_helpers import FLAT_COSTS, costs_of, load_pair

from specrun.engine.prompt_cache import TARGET, PromptCache, Saved
from specrun.engine.sampling import SamplingParams
from specrun.engine.sequence import GenerationSettings
from specrun.runtime.session import Session

GREEDY = SamplingParams(temperature=0.0)
# Three conversations that come back turn after turn: more than the session keeps in sequences.
OPENINGS = [
    "the quick brown fox jumps over the lazy dog " * 3,
    "def f(x):\n    return x * 2\n\ndef g(y):\n    return f(y) + 1\n" * 2,
    "abc abc abc abc abc xyz xyz xyz xyz " * 3,
]


def entry(tokens, whole=False, size=100) -> Saved:
    return Saved(np.asarray(tokens, dtype=np.int32), {TARGET: (list(tokens), np.zeros(size, np.uint8))}, whole)


# -- the store alone --------------------------------------------------------------------------


def test_the_longest_shared_prefix_is_found_and_whole_entries_serve_only_their_extensions():
    cache = PromptCache(10_000)
    cache.add(entry([1, 2, 3, 4, 5]))
    cache.add(entry([1, 2, 9, 9], whole=True))
    found, n = cache.find([1, 2, 3, 4, 7, 7], limit=5)
    assert n == 4 and list(found.tokens) == [1, 2, 3, 4, 5]
    found, n = cache.find([1, 2, 9, 9, 9], limit=4)
    assert n == 4 and found.whole
    found, n = cache.find([1, 2, 9, 8, 9], limit=4)  # parts inside the whole entry: only the cuttable one serves
    assert n == 2 and not found.whole
    assert cache.find([5, 5], limit=2) == (None, 0)


def test_an_entry_that_serves_everything_another_does_replaces_it():
    cache = PromptCache(10_000)
    cache.add(entry([1, 2, 3]))
    cache.add(entry([1, 2, 3, 4]))
    assert [list(e.tokens) for e in cache.entries.values()] == [[1, 2, 3, 4]]
    assert cache.covers([1, 2], whole=False) and cache.covers([1, 2, 3, 4], whole=True)
    cache.add(entry([7, 8], whole=True))
    cache.add(entry([7, 8, 9], whole=True))  # a whole entry serves only its own extensions: both stay
    assert len(cache.entries) == 3


def test_bytes_stay_within_the_budget_least_recently_used_first():
    cache = PromptCache(1_100)  # three entries of 336 bytes
    for i in range(50):
        cache.add(entry([i, i + 1, i + 2], size=300))
        assert cache.bytes <= cache.budget
    assert len(cache.entries) == 3
    newest = sorted(cache.entries.values(), key=lambda e: e.used)[-1]
    assert list(newest.tokens) == [49, 50, 51]
    assert not cache.add(entry([1, 2], size=5_000))  # larger than the budget alone: not kept


# -- the engine ---------------------------------------------------------------------------------


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


def session_for(pair, mode: str, cache_ram: int) -> Session:
    """One sequence decoding, one kept cache: a third conversation always evicts one."""
    session = Session(pair.models(), n_seq=2, n_seq_pool=1, costs=costs_of(FLAT_COSTS, FLAT_COSTS), cache_ram=cache_ram)
    policy, _ = session.policy(mode, GenerationSettings(draft_max=4), fresh=True, track_costs=True)
    session.engine.configure(policy)
    return session


@contextmanager
def side_by_side(pair, mode: str) -> Iterator[tuple[Session, Session]]:
    """Two sessions of `mode`: one without a prompt cache, one with 64 MiB of it."""
    plain = session_for(pair, mode, 0)
    cached = session_for(pair, mode, 64 * 2**20)
    try:
        yield plain, cached
    finally:
        plain.close()
        cached.close()


def words(pair, text: str) -> list[int]:
    return pair.target_model.tokenize(text, add_special=False, parse_special=False)


def answer(session: Session, prompt: list[int], n: int = 12) -> list[int]:
    state = session.engine.admit(prompt, GenerationSettings(max_tokens=n, sampling=GREEDY, ignore_eos=True))
    while not state.done:
        session.engine.step([state])
    return state.generated, state.cached


def conversations(session: Session, pair, turns: int = 3):
    """Three conversations interleaved, each turn resending its history with a new message."""
    histories = [pair.target_model.tokenize(text, add_special=True, parse_special=True) for text in OPENINGS]
    answers, cached = [], []
    for turn in range(turns):
        for i, history in enumerate(histories):
            out, hit = answer(session, history)
            answers.append(out)
            cached.append(hit)
            history += out + words(pair, f" next {turn} {i}")
    return answers, cached


@pytest.mark.parametrize("kind", ["dense", "hybrid", "swa"])
def test_greedy_answers_are_the_same_with_and_without_the_cache(pairs, kind):
    pair = pairs[kind]
    with side_by_side(pair, "off") as (plain, cached):
        without, read_without = conversations(plain, pair)
        with_cache, read_with = conversations(cached, pair)
        assert with_cache == without
        stats = cached.engine.cache.stats()
        assert stats["hits"] >= 3 and stats["restored_tokens"] > 0  # later turns came back from RAM
        assert sum(read_with) > sum(read_without)


def test_a_speculating_session_restores_the_draft_models_cache_too(pairs):
    pair = pairs["dense"]
    with side_by_side(pair, "draft") as (plain, cached):
        assert conversations(cached, pair)[0] == conversations(plain, pair)[0]
        saved = list(cached.engine.cache.entries.values())
        assert any("draft" in e.states for e in saved)


@pytest.mark.parametrize("fixture", ["dense_mtp_target", "hybrid_mtp_target"])
def test_the_mtp_heads_cache_is_saved_and_restored_with_the_targets(request, fixture):
    pair = load_pair(request.getfixturevalue(fixture), None)
    try:
        with side_by_side(pair, "mtp") as (plain, cached):
            assert conversations(cached, pair)[0] == conversations(plain, pair)[0]
            assert cached.engine.cache.hits >= 3
            assert any("mtp" in e.states for e in cached.engine.cache.entries.values())
    finally:
        pair.close()


def test_a_state_llama_cpp_refuses_is_a_miss_and_the_answer_stands(pairs):
    pair = pairs["dense"]
    with side_by_side(pair, "off") as (plain, cached):
        expected = conversations(plain, pair)[0]
        histories = [pair.target_model.tokenize(t, add_special=True, parse_special=True) for t in OPENINGS]
        for history in histories:  # three first turns: the first two caches are given up and saved
            answer(cached, history)
        for saved in cached.engine.cache.entries.values():
            tokens, data = saved.states[TARGET]
            saved.states[TARGET] = (tokens, data[: len(data) // 2].copy())  # a state cut short
        out, hit = answer(cached, histories[0] + expected[0] + words(pair, " next 0 0"))
        stats = cached.engine.cache.stats()
        assert stats["failures"] == 1 and stats["hits"] == 0 and hit == 0
        alone, _ = answer(plain, histories[0] + expected[0] + words(pair, " next 0 0"))
        assert out == alone


def test_a_flood_of_distinct_prompts_keeps_ram_within_the_budget(pairs):
    pair = pairs["dense"]
    session = session_for(pair, "off", 64 * 2**20)
    cache = session.engine.cache

    def prompt(i: int) -> list[int]:
        text = f"prompt number {i} " + " ".join(str(i * 97 + j) for j in range(60))
        return pair.target_model.tokenize(text, add_special=True, parse_special=True)

    try:
        for i in range(3):
            answer(session, prompt(i), n=4)
        one = max(e.nbytes for e in cache.entries.values())
        cache.budget = int(2.5 * one)  # two states fit, not three
        for i in range(3, 15):
            answer(session, prompt(i), n=4)
            assert cache.bytes <= cache.budget
        assert 1 <= len(cache.entries) <= 2
    finally:
        session.close()


def test_a_cut_is_saved_first_only_when_it_loses_a_part_worth_the_copy(tiny_target):
    """A save copies every token's state: a long cache that loses a few tokens (an agent's next
    turn after a short answer) is cut without one; one that loses a share of itself is saved."""
    pair = load_pair(tiny_target, None, ctx_size=1024)
    session = session_for(pair, "off", 64 * 2**20)
    try:
        history = (words(pair, " ".join(f"w{i}" for i in range(400))) * 2)[:700]
        answer(session, history, n=4)
        held = len(session.target_ctx.tokens[0]) + len(session.target_ctx.tokens[1])  # the one cache held
        entries = session.engine.cache.entries
        few = held - 20  # loses 20 tokens: at least PROMPT_CACHE_MIN_GAIN, under 1/32 of the cache
        answer(session, history[: few - 1] + words(pair, " and then"), n=4)
        assert not entries
        answer(session, history[:300] + words(pair, " elsewhere"), n=4)  # loses more than half
        assert len(entries) == 1
    finally:
        session.close()
        pair.close()
