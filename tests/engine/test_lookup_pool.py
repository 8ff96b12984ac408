"""Prompt lookup across requests: a later request drafts from an earlier answer of the same pool, one
request's failures leave another's drafting intact, unrelated pools stay apart, memory is bounded."""

from __future__ import annotations

from specrun.engine.drafting.lookup import LookupDrafter, LookupStart
from specrun.engine.drafting.lookup_pool import SEPARATOR, LookupPool, PoolIndex
from specrun.engine.drafting.protocol import DraftRequest, DraftTuning
from specrun.engine.sampling import SamplingParams

GREEDY = SamplingParams(temperature=0.0)
ANSWER = list(range(500, 560))  # an earlier answer, in no later prompt


def proposals(drafter: LookupDrafter, seq: int, history: list[int], k: int = 8):
    return drafter.propose([DraftRequest(seq, history, k, GREEDY, None)]).drafts[seq]


def finished(drafter: LookupDrafter, seq: int, key: str, prompt: list[int], answer: list[int]) -> None:
    drafter.begin(seq, prompt, LookupStart(pool_key=key))
    drafter.finish(seq, prompt + answer)


def test_a_later_request_drafts_from_an_earlier_answer():
    drafter = LookupDrafter(DraftTuning(k_max=8))
    finished(drafter, 0, "agent", [1, 2, 3], ANSWER)
    prompt = [7, 8, 9]
    drafter.begin(1, prompt, LookupStart(pool_key="agent"))
    draft = proposals(drafter, 1, prompt + ANSWER[:6])
    assert draft.tokens == ANSWER[6 : 6 + len(draft.tokens)] and len(draft.tokens) >= 4
    drafter.begin(2, prompt, LookupStart(pool_key="someone else"))
    assert proposals(drafter, 2, prompt + ANSWER[:6]).tokens == []  # another pool: nothing of it
    drafter.begin(3, prompt, LookupStart())  # no pool asked for
    assert proposals(drafter, 3, prompt + ANSWER[:6]).tokens == []


def test_the_requests_own_text_comes_first():
    drafter = LookupDrafter(DraftTuning(k_max=8))
    finished(drafter, 0, "agent", [1], ANSWER)
    own = ANSWER[:6] + [42, 43, 44, 45]  # the request's own text continues the same words otherwise
    drafter.begin(1, own, LookupStart(pool_key="agent"))
    assert proposals(drafter, 1, own + ANSWER[:6]).tokens[:4] == [42, 43, 44, 45]


def test_a_run_of_failures_in_one_request_leaves_another_drafting_from_the_pool():
    drafter = LookupDrafter(DraftTuning(k_max=8))
    finished(drafter, 0, "agent", [1, 2, 3], ANSWER)
    drafter.begin(1, [7], LookupStart(pool_key="agent"))
    drafter.begin(2, [8], LookupStart(pool_key="agent"))
    history = [7] + ANSWER[:5]
    first = proposals(drafter, 1, history)
    for _ in range(12):  # every pool draft of request 1 fails at once
        drafter.learn(1, len(proposals(drafter, 1, history).tokens), 0)
    failing = proposals(drafter, 1, history)
    assert (failing.confidence or [0])[0] < 0.5 * first.confidence[0]
    fresh = proposals(drafter, 2, [8] + ANSWER[:5])
    assert fresh.tokens == first.tokens and fresh.confidence == first.confidence
    assert len(drafter.pool.get("agent")) > 0  # the pool itself is never cleared


def test_pools_stay_within_their_token_budget():
    pool = LookupPool(max_tokens=2_000, key_tokens=600)
    for i in range(200):
        pool.add(f"client {i % 7}", [i * 1000 + j for j in range(150)])
        assert pool.tokens <= 2_000
        assert all(len(p) <= 600 for p in pool._pools.values())
    newest = pool.get("client 3")  # the last to be given a text: least recently used keys went first
    n, end = newest.match([199_010, 199_011, 199_012])
    assert newest.continuation(end, 3) == [199_013, 199_014, 199_015]
    assert pool.get("client 4") is None


def test_a_key_keeps_its_newest_texts_and_never_matches_across_them():
    index = PoolIndex(max_tokens=100)
    for start in range(0, 400, 40):
        index.add(list(range(start, start + 30)))
    assert len(index) <= 100 and SEPARATOR in index.tokens
    n, end = index.match([371, 372, 373, 374])
    assert n == 4 and index.continuation(end, 10) == [375, 376, 377, 378, 379, 380, 381, 382, 383, 384]
    assert index.continuation(index.match([387, 388, 389])[1], 10) == []  # the text ends there
    assert index.match([11, 12, 13]) is None  # dropped: the oldest texts go first
