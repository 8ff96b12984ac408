"""Anthropic's Messages API on a real server on loopback serving tiny models, through the official
`anthropic` SDK: the greedy answer of /v1/chat/completions, whole and streamed (Anthropic's events in
their order), tool_use blocks whose input validates and whose results go back, stop sequences,
count_tokens equal to what the engine reads, Claude Code's requests (its attribution line, which
must not break the prompt cache, system turns, `?beta=true`, fields it sends), thinking blocks from
a thinking template, and every refusal in Anthropic's error envelope.

The SDK sends no temperature of its own: greedy answers ask for it in `extra_body`."""

from __future__ import annotations

import json
import re

import anthropic
import httpx
import jsonschema
import pytest
from conftest import THINKER_CONTENT, THINKER_REASONING
from serve_helpers import FLAT_COSTS, WAIT, load_pair, served

MESSAGES = "/v1/messages"
COUNT = "/v1/messages/count_tokens"
CHAT = "/v1/chat/completions"
GREEDY = {"temperature": 0}
ASK = [{"role": "user", "content": "How warm is it in Paris?"}]
WEATHER = {
    "name": "get_weather",
    "description": "Current weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"],
        "additionalProperties": False,
    },
}
READ_FILE = {
    "name": "read_file",
    "input_schema": {
        "type": "object",
        "properties": {"path": {"type": "string", "maxLength": 20}},
        "required": ["path"],
        "additionalProperties": False,
    },
}
TOOLS = [WEATHER, READ_FILE]
SCHEMAS = {tool["name"]: tool["input_schema"] for tool in TOOLS}
# Claude Code's first system block: an attribution line whose `cch` changes with every request.
BILLING = "x-anthropic-billing-header: cc_version=2.1.37.a1b; cc_entrypoint=cli; cch={cch};"
AGENT = (
    "You are Claude Code, an interactive command line tool that helps users with software engineering "
    "tasks. Use the instructions below and the tools available to you to assist the user. Be concise, "
    "direct and to the point; answer in fewer than four lines unless the user asks for detail."
)


@pytest.fixture(scope="module")
def pair(tiny_target, tiny_draft):
    loaded = load_pair(tiny_target, tiny_draft)
    yield loaded
    loaded.close()


@pytest.fixture(scope="module")
def said() -> list[str]:
    """What the shared server logged."""
    return []


@pytest.fixture(scope="module")
def server(pair, said):
    with served(pair, costs=FLAT_COSTS, mode="ngram", warn=said.append) as running:
        yield running


@pytest.fixture(scope="module")
def guarded(pair):
    """A server that wants an API key and takes bodies of 4 KiB at most."""
    with served(pair, costs=FLAT_COSTS, mode="off", api_key="k", max_body=4096) as running:
        yield running


@pytest.fixture(scope="module")
def thinking(thinker):
    """A server on the `thinker` model (Qwen3's template): it answers THINKER_REASONING, then THINKER_CONTENT."""
    loaded = load_pair(thinker, None)
    with served(loaded, costs=FLAT_COSTS, parallel=1) as running:
        yield running
    loaded.close()


def client(url: str, key: str = "x") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=key, max_retries=0, timeout=WAIT)


def create(url: str, **fields) -> anthropic.types.Message:
    """A greedy Message for ASK (fields override)."""
    body = {"model": "tiny", "max_tokens": 8, "messages": ASK, **fields}
    body["extra_body"] = {**GREEDY, **body.get("extra_body", {})}
    return client(url).messages.create(**body)


def text_of(message) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


def read(message) -> int:
    """The prompt tokens the engine read for `message`, from the cache or anew."""
    return message.usage.input_tokens + message.usage.cache_read_input_tokens


def post(url: str, path: str, body: dict | bytes, **headers) -> httpx.Response:
    if isinstance(body, bytes):
        return httpx.post(
            url + path, content=body, headers={"content-type": "application/json", **headers}, timeout=WAIT
        )
    return httpx.post(url + path, json=body, headers=headers, timeout=WAIT)


def events(url: str, body: dict, path: str = MESSAGES) -> list[tuple[str, dict]]:
    """A streamed answer's server-sent events as sent: (event name, data)."""
    out = []
    with httpx.stream("POST", url + path, json={**body, "stream": True}, timeout=WAIT) as response:
        assert response.status_code == 200, response.read()
        name = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: "):
                out.append((name, json.loads(line[len("data: ") :])))
    return out


def assert_anthropic_error(response: httpx.Response, status: int, kind: str, says: str = "") -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert body.keys() == {"type", "error"} and body["type"] == "error", body
    assert body["error"].keys() == {"type", "message"} and body["error"]["type"] == kind, body
    assert says in body["error"]["message"], body


# -- text ----------------------------------------------------------------------------------------


def test_a_text_answer_is_the_chat_endpoints_greedy_answer(server):
    message = create(server.url)
    chat = post(server.url, CHAT, {"messages": ASK, "max_tokens": 8, **GREEDY}).json()
    assert message.type == "message" and message.role == "assistant" and message.model == "tiny"
    assert message.id.startswith("msg_")
    assert [block.type for block in message.content] == ["text"]
    assert text_of(message) == chat["choices"][0]["message"]["content"] and text_of(message)
    assert message.stop_reason == "max_tokens" and message.stop_sequence is None
    assert message.usage.output_tokens == 8 == chat["usage"]["completion_tokens"]
    assert read(message) == chat["usage"]["prompt_tokens"]
    assert message.usage.cache_creation_input_tokens == 0


def test_a_streamed_answer_is_the_whole_one_in_anthropics_events(server):
    whole = create(server.url)
    with client(server.url).messages.stream(model="tiny", max_tokens=8, messages=ASK, extra_body=GREEDY) as stream:
        texts = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(texts) == text_of(final) == text_of(whole)
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 8 and read(final) == read(whole)

    sent = events(server.url, {"model": "tiny", "max_tokens": 8, "messages": ASK, **GREEDY})
    assert all(name == data["type"] for name, data in sent)
    names = [name for name, _ in sent if name != "ping"]
    assert names[:2] == ["message_start", "content_block_start"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(names[2:-3]) == {"content_block_delta"}
    start = sent[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["id"].startswith("msg_")
    deltas = [data["delta"] for name, data in sent if name == "content_block_delta"]
    assert {d["type"] for d in deltas} == {"text_delta"} and "".join(d["text"] for d in deltas) == text_of(whole)
    end = next(data for name, data in sent if name == "message_delta")
    assert end["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert end["usage"]["output_tokens"] == 8


def test_a_stop_sequence_ends_the_answer_and_is_named(server):
    text = text_of(create(server.url, max_tokens=24))
    found = re.search(r"(?<=.)[^\ufffd\x00-\x1f]{2}", text, re.DOTALL)  # two whole characters, not at the start
    assert found, text
    stop = found.group(0)
    before = text[: text.index(stop)]
    whole = create(server.url, max_tokens=24, stop_sequences=[stop])
    with client(server.url).messages.stream(
        model="tiny", max_tokens=24, messages=ASK, stop_sequences=[stop], extra_body=GREEDY
    ) as stream:
        streamed = stream.get_final_message()
    for message in (whole, streamed):
        assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", stop)
        assert text_of(message) == before


# -- tools ---------------------------------------------------------------------------------------


def test_a_required_call_is_a_tool_use_whose_input_validates_and_its_result_goes_back(server):
    message = create(server.url, max_tokens=96, tools=TOOLS, tool_choice={"type": "any"})
    assert message.stop_reason == "tool_use", message
    calls = [block for block in message.content if block.type == "tool_use"]
    assert calls and calls == message.content[-len(calls) :]
    for call in calls:
        assert call.id.startswith("toolu_") and isinstance(call.input, dict)
        jsonschema.validate(call.input, SCHEMAS[call.name])

    history = [
        *ASK,
        {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in message.content]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": call.id, "content": [{"type": "text", "text": "21 degrees"}]}
                for call in calls
            ],
        },
    ]
    answer = create(server.url, messages=history, tools=TOOLS)
    assert answer.stop_reason == "max_tokens" and text_of(answer)
    assert read(answer) > read(message)  # the call and its result were read


def test_a_named_tool_is_the_one_called(server):
    message = create(server.url, max_tokens=96, tools=TOOLS, tool_choice={"type": "tool", "name": "read_file"})
    assert {block.name for block in message.content if block.type == "tool_use"} == {"read_file"}
    assert message.stop_reason == "tool_use"


def test_the_streamed_call_is_the_whole_one_as_the_sdk_assembles_it(server):
    fields = {"model": "tiny", "max_tokens": 96, "messages": ASK, "tools": TOOLS, "tool_choice": {"type": "any"}}
    whole = client(server.url).messages.create(**fields, extra_body=GREEDY)
    with client(server.url).messages.stream(**fields, extra_body=GREEDY) as stream:
        streamed = stream.get_final_message()
    assert streamed.stop_reason == "tool_use"
    assert [(b.type, b.name, b.input) for b in streamed.content] == [(b.type, b.name, b.input) for b in whole.content]
    sent = events(server.url, {**fields, **GREEDY})
    assert {data["delta"]["type"] for name, data in sent if name == "content_block_delta"} == {"input_json_delta"}


# -- counting ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"system": "Be brief.", "tools": TOOLS, "tool_choice": {"type": "any"}},
        {
            "system": [{"type": "text", "text": "Be brief."}],
            "messages": [{"role": "system", "content": "Rules."}, *ASK],
        },
    ],
    ids=["plain", "tools", "system-turn"],
)
def test_count_tokens_is_what_the_engine_reads(server, fields):
    fields = {"messages": ASK, **fields}
    counted = client(server.url).messages.count_tokens(model="tiny", **fields)
    assert counted.input_tokens == read(create(server.url, max_tokens=1, **fields)) > 0


def test_count_tokens_counts_a_conversation_longer_than_the_context(server, pair):
    """What count_tokens is for: telling a client that its conversation outgrew the context (512
    tokens here) before it sends it. The count is not the engine's business, so no context bounds it."""
    long = [{"role": "user", "content": "word " * 600}]
    counted = post(server.url, COUNT, {"model": "tiny", "messages": long})
    assert counted.status_code == 200, counted.text
    assert counted.json() == {"input_tokens": len(pair.tokens_for_messages(long))}
    assert counted.json()["input_tokens"] > pair.config.ctx_size


# -- Claude Code ---------------------------------------------------------------------------------


def claude_code(cch: str) -> dict:
    """A Claude Code request's conversation, its attribution line carrying `cch`."""
    return {
        "system": [
            {"type": "text", "text": BILLING.format(cch=cch)},
            {"type": "text", "text": AGENT, "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [
            {"role": "system", "content": "Working directory: /work/app"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "<system-reminder>Today is Monday.</system-reminder>"},
                    {"type": "text", "text": "fix the failing test", "cache_control": {"type": "ephemeral"}},
                ],
            },
            {"role": "assistant", "content": "Which test?"},
            {"role": "system", "content": "The user switched to plan mode."},
            {"role": "user", "content": "the parser's"},
        ],
    }


CLAUDE_CODE_FIELDS = {
    "metadata": {"user_id": "user_0123abcd_account_9f8e_session_7d6c"},
    "thinking": {"type": "adaptive"},
    "extra_body": {
        **GREEDY,
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "high"},
    },
    "extra_query": {"beta": "true"},
}


def test_claude_codes_attribution_line_changes_neither_the_count_nor_the_prompt_cache(server, said):
    sdk = client(server.url)
    counts = {
        cch: sdk.messages.count_tokens(model="tiny", **claude_code(cch)).input_tokens for cch in ("abcde", "f0f0f")
    }
    without = claude_code("")
    without["system"] = without["system"][1:]
    assert counts["abcde"] == counts["f0f0f"] == sdk.messages.count_tokens(model="tiny", **without).input_tokens

    first = sdk.messages.create(model="tiny", max_tokens=4, **claude_code("abcde"), **CLAUDE_CODE_FIELDS)
    second = sdk.messages.create(model="tiny", max_tokens=4, **claude_code("f0f0f"), **CLAUDE_CODE_FIELDS)
    count = counts["abcde"]
    assert read(first) == read(second) == count
    assert second.usage.cache_read_input_tokens >= count - 2  # all but the last token or two, not the header's prefix
    assert text_of(first) == text_of(second)
    noted = " ".join(line for line in said if "ignores fields" in line)
    for field in ("metadata", "thinking", "context_management", "output_config", "beta"):
        assert field not in noted  # accepted, not unknown


def test_a_beta_query_and_raw_claude_code_bodies_are_answered(server):
    body = {"model": "claude-sonnet-4-5", "max_tokens": 4, **claude_code("12345"), **GREEDY}
    body.update(metadata=CLAUDE_CODE_FIELDS["metadata"], thinking={"type": "adaptive"}, stream=False)
    body.update(CLAUDE_CODE_FIELDS["extra_body"])
    headers = {"anthropic-version": "2023-06-01", "anthropic-beta": "claude-code-20250219", "x-api-key": "x"}
    answered = post(server.url, MESSAGES + "?beta=true", body, **headers)
    assert answered.status_code == 200, answered.text
    assert answered.json()["model"] == "claude-sonnet-4-5" and answered.json()["usage"]["output_tokens"] == 4
    count = {k: v for k, v in body.items() if k not in ("max_tokens", "metadata", "stream", "temperature")}
    counted = post(server.url, COUNT + "?beta=true", count, **headers)
    assert counted.status_code == 200, counted.text
    usage = answered.json()["usage"]
    assert counted.json() == {"input_tokens": usage["input_tokens"] + usage["cache_read_input_tokens"]}


# -- refusals ------------------------------------------------------------------------------------


def deep(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema}
    return schema


PICTURE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
BASE = {"model": "tiny", "max_tokens": 4, "messages": ASK}
DEEP_TOOL = {"name": "deep", "input_schema": {"type": "object", "properties": {"x": deep(40)}}}
SEEN = [{"role": "user", "content": [{"type": "text", "text": "see"}, PICTURE]}]
NESTED = b'{"model": "tiny", "max_tokens": 4, "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"


@pytest.mark.parametrize(
    "path, body, says",
    [
        pytest.param(MESSAGES, {"model": "tiny", "messages": ASK}, "max_tokens", id="no-max-tokens"),
        pytest.param(MESSAGES, b'{"model": "tiny", "max_tokens": 4, "messages": [', "not valid JSON", id="malformed"),
        pytest.param(MESSAGES, NESTED, "parsing the body", id="too-deep"),
        pytest.param(MESSAGES, {**BASE, "messages": []}, "messages", id="no-messages"),
        pytest.param(MESSAGES, {**BASE, "temperature": 1.5}, "temperature", id="temperature"),
        pytest.param(
            MESSAGES, {**BASE, "tools": TOOLS, "tool_choice": {"type": "tool", "name": "nope"}}, "'nope'", id="unknown"
        ),
        pytest.param(MESSAGES, {**BASE, "tool_choice": {"type": "any"}}, "tool_choice", id="any-without-tools"),
        pytest.param(MESSAGES, {**BASE, "messages": SEEN}, "images are not supported", id="image"),
        pytest.param(
            MESSAGES, {**BASE, "tools": [DEEP_TOOL], "tool_choice": {"type": "any"}}, "deeper", id="deep-schema"
        ),
        pytest.param(COUNT, {"model": "tiny", "messages": SEEN}, "images are not supported", id="count-image"),
        pytest.param(
            COUNT,
            {"model": "tiny", "messages": ASK, "tools": [{"name": "bad name!", "input_schema": {"type": "object"}}]},
            "tools.0.name",
            id="count-tool-name",
        ),
    ],
)
def test_a_bad_request_is_a_400_in_anthropics_envelope(server, path, body, says):
    assert_anthropic_error(post(server.url, path, body), 400, "invalid_request_error", says)
    assert create(server.url, max_tokens=2).usage.output_tokens == 2  # and the server goes on


def test_the_sdk_raises_a_bad_request_with_the_servers_message(server):
    with pytest.raises(anthropic.BadRequestError) as caught:
        create(server.url, tools=TOOLS, tool_choice={"type": "tool", "name": "nope"})
    assert caught.value.status_code == 400 and "'nope'" in caught.value.message
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.BadRequestError) as caught:
        create(server.url, messages=[{"role": "user", "content": [PICTURE]}])
    assert "images are not supported" in caught.value.message


def test_an_api_key_is_taken_as_x_api_key_and_a_wrong_one_is_a_401_in_anthropics_envelope(guarded):
    assert client(guarded.url, "k").messages.count_tokens(model="tiny", messages=ASK).input_tokens > 0
    with pytest.raises(anthropic.AuthenticationError) as caught:
        client(guarded.url, "wrong").messages.create(model="tiny", max_tokens=2, messages=ASK)
    assert caught.value.body["error"]["type"] == "authentication_error"
    for key in ({}, {"x-api-key": "wrong"}):
        for path in (MESSAGES, COUNT):
            assert_anthropic_error(
                post(guarded.url, path, {"model": "tiny", "messages": ASK}, **key), 401, "authentication_error"
            )


def test_a_body_over_the_limit_is_a_413_in_anthropics_envelope(guarded):
    big = {"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "word " * 1000}]}
    assert_anthropic_error(
        post(guarded.url, MESSAGES, big, **{"x-api-key": "k"}), 413, "request_too_large", "4096 bytes"
    )
    with pytest.raises(anthropic.APIStatusError) as caught:
        client(guarded.url, "k").messages.create(**big)
    assert caught.value.status_code == 413
    assert client(guarded.url, "k").messages.create(model="tiny", max_tokens=2, messages=ASK).usage.output_tokens == 2


# -- thinking ------------------------------------------------------------------------------------


HI = [{"role": "user", "content": "hi"}]


def test_a_thinking_template_answers_a_thinking_block_then_text(thinking):
    message = create(thinking.url, max_tokens=32, messages=HI, thinking={"type": "enabled", "budget_tokens": 1024})
    assert [block.type for block in message.content] == ["thinking", "text"]
    assert (message.content[0].thinking, message.content[1].text) == (THINKER_REASONING, THINKER_CONTENT)
    assert message.stop_reason == "end_turn"
    history = [*HI, {"role": "assistant", "content": [b.model_dump() for b in message.content]}, *HI]
    assert text_of(create(thinking.url, max_tokens=32, messages=history)) == THINKER_CONTENT  # sent back


def test_thinkings_switch_reaches_the_template(thinking):
    sdk = client(thinking.url)
    counts = {
        kind: sdk.messages.count_tokens(model="tiny", messages=HI, **({"thinking": {"type": kind}} if kind else {}))
        for kind in (None, "adaptive", "disabled")
    }
    on = sdk.messages.count_tokens(model="tiny", messages=HI, thinking={"type": "enabled", "budget_tokens": 2048})
    assert counts[None].input_tokens == counts["adaptive"].input_tokens == on.input_tokens
    assert counts["disabled"].input_tokens > on.input_tokens  # Qwen3's template closes an empty thought
    off = create(thinking.url, max_tokens=32, messages=HI, thinking={"type": "disabled"})
    assert read(off) == counts["disabled"].input_tokens


def test_a_streamed_thought_comes_as_thinking_deltas_then_text(thinking):
    fields = {"model": "tiny", "max_tokens": 32, "messages": HI, "thinking": {"type": "enabled", "budget_tokens": 1024}}
    with client(thinking.url).messages.stream(**fields, extra_body=GREEDY) as stream:
        final = stream.get_final_message()
    assert [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in final.content] == [
        ("thinking", THINKER_REASONING),
        ("text", THINKER_CONTENT),
    ]
    assert final.stop_reason == "end_turn"
    sent = events(thinking.url, {**fields, **GREEDY})
    kinds = [data["delta"]["type"] for name, data in sent if name == "content_block_delta"]
    assert kinds[0] == "thinking_delta" and "signature_delta" in kinds and kinds[-1] == "text_delta"
    assert kinds.index("signature_delta") < kinds.index("text_delta")
    starts = [data["content_block"]["type"] for name, data in sent if name == "content_block_start"]
    assert starts == ["thinking", "text"]
