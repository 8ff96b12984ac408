"""What agents and editors send: histories that come back (the prompt cache in RAM), predicted
outputs, and lookup across requests; the answers never change."""

from __future__ import annotations

import httpx
import pytest
from serve_helpers import FLAT_COSTS, WAIT, load_pair, served

from specrun.engine.drafting.lookup import LookupStart
from specrun.engine.drafting.protocol import handed
from specrun.engine.sequence import GenerationSettings
from specrun.serve.schemas import ChatRequest

CONVERSATIONS = [
    "the quick brown fox jumps over the lazy dog " * 3,
    "def f(x):\n    return x * 2\n\ndef g(y):\n    return f(y) + 1\n" * 2,
    "abc abc abc abc abc xyz xyz xyz xyz " * 3,
]


@pytest.fixture(scope="module")
def pair(tiny_target, tiny_draft):
    loaded = load_pair(tiny_target, tiny_draft)
    yield loaded
    loaded.close()


def ask(url: str, messages: list[dict], **body) -> dict:
    response = httpx.post(
        url + "/v1/chat/completions",
        json={"messages": messages, "max_tokens": 16, "temperature": 0, **body},
        timeout=WAIT,
    )
    assert response.status_code == 200, response.text
    return response.json()


def turns(url: str, rounds: int = 3) -> list[dict]:
    """Three conversations interleaved, each turn resending its history."""
    histories = [[{"role": "user", "content": text}] for text in CONVERSATIONS]
    out = []
    for turn in range(rounds):
        for i, history in enumerate(histories):
            answer = ask(url, history)
            out.append(answer)
            history += [
                {"role": "assistant", "content": answer["choices"][0]["message"]["content"]},
                {"role": "user", "content": f"and now step {turn} of {i}"},
            ]
    return out


def metric(url: str, name: str) -> float:
    for line in httpx.get(url + "/metrics", timeout=WAIT).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


@pytest.mark.slow
def test_histories_that_come_back_are_restored_from_ram_and_answers_stand(pair):
    with served(pair, costs=FLAT_COSTS, parallel=1, cache_ram=0) as plain:
        without = turns(plain.url)
    with served(pair, costs=FLAT_COSTS, parallel=1, cache_ram=64) as cached:
        with_cache = turns(cached.url)
        assert metric(cached.url, "specrun_prompt_cache_hits_total") >= 3
        assert metric(cached.url, "specrun_prompt_cache_restored_tokens_total") > 0
        assert 0 < metric(cached.url, "specrun_prompt_cache_bytes") <= 64 * 2**20
        assert metric(cached.url, "specrun_prompt_cache_restore_failures_total") == 0
    texts = [a["choices"][0]["message"]["content"] for a in without]
    assert [a["choices"][0]["message"]["content"] for a in with_cache] == texts
    restored = sum(a["usage"]["prompt_tokens_details"]["cached_tokens"] for a in with_cache)
    assert restored > sum(a["timings"]["cache_n"] for a in without)
    assert all(a["usage"]["prompt_tokens_details"]["cached_tokens"] == a["timings"]["cache_n"] for a in with_cache)


def test_a_prediction_never_changes_the_answer_and_its_tokens_are_counted(pair):
    """The tiny model writes bytes that are not UTF-8, so its text does not tokenize back to its
    tokens: how much a right prediction drafts is tested on tokens (engine/test_prediction.py)."""
    messages = [{"role": "user", "content": "repeat after me: one two three four"}]
    base = GenerationSettings(draft_max=8)
    with served(pair, costs=FLAT_COSTS, base=base, mode="ngram", draft_max=8, lookup_pool=False) as running:
        plain = ask(running.url, messages, max_tokens=40)
        text = plain["choices"][0]["message"]["content"]
        assert "completion_tokens_details" not in plain["usage"]
        counted = []
        for content in (text, [{"type": "text", "text": text[:10]}, {"type": "text", "text": text[10:]}], "x" * 50):
            predicted = ask(running.url, messages, max_tokens=40, prediction={"type": "content", "content": content})
            assert predicted["choices"][0]["message"]["content"] == text
            details = predicted["usage"]["completion_tokens_details"]
            counted.append((details["accepted_prediction_tokens"], details["rejected_prediction_tokens"]))
        # The prediction's tokens the answer kept, and the rest: every token of it is one or the other.
        assert counted[0] == counted[1] and counted[0][0] > 0
        assert counted[2][0] == 0 and counted[2][1] > 0
        body = {
            "prompt": "one two",
            "max_tokens": 8,
            "temperature": 0,
            "prediction": {"type": "content", "content": "x"},
        }
        completion = httpx.post(running.url + "/v1/completions", json=body, timeout=WAIT)
        assert completion.status_code == 200 and "completion_tokens_details" in completion.json()["usage"]


def test_a_bad_or_huge_prediction_is_a_400_naming_it(pair):
    messages = [{"role": "user", "content": "hi"}]
    with served(pair, costs=FLAT_COSTS) as running:
        for prediction, code in (
            ({"type": "content", "content": "word " * 600}, "context_length_exceeded"),
            ({"type": "text", "content": "x"}, None),
            ({"content": "x"}, None),
        ):
            response = httpx.post(
                running.url + "/v1/chat/completions",
                json={"messages": messages, "max_tokens": 4, "prediction": prediction},
                timeout=WAIT,
            )
            assert response.status_code == 400, response.text
            error = response.json()["error"]
            assert "prediction" in (error["param"] or "") and (code is None or error["code"] == code)


def test_each_request_names_its_lookup_pool_unless_it_or_the_server_opts_out(pair):
    def pool(service, **body) -> str | None:
        request = ChatRequest.model_validate({"messages": [{"role": "user", "content": "hi there"}], **body})
        start = handed(service.chat_job(request).given, LookupStart)
        return None if start is None else start.pool_key

    with served(pair, costs=FLAT_COSTS) as running:
        service = running.service
        assert pool(service, user="alice") == pool(service, prompt_cache_key="alice") == "client:alice"
        assert pool(service).startswith("prompt:") and pool(service) == pool(service, temperature=0.5)
        assert pool(service, user="alice", lookup_pool=False) is None
    with served(pair, costs=FLAT_COSTS, lookup_pool=False) as running:
        assert pool(running.service, user="alice") is None


def test_a_hybrid_targets_edited_last_message_restores_the_boundary_before_it(hybrid_target):
    """A recurrent state cannot be cut back: the server saves it before the last message as it reads
    the prompt, so a regenerated or edited last message restores that instead of reading it all."""
    pair = load_pair(hybrid_target, None)

    def session(url: str) -> list[dict]:
        first = [
            {"role": "system", "content": "You answer briefly."},
            {"role": "user", "content": "the first question"},
        ]
        one = ask(url, first)
        second = [*first, {"role": "assistant", "content": one["choices"][0]["message"]["content"]}]
        two = ask(url, [*second, {"role": "user", "content": "a second question, asked at some length"}])
        three = ask(url, [*second, {"role": "user", "content": "the second question, edited"}])
        return [one, two, three]

    try:
        with served(pair, costs=FLAT_COSTS, parallel=1, cache_ram=0) as plain:
            without = session(plain.url)
        with served(pair, costs=FLAT_COSTS, parallel=1, cache_ram=64) as cached:
            with_cache = session(cached.url)
            assert metric(cached.url, "specrun_prompt_cache_hits_total") >= 1
        assert [a["choices"][0]["message"]["content"] for a in with_cache] == [
            a["choices"][0]["message"]["content"] for a in without
        ]
        # Restored from the boundary after the first answer, further than the first prompt's end.
        assert with_cache[2]["timings"]["cache_n"] > with_cache[0]["usage"]["prompt_tokens"]
    finally:
        pair.close()


def test_a_request_is_admitted_expecting_as_many_tokens_as_answers_like_it_ran(pair, monkeypatch):
    """An agent asks for max_tokens 32000 and gets a few words: auto weighs exploring a drafter
    against what answers of the request's class ran to, not against its max_tokens."""
    with served(pair, costs=FLAT_COSTS, parallel=1) as running:
        engine = running.service.engine
        admitted: list[float | None] = []
        admit = engine.admit

        def recording(prompt, settings, **kw):
            admitted.append(kw.get("expected_tokens"))
            return admit(prompt, settings, **kw)

        monkeypatch.setattr(engine, "admit", recording)
        first = ask(running.url, [{"role": "user", "content": CONVERSATIONS[0]}], max_tokens=12)
        ask(running.url, [{"role": "user", "content": CONVERSATIONS[1]}], max_tokens=12)
        ask(running.url, [{"role": "user", "content": CONVERSATIONS[1]}], max_tokens=4000)
    assert admitted[0] is None  # nothing finished yet
    assert admitted[1] == pytest.approx(first["usage"]["completion_tokens"])
    assert admitted[2] is None  # another class: max_tokens of another scale
