"""Text and fields, on a real server on loopback: unencodable text is a 400 naming its field, NUL
and every other code point reach the tokenizer whole, fields the server cannot honour are refused
by name unless neutral, unknown fields are refused, numbers are bounded, and a prompt too long in
bytes is refused before it is tokenized."""

from __future__ import annotations

import json

import httpx
import pytest
from serve_helpers import FLAT_COSTS, WAIT, load_pair, served

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def pair(tiny_target):
    loaded = load_pair(tiny_target, None)
    yield loaded
    loaded.close()


@pytest.fixture(scope="module")
def server(pair):
    with served(pair, costs=FLAT_COSTS, mode="off") as running:
        yield running


def post(url: str, path: str, raw: bytes | dict) -> httpx.Response:
    content = raw if isinstance(raw, bytes) else json.dumps(raw).encode()
    return httpx.post(url + path, content=content, headers={"content-type": "application/json"}, timeout=WAIT)


def refused(response: httpx.Response, param: str, code: str | None = None, *, named: bool = True) -> dict:
    """A 400 whose `param` is `param` (and, when `named`, whose message says it)."""
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and (not named or param in error["message"]), error
    if code is not None:
        assert error["code"] == code, error
    return error


# -- text ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path, body, param",
    [
        (CHAT, '{"messages": [{"role": "user", "content": "a\\ud800b"}], "max_tokens": 2}', "messages.0.content"),
        (
            CHAT,
            '{"messages": [{"role": "user", "content": [{"type": "text", "text": "\\udfff"}]}], "max_tokens": 2}',
            "messages.0.content.0.text",
        ),
        (CHAT, '{"messages": [{"role": "user", "content": "hi"}], "stop": "\\ud800", "max_tokens": 2}', "stop"),
        (
            CHAT,
            '{"messages": [{"role": "user", "content": "hi"}], "stop": ["x", "\\ud800"], "max_tokens": 2}',
            "stop.1",
        ),
        (CHAT, '{"messages": [{"role": "user", "content": "hi"}], "model": "\\ud800", "max_tokens": 2}', "model"),
        (
            CHAT,
            '{"messages": [{"role": "user", "content": "hi"}], '
            '"chat_template_kwargs": {"k": ["\\ud800"]}, "max_tokens": 2}',
            "chat_template_kwargs",
        ),
        (
            CHAT,
            '{"messages": [{"role": "user", "content": "hi"}], "metadata": {"\\udc00": "v"}, "max_tokens": 2}',
            "metadata",
        ),
        (
            CHAT,
            '{"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"\\ud800": 0}, "max_tokens": 2}',
            "logit_bias",
        ),
        (
            CHAT,
            '{"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"1-\\ud800": 0}, "max_tokens": 2}',
            "logit_bias",
        ),
        (COMPLETIONS, '{"prompt": "x\\ud83d", "max_tokens": 2}', "prompt"),
        (COMPLETIONS, '{"prompt": ["\\ud83d"], "max_tokens": 2}', "prompt.0"),
    ],
)
def test_a_lone_surrogate_is_a_400_naming_its_field(server, path, body, param):
    error = refused(post(server.url, path, body.encode()), param, "unencodable_text")
    assert "surrogate" in error["message"]


def test_a_surrogate_sent_as_utf_8_bytes_is_refused_too(server):
    body = b'{"prompt": "a\xed\xa0\x80b", "max_tokens": 2}'  # what json.loads reads back as "\ud800"
    refused(post(server.url, COMPLETIONS, body), "prompt", "unencodable_text")


def test_bytes_that_are_not_utf_8_are_a_400(server):
    response = post(server.url, COMPLETIONS, b'{"prompt": "a\xffb", "max_tokens": 2}')
    assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_request_error"


def test_nul_and_every_plane_reach_the_tokenizer_whole(server, pair, monkeypatch):
    seen: list[tuple[str, list[int]]] = []
    model = pair.target_model
    real = model.tokenize

    def recording(text, **kw):
        tokens = real(text, **kw)
        seen.append((text, tokens))
        return tokens

    monkeypatch.setattr(model, "tokenize", recording)
    for prompt in ("a\u0000b", "\u0000", "z\U0001f600\u00e9\u0001\u007f\ufeff\U0010ffff"):
        seen.clear()
        answer = post(server.url, COMPLETIONS, {"prompt": prompt, "max_tokens": 2, "temperature": 0})
        assert answer.status_code == 200, answer.text
        [(text, tokens)] = seen
        assert text == prompt
        assert b"".join(model.piece(t) for t in tokens) == prompt.encode("utf-8")  # nothing cut at the NUL
        assert answer.json()["usage"]["prompt_tokens"] == len(tokens)


# -- fields --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [
        ("logit_bias", {"15": 5}),
        ("presence_penalty", 0.5),
        ("frequency_penalty", -1),
        ("functions", [{"name": "f"}]),
        ("function_call", {"name": "f"}),
        ("audio", {"voice": "alloy", "format": "wav"}),
        ("modalities", ["text", "audio"]),
        ("reasoning_effort", "high"),
        ("verbosity", "low"),
        ("web_search_options", {}),
    ],
)
def test_a_chat_field_the_server_cannot_honour_is_a_400_naming_it(server, field, value):
    error = refused(
        post(server.url, CHAT, {"messages": HI, "max_tokens": 2, field: value}), field, "unsupported_parameter"
    )
    assert "not supported" in error["message"]


@pytest.mark.parametrize(
    "field, value",
    [
        ("best_of", 3),
        ("logit_bias", {"1": -100}),
        ("presence_penalty", 1.0),
    ],
)
def test_a_completion_field_the_server_cannot_honour_is_a_400_naming_it(server, field, value):
    refused(
        post(server.url, COMPLETIONS, {"prompt": "abc", "max_tokens": 2, field: value}), field, "unsupported_parameter"
    )


@pytest.mark.parametrize(
    "path, body, field",
    [
        (CHAT, {"messages": HI, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        (CHAT, {"messages": HI, "top_logprobs": 3}, None),  # top_logprobs needs logprobs: true
        (CHAT, {"messages": HI, "logprobs": 1}, "logprobs"),  # a boolean, strictly
        (COMPLETIONS, {"prompt": "abc", "logprobs": 21}, "logprobs"),
        (COMPLETIONS, {"prompt": "abc", "logprobs": True}, "logprobs"),
    ],
)
def test_log_probabilities_beyond_their_bounds_are_a_400(server, path, body, field):
    response = post(server.url, path, {**body, "max_tokens": 2})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    if field is None:
        assert "top_logprobs needs logprobs" in error["message"], error
    else:
        assert error["param"] == field, error


def test_neutral_values_and_harmless_fields_are_accepted(server):
    chat = {
        "messages": HI,
        "max_tokens": 2,
        "logit_bias": {},
        "response_format": {"type": "text"},
        "presence_penalty": 0,
        "frequency_penalty": 0.0,
        "tools": [],
        "tool_choice": "none",
        "logprobs": False,
        "top_logprobs": 0,
        "functions": [],
        "function_call": "auto",
        "modalities": ["text"],
        "parallel_tool_calls": True,
        "verbosity": "medium",
        "prediction": {"type": "content", "content": "hello"},
        "user": "u1",
        "metadata": {"k": "v"},
        "store": False,
        "service_tier": "auto",
        "prompt_cache_key": "p",
        "safety_identifier": "s",
        "n": 1,
        "cache_prompt": True,
        "stream_options": None,
        "chat_template_kwargs": {"enable_thinking": False},
        "audio": None,
    }
    assert post(server.url, CHAT, chat).status_code == 200
    completion = {
        "prompt": "abc",
        "max_tokens": 2,
        "echo": False,
        "logprobs": 0,
        "suffix": "",
        "best_of": 1,
        "logit_bias": {"5": 0},
        "presence_penalty": 0,
        "user": "u1",
        "response_format": {"type": "text"},
        "grammar": "",
    }
    assert post(server.url, COMPLETIONS, completion).status_code == 200


UNKNOWN = [
    (CHAT, {"messages": HI, "max_tokens": 2, "mirostat": 2}, "mirostat"),
    (CHAT, {"messages": HI, "max_tokens": 2, "repeat_penalty": 1.3}, "repeat_penalty"),
    (CHAT, {"messages": [{"role": "user", "content": "hi", "weight": 2}], "max_tokens": 2}, "messages.*.weight"),
    (COMPLETIONS, {"prompt": "abc", "max_tokens": 2, "n_probs": 3}, "n_probs"),
    (
        CHAT,
        {"messages": HI, "max_tokens": 2, "response_format": {"type": "json_object", "schema": {}}},
        "response_format.schema",
    ),
]


def test_an_unknown_field_is_ignored_and_named_once_in_the_log(pair):
    said: list[str] = []
    with served(pair, costs=FLAT_COSTS, mode="off", warn=said.append) as running:
        for path, body, name in UNKNOWN:
            for _ in range(2):
                response = post(running.url, path, body)
                assert response.status_code == 200, response.text
            named = [line for line in said if name in line.split(": ")[-1].split(", ")]
            assert len(named) == 1 and path in named[0], said


def test_each_answered_request_is_one_line_in_the_log_unless_turned_off(pair):
    for log_requests in (True, False):
        said: list[str] = []
        with served(pair, costs=FLAT_COSTS, mode="off", warn=said.append, log_requests=log_requests) as running:
            for _ in range(2):
                answer = post(running.url, CHAT, {"messages": HI, "max_tokens": 3}).json()
        lines = [line for line in said if line.startswith("specrun serve: chat · prompt")]
        if not log_requests:
            assert lines == [], said
            continue
        assert len(lines) == 2, said
        timings = answer["timings"]
        assert f"prompt {answer['usage']['prompt_tokens']} tokens ({timings['cache_n']} cached, " in lines[1]
        assert f"· {timings['predicted_n']} tokens in " in lines[1]


def test_a_known_field_keeps_its_strict_type(server):
    refused(post(server.url, CHAT, {"messages": HI, "max_tokens": "2"}), "max_tokens")
    refused(post(server.url, CHAT, {"messages": [{"role": "user", "content": 5}]}), "messages.0.content")


def test_long_stop_lists_are_taken_and_bounded(server):
    nine = [f"<stop{i}>" for i in range(9)]
    assert post(server.url, CHAT, {"messages": HI, "max_tokens": 2, "stop": nine}).status_code == 200
    assert post(server.url, COMPLETIONS, {"prompt": "abc", "max_tokens": 2, "stop": nine * 10}).status_code == 200
    refused(post(server.url, CHAT, {"messages": HI, "stop": ["x"] * 129}), "stop", named=False)
    refused(post(server.url, CHAT, {"messages": HI, "stop": ["x" * 9000, "y" * 9000]}), "stop", named=False)
    refused(post(server.url, CHAT, {"messages": HI, "stop": "x" * 20000}), "stop", named=False)


def test_an_assistant_turn_may_carry_its_reasoning(server):
    for key in ("reasoning_content", "reasoning"):
        history = [*HI, {"role": "assistant", "content": "hello", key: "they greet me"}, *HI]
        assert post(server.url, CHAT, {"messages": history, "max_tokens": 2}).status_code == 200


@pytest.mark.parametrize(
    "field, value",
    [
        ("top_k", 2**31),
        ("top_k", 10**40),
        ("top_k", -1),
        ("temperature", 1e308),
        ("top_p", 1.5),
        ("min_p", -0.1),
        ("n", 10**30),
        ("max_tokens", 0),
    ],
)
def test_every_number_is_bounded(server, field, value):
    refused(post(server.url, CHAT, {"messages": HI, "max_tokens": 2, field: value}), field)


def test_infinity_and_nan_are_refused(server):
    for literal in ("Infinity", "NaN", "1e400"):
        body = f'{{"messages": [{{"role": "user", "content": "hi"}}], "temperature": {literal}}}'.encode()
        refused(post(server.url, CHAT, body), "temperature")


def test_a_prompt_too_long_in_bytes_is_refused_before_it_is_tokenized(server, pair, monkeypatch):
    calls = []
    model = pair.target_model
    real = model.tokenize
    monkeypatch.setattr(model, "tokenize", lambda text, **kw: calls.append(len(text)) or real(text, **kw))
    limit = server.service.max_prompt_bytes
    assert limit == 512 * max(model.longest_piece(), 4)
    error = refused(
        post(server.url, COMPLETIONS, {"prompt": "a" * (limit + 1)}), "prompt", "context_length_exceeded", named=False
    )
    assert str(limit) in error["message"]
    too_long = {"messages": [{"role": "user", "content": "é" * (limit // 2 + 1)}]}  # 2 bytes a character
    refused(post(server.url, CHAT, too_long), "messages", "context_length_exceeded", named=False)
    assert calls == []
    # within the byte bound, tokenized, and then too many tokens
    refused(
        post(server.url, COMPLETIONS, {"prompt": "a" * (limit // 2)}), "prompt", "context_length_exceeded", named=False
    )
    assert calls == [limit // 2]


def test_the_longest_piece_counts_control_tokens(pair):
    model = pair.target_model
    longest = max(len(model.piece(t)) for t in range(model.n_vocab))
    assert model.longest_piece() >= max(longest, len("<|im_start|>"))
