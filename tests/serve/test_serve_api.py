"""`specrun serve` through the official openai client and raw HTTP, on tiny models served from a
thread of this process. Tests that depend on what is in flight hold the engine with a StepGate and
wait for states, never for time."""

from __future__ import annotations

import json
import re
import threading

import httpx
import openai
import pytest
from cli_helpers import specrun
from serve_helpers import FLAT_COSTS, WAIT, StepGate, load_pair, served

CHEAP_DRAFTS = {n: 0.001 for n in FLAT_COSTS}  # with FLAT_COSTS: under auto, drafting pays
MESSAGES = ["hello", "abc abc abc abc", "the quick brown fox", "def f(x):"]


@pytest.fixture(scope="module")
def pair(tiny_target, tiny_draft):
    loaded = load_pair(tiny_target, tiny_draft)
    yield loaded
    loaded.close()


@pytest.fixture(scope="module")
def server(pair):
    """A shared server for tests that only read answers: auto, drafting pays (flat costs)."""
    with served(pair, costs=FLAT_COSTS, draft_costs=CHEAP_DRAFTS, parallel=4) as running:
        yield running


def client(url: str, key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=WAIT)


def chat(url: str, message: str, **options) -> openai.types.chat.ChatCompletion:
    options = {"max_tokens": 24, "temperature": 0, **options}
    return client(url).chat.completions.create(model="tiny", messages=[{"role": "user", "content": message}], **options)


def streamed(url: str, message: str, **options) -> tuple[str, list]:
    options = {"max_tokens": 24, "temperature": 0, **options}
    chunks = list(
        client(url).chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": message}], stream=True, **options
        )
    )
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices), chunks


def metric(url: str, name: str, headers: dict | None = None) -> float:
    text = httpx.get(url + "/metrics", headers=headers or {}).text
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    assert match, f"{name} not in /metrics"
    return float(match.group(1))


# -- answers ------------------------------------------------------------------------------------


def test_a_streamed_answer_equals_the_whole_one(server):
    whole = chat(server.url, "hello")
    text, chunks = streamed(server.url, "hello")
    assert text == whole.choices[0].message.content and text
    assert chunks[0].choices[0].delta.role == "assistant"
    final = chunks[-1]
    assert final.choices[0].finish_reason == whole.choices[0].finish_reason == "length"
    assert final.usage.completion_tokens == whole.usage.completion_tokens == 24
    assert final.model_extra["timings"]["predicted_n"] == 24


def test_a_streamed_completion_equals_the_whole_one(server):
    api = client(server.url)
    whole = api.completions.create(model="tiny", prompt="abc abc abc", max_tokens=20, temperature=0)
    pieces = list(api.completions.create(model="tiny", prompt="abc abc abc", max_tokens=20, temperature=0, stream=True))
    assert "".join(p.choices[0].text for p in pieces) == whole.choices[0].text
    assert whole.object == "text_completion" and whole.usage.completion_tokens == 20
    assert pieces[-1].choices[0].finish_reason == "length" and "timings" in pieces[-1].model_extra


def test_a_greedy_chat_answer_equals_specrun_runs(server, tiny_target, tiny_draft):
    answer = chat(server.url, "hello", max_tokens=24).choices[0].message.content
    result = specrun(
        "run",
        "hello",
        "-m",
        tiny_target,
        "-md",
        tiny_draft,
        "-n",
        "24",
        "--temp",
        "0",
        "-c",
        "512",
        "-t",
        "1",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    assert answer == json.loads(result.stdout)["text"]


def test_responses_carry_timings_with_draft_counts(pair):
    with served(pair, costs=FLAT_COSTS, draft_costs=CHEAP_DRAFTS, mode="draft", draft_max=4) as running:
        response = chat(running.url, "abc abc abc abc", max_tokens=32)
    timings = response.model_extra["timings"]
    assert {
        "prompt_n",
        "prompt_ms",
        "predicted_n",
        "predicted_ms",
        "predicted_per_second",
        "draft_n",
        "draft_n_accepted",
    } <= set(timings)
    assert timings["predicted_n"] == response.usage.completion_tokens == 32
    assert timings["prompt_n"] + timings["cache_n"] == response.usage.prompt_tokens
    assert timings["draft_n"] > 0 and 0 < timings["draft_n_accepted"] <= timings["draft_n"]


def test_metrics_count_the_accepted_draft_tokens(pair):
    with served(pair, costs=FLAT_COSTS, draft_costs=CHEAP_DRAFTS, mode="draft", draft_max=4) as running:
        accepted = [chat(running.url, m, max_tokens=16).model_extra["timings"]["draft_n_accepted"] for m in MESSAGES]
        assert sum(accepted) > 0
        assert metric(running.url, "specrun_draft_tokens_accepted_total") == sum(accepted)
        assert metric(running.url, 'specrun_drafter_tokens_accepted_total{drafter="draft"}') == sum(accepted)
        assert metric(running.url, 'specrun_draft_position_accepted_total{position="1"}') > 0
        assert metric(running.url, 'specrun_requests_total{endpoint="chat",outcome="completed"}') == len(MESSAGES)
        assert metric(running.url, "specrun_generated_tokens_total") == 16 * len(MESSAGES)
        assert metric(running.url, "specrun_completion_seconds_count") == len(MESSAGES)


def test_four_concurrent_clients_each_get_the_answer_they_get_alone(pair):
    with served(pair, costs=FLAT_COSTS, draft_costs=CHEAP_DRAFTS, parallel=4) as running:
        alone = [chat(running.url, m).choices[0].message.content for m in MESSAGES]
    gate = StepGate()
    with served(pair, gate=gate, costs=FLAT_COSTS, draft_costs=CHEAP_DRAFTS, parallel=4) as running:
        answers: dict[int, str] = {}
        threads = [
            threading.Thread(
                target=lambda i=i, m=m: answers.__setitem__(i, chat(running.url, m).choices[0].message.content)
            )
            for i, m in enumerate(MESSAGES)
        ]
        for thread in threads:
            thread.start()
        worker = running.service.worker
        assert worker.wait_for(lambda: len(worker.requests()) == len(MESSAGES), WAIT)  # all four wait at the gate
        gate.open()  # admitted together, decoded together
        for thread in threads:
            thread.join(WAIT)
        assert metric(running.url, "specrun_batch_tokens_count") > 0
    assert [answers[i] for i in range(len(MESSAGES))] == alone


def test_a_seed_reproduces_a_sampled_answer(pair):
    # A fixed mode: under auto the drafts a step verifies depend on measured times, and with them
    # how the random draws fall (never the distribution of the answer).
    with served(pair, costs=FLAT_COSTS, draft_costs=CHEAP_DRAFTS, mode="draft", draft_max=3) as running:
        first = chat(running.url, "hello", temperature=1.0, seed=5).choices[0].message.content
        again = chat(running.url, "hello", temperature=1.0, seed=5).choices[0].message.content
        others = {chat(running.url, "hello", temperature=1.0, seed=s).choices[0].message.content for s in range(6, 10)}
    assert first == again and len(others | {first}) > 1


def test_a_negative_seed_is_a_seed_too(server):
    answer = chat(server.url, "hello", temperature=1.0, seed=-3, max_tokens=4)
    assert answer.usage.completion_tokens == 4


def test_a_stop_string_ends_the_answer_before_it(server):
    full = chat(server.url, "hello", max_tokens=24).choices[0].message.content
    stop = full[len(full) // 2 : len(full) // 2 + 2]
    stopped = chat(server.url, "hello", max_tokens=24, stop=[stop])
    assert stopped.choices[0].message.content == full[: full.index(stop)]
    assert stopped.choices[0].finish_reason == "stop"


def test_a_follow_up_turn_reads_only_what_is_new(server):
    first = chat(server.url, "the quick brown fox", max_tokens=8)
    messages = [
        {"role": "user", "content": "the quick brown fox"},
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "and then?"},
    ]
    second = client(server.url).chat.completions.create(model="tiny", messages=messages, max_tokens=8, temperature=0)
    timings = second.model_extra["timings"]
    assert timings["cache_n"] >= first.usage.prompt_tokens and timings["prompt_n"] < second.usage.prompt_tokens


def test_models_and_health(server):
    models = client(server.url).models.list()
    assert [m.id for m in models.data] == ["target"]
    health = httpx.get(server.url + "/health")
    assert health.status_code == 200 and health.json()["status"] == "ok" and health.json()["parallel"] == 4


# -- bad input and faults -------------------------------------------------------------------------


def post(url: str, body, headers: dict | None = None) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(
        url + "/v1/chat/completions", content=content, headers={"content-type": "application/json", **(headers or {})}
    )


def assert_openai_error(
    response: httpx.Response, status: int, param: str | None = None, code: str | None = None
) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert error["param"] == param
    if code is not None:
        assert error["code"] == code
    return error


def test_malformed_json_is_a_400(server):
    error = assert_openai_error(
        post(server.url, b'{"messages": [{"role": "user", "content": "hi"}'), 400, code="invalid_json"
    )
    assert error["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    "field, value",
    [
        ("temperature", "hot"),
        ("max_tokens", True),
        ("max_tokens", 2.5),
        ("messages", "hi"),
        ("stream", "yes"),
        ("n", 2),
        ("max_tokens", 0),
    ],
)
def test_a_field_of_the_wrong_type_or_range_is_a_400_naming_it(server, field, value):
    body = {"messages": [{"role": "user", "content": "hi"}], field: value}
    error = assert_openai_error(post(server.url, body), 400, param=field)
    assert field in error["message"]


def test_an_empty_message_list_is_a_400(server):
    assert_openai_error(post(server.url, {"messages": []}), 400, param="messages")
    assert_openai_error(post(server.url, {"messages": [{"role": "user"}]}), 400, param="messages.0.content")


def test_a_prompt_beyond_the_context_is_a_400(server):
    with pytest.raises(openai.BadRequestError) as caught:
        chat(server.url, "word " * 600)
    assert caught.value.status_code == 400 and caught.value.code == "context_length_exceeded"
    assert caught.value.body["param"] == "messages"
    with pytest.raises(openai.BadRequestError):
        client(server.url).completions.create(model="tiny", prompt="word " * 600)


def test_an_api_key_is_required_when_set(pair):
    with served(pair, costs=FLAT_COSTS, api_key="sesame") as running:
        with pytest.raises(openai.AuthenticationError):
            client(running.url, "wrong").models.list()
        missing = httpx.post(running.url + "/v1/chat/completions", json={"messages": []})
        assert_openai_error(missing, 401, code="invalid_api_key")  # checked before the body
        assert httpx.get(running.url + "/metrics").status_code == 401
        for path in ("/infill", "/tokenize", "/detokenize", "/apply-template"):  # outside /v1, guarded alike
            assert httpx.post(running.url + path, json={}).status_code == 401, path
        assert httpx.get(running.url + "/tokenizer_info").status_code == 401
        assert httpx.get(running.url + "/health").status_code == 200
        assert httpx.get(running.url + "/openapi.json").status_code == 200
        answer = client(running.url, "sesame").chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=4
        )
        assert answer.usage.completion_tokens == 4
        assert metric(running.url, "specrun_generated_tokens_total", {"Authorization": "Bearer sesame"}) == 4


def test_a_full_queue_is_a_503_with_retry_after(pair):
    gate = StepGate()
    with served(pair, gate=gate, costs=FLAT_COSTS, parallel=1, queue=0) as running:
        holder = threading.Thread(target=lambda: chat(running.url, "hello"))
        holder.start()
        worker = running.service.worker
        assert worker.wait_for(lambda: len(worker.requests()) == 1, WAIT)
        refused = post(running.url, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
        assert_openai_error(refused, 503, code="queue_full")
        assert int(refused.headers["retry-after"]) >= 1
        gate.open()
        holder.join(WAIT)
        assert not holder.is_alive()
        assert post(running.url, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}).status_code == 200
        assert metric(running.url, 'specrun_requests_total{endpoint="chat",outcome="rejected"}') == 1


def test_a_client_that_disconnects_mid_stream_frees_its_sequence(pair):
    gate = StepGate()
    with served(pair, gate=gate, costs=FLAT_COSTS, parallel=2) as running:
        worker = running.service.worker
        body = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 400, "stream": True}
        with httpx.Client(timeout=WAIT) as http:
            with http.stream("POST", running.url + "/v1/chat/completions", json=body) as response:
                lines = response.iter_lines()
                assert next(lines).startswith("data: ")  # the opening chunk: the request is in
                gate.allow(2)
                assert worker.wait_for(lambda: worker.metrics.steps >= 2, WAIT)
                assert worker.snapshot()["active"] == 1
        # The connection is closed: the server cancels the request, which leaves at the next step.
        assert worker.wait_for(lambda: all(h.cancelled for h in worker.requests()), WAIT)
        gate.allow(1)
        assert worker.wait_for(lambda: worker.snapshot()["active"] == 0, WAIT)
        assert not running.service.engine.slots.busy
        assert metric(running.url, 'specrun_requests_total{endpoint="chat",outcome="cancelled"}') == 1
        assert metric(running.url, "specrun_generated_tokens_total") < 400


def test_draining_fails_the_waiting_and_cancels_the_active_when_time_is_up(pair):
    gate = StepGate()
    with served(pair, gate=gate, costs=FLAT_COSTS, parallel=1, queue=4) as running:
        worker = running.service.worker
        results: dict[str, httpx.Response] = {}
        body = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 400}
        threads = [
            threading.Thread(target=lambda n=n: results.__setitem__(n, post(running.url, body)))
            for n in ("first", "second")
        ]
        threads[0].start()
        assert worker.wait_for(lambda: len(worker.requests()) == 1, WAIT)
        gate.allow(1)  # the first is admitted and takes a step
        assert worker.wait_for(lambda: worker.metrics.steps >= 1, WAIT)
        threads[1].start()
        assert worker.wait_for(lambda: len(worker.requests()) == 2, WAIT)
        worker.drain(0.0)  # no grace: the waiting one fails now, the active one at the next step
        gate.open()
        for thread in threads:
            thread.join(WAIT)
        assert_openai_error(results["second"], 503, code="shutting_down")
        assert_openai_error(results["first"], 503, code="shutting_down")
        assert_openai_error(post(running.url, body), 503, code="shutting_down")
        assert httpx.get(running.url + "/health").status_code == 503


def test_draining_lets_active_requests_finish_within_the_grace(pair):
    gate = StepGate()
    with served(pair, gate=gate, costs=FLAT_COSTS, parallel=1) as running:
        worker = running.service.worker
        results: dict[str, httpx.Response] = {}
        body = {
            "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": 12,
            "temperature": 0,
        }  # greedy: no sampled end token
        thread = threading.Thread(target=lambda: results.__setitem__("answer", post(running.url, body)))
        thread.start()
        assert worker.wait_for(lambda: len(worker.requests()) == 1, WAIT)
        gate.allow(1)
        assert worker.wait_for(lambda: worker.metrics.steps >= 1, WAIT)
        worker.drain(3600.0)
        assert_openai_error(post(running.url, body), 503, code="shutting_down")  # no new requests
        gate.open()
        thread.join(WAIT)
        assert results["answer"].status_code == 200
        assert results["answer"].json()["usage"]["completion_tokens"] == 12


def test_return_tokens_gives_the_ids_behind_the_text(server, pair):
    whole = chat(server.url, "hello", max_tokens=12, extra_body={"return_tokens": True})
    tokens = whole.choices[0].model_extra["tokens"]
    assert len(tokens) == 12 and whole.choices[0].message.content == b"".join(
        pair.target_model.piece(t) for t in tokens
    ).decode("utf-8", "replace")
    _, chunks = streamed(server.url, "hello", max_tokens=12, extra_body={"return_tokens": True})
    assert [t for c in chunks if c.choices for t in (c.choices[0].model_extra or {}).get("tokens", [])] == tokens
    assert "tokens" not in chat(server.url, "hello", max_tokens=4).choices[0].model_extra


@pytest.mark.parametrize("mode", ["auto", "ngram"])
def test_the_server_clamps_k_to_a_hybrid_targets_rewind_limit(hybrid_target, mode, monkeypatch):
    """A recurrent cache takes back only as many tokens as it keeps snapshots: the server verifies no
    more per step than that, whatever --draft-max says, as run and chat do (one Policy factory)."""
    from specrun import defaults
    from specrun.engine.step import Engine

    drafted = []
    accept = Engine._accept

    def counting(self, state, choice, draft, *rest):
        drafted.append(len(draft.tokens))
        return accept(self, state, choice, draft, *rest)

    monkeypatch.setattr(Engine, "_accept", counting)
    pair = load_pair(hybrid_target, None)
    try:
        with served(pair, costs=FLAT_COSTS, mode=mode, draft_max=31) as running:
            service = running.service
            limit = service.session.max_rewind
            assert limit == defaults.RECURRENT_K_MAX < 31
            assert service.engine.policy.k_max == limit
            assert mode != "auto" or service.controller.k_max == limit
            answer = client(running.url).completions.create(
                model="tiny", prompt="abc abc abc abc abc abc abc abc", max_tokens=48, temperature=0
            )
        assert answer.usage.completion_tokens > 0 and drafted and max(drafted) <= limit
    finally:
        pair.close()
