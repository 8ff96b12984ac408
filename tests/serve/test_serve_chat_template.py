"""The server's chat prompts: the model's own template with the request's chat_template_kwargs, a
thinking model's reasoning in `reasoning_content` (whole and streamed), template errors as 400s,
and message content reaching the model intact. The `thinker` models answer a known text
(conftest: THINKER_ANSWER), generated for real by llama.cpp."""

from __future__ import annotations

import json

import httpx
import pytest
from conftest import THINKER_CONTENT, THINKER_REASONING
from serve_helpers import WAIT, load_pair, served
from tiny_models import greedy_tokens, write_tiny_gguf

HI = [{"role": "user", "content": "hi"}]


def post(url: str, **body) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json={"max_tokens": 20, "temperature": 0, **body}, timeout=WAIT)


def stream(url: str, **body) -> list[dict]:
    chunks = []
    with httpx.stream(
        "POST",
        url + "/v1/chat/completions",
        json={"max_tokens": 20, "temperature": 0, "stream": True, **body},
        timeout=WAIT,
    ) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[len("data: ") :]))
    return chunks


@pytest.fixture(scope="module")
def thinking_server(thinker):
    pair = load_pair(thinker, None)
    with served(pair, parallel=2) as running:
        yield running, pair
    pair.close()


@pytest.fixture(scope="module")
def opening_server(opening_thinker):
    pair = load_pair(opening_thinker, None)
    with served(pair, parallel=1) as running:
        yield running
    pair.close()


def test_a_whole_answer_has_its_reasoning_apart(thinking_server):
    server, _ = thinking_server
    response = post(server.url, messages=HI)
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    assert choice["message"] == {
        "role": "assistant",
        "content": THINKER_CONTENT,
        "reasoning_content": THINKER_REASONING,
    }
    assert choice["finish_reason"] == "stop"


def test_a_streamed_answer_sends_reasoning_deltas_then_content_deltas(thinking_server):
    server, _ = thinking_server
    # Without the pool, which holds the same answer from the test before and would draft it whole.
    chunks = stream(server.url, messages=HI, lookup_pool=False)
    deltas = [c["choices"][0]["delta"] for c in chunks if c.get("choices")]
    reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
    content = "".join(d.get("content", "") for d in deltas)
    assert (reasoning, content) == (THINKER_REASONING, THINKER_CONTENT)
    kinds = [key for d in deltas for key in ("reasoning_content", "content") if d.get(key)]
    assert kinds == sorted(kinds, key=lambda k: k != "reasoning_content") and len(kinds) > 2  # streamed piece by piece
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_chat_template_kwargs_reach_the_template(thinking_server):
    server, pair = thinking_server
    usage = {}
    for kwargs in (None, {"enable_thinking": True}, {"enable_thinking": False}):
        response = post(server.url, messages=HI, **({"chat_template_kwargs": kwargs} if kwargs is not None else {}))
        assert response.status_code == 200, response.text
        usage[json.dumps(kwargs)] = response.json()["usage"]["prompt_tokens"]
    assert usage["null"] == usage['{"enable_thinking": true}'] == len(pair.tokens_for_messages(HI))
    assert (
        usage['{"enable_thinking": false}']
        == len(pair.tokens_for_messages(HI, {"enable_thinking": False}))
        > usage["null"]
    )


def test_an_opening_template_answer_starts_inside_the_reasoning(opening_server):
    message = post(opening_server.url, messages=HI).json()["choices"][0]["message"]
    assert (message["content"], message["reasoning_content"]) == (THINKER_CONTENT, THINKER_REASONING)
    deltas = [c["choices"][0]["delta"] for c in stream(opening_server.url, messages=HI) if c.get("choices")]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == THINKER_REASONING
    assert "".join(d.get("content", "") for d in deltas) == THINKER_CONTENT


def test_bad_chat_template_kwargs_are_400s(thinking_server):
    server, _ = thinking_server
    for kwargs, param in (({"messages": []}, "chat_template_kwargs"), (["enable_thinking"], "chat_template_kwargs")):
        response = post(server.url, messages=HI, chat_template_kwargs=kwargs)
        assert response.status_code == 400, response.text
        assert response.json()["error"]["param"] == param


@pytest.fixture(scope="module")
def tiny_server(tiny_target, tmp_path_factory):
    pair = load_pair(tiny_target, None)
    with served(pair, parallel=1) as running:
        yield running, pair
    pair.close()


def test_a_model_without_think_tags_has_no_reasoning_field(tiny_server):
    server, _ = tiny_server
    message = post(server.url, messages=HI, max_tokens=4).json()["choices"][0]["message"]
    assert set(message) == {"role", "content"}


def test_nul_and_every_code_point_reach_the_model_intact(tiny_server, tiny_target):
    """The prompt the server feeds is the rendered conversation tokenized, NUL and all: its length
    and the greedy answer to it (computed straight through llama.cpp from those ids) match."""
    from specrun.engine.model import Model
    from specrun.models.chat_template import ChatTemplate

    server, _ = tiny_server
    content = "a\u0000b \u2028 \U0001f327\ufe0f \x7f \U0010ffff é"
    messages = [{"role": "user", "content": content}]
    model = Model(tiny_target)
    try:
        rendered = ChatTemplate(model.chat_template()).render(messages)
        ids = model.tokenize(rendered, add_special=True, parse_special=True)
        cut = model.tokenize(rendered.split("\0")[0], add_special=True, parse_special=True)
        nul = model.tokenize("\0", add_special=False, parse_special=False)
    finally:
        model.close()
    assert "\0" in rendered and len(nul) == 1 and nul[0] in ids and len(cut) < len(ids)
    expected = greedy_tokens(tiny_target, [ids], 12)[0]
    response = post(server.url, messages=messages, max_tokens=12, return_tokens=True)
    assert response.status_code == 200, response.text
    doc = response.json()
    assert doc["usage"]["prompt_tokens"] == len(ids)
    assert doc["choices"][0]["tokens"] == expected


def test_a_template_that_raises_is_a_400_naming_the_model_and_its_message(tmp_path):
    template = (
        "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
        "{{ messages[0]['content'] }}"
    )
    path = write_tiny_gguf(tmp_path / "strict.gguf", chat_template=template)
    pair = load_pair(path, None)
    try:
        with served(pair, parallel=1) as server:
            response = post(server.url, messages=[{"role": "system", "content": "x"}, {"role": "user", "content": "y"}])
            assert response.status_code == 400
            error = response.json()["error"]
            assert "strict.gguf" in error["message"] and "System role not supported" in error["message"]
            assert error["param"] == "messages" and "\n" not in error["message"]
            assert post(server.url, messages=HI, max_tokens=2).status_code == 200
    finally:
        pair.close()
