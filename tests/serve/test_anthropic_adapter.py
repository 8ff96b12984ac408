"""Anthropic's Messages API on the chat endpoint, without a model or a server: each request becomes
a chat body that ChatRequest accepts, with the system text, turns, tools and thinking where the
chat endpoint reads them; what cannot be served is refused by name; and answers, whole or streamed,
are what the official Anthropic SDK parses (a stream is read by the SDK through a mock transport)."""

from __future__ import annotations

import importlib
import json

import anthropic
import pytest
from pydantic import ValidationError

from specrun.serve.anthropic import AdapterError, CountTokensRequest, MessagesRequest, chat_body, count_body
from specrun.serve.anthropic_render import MessageStream, error_body, error_kind, message_response, sse
from specrun.serve.schemas import ChatRequest, unknown_fields

HI = [{"role": "user", "content": "hi"}]
BILLING = "x-anthropic-billing-header: cc_version=2.1.197.abc; cc_entrypoint=sdk-cli; cch=1a2b3;"
BASH = {"name": "Bash", "description": "Run a command", "input_schema": {"type": "object"}}
READ = {"name": "mcp__files__read", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}
WEB = {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}


def request(**fields) -> MessagesRequest:
    return MessagesRequest.model_validate({"model": "claude", "max_tokens": 64, "messages": HI, **fields})


def chat(**fields) -> dict:
    """The chat body of a Messages request with `fields`, which ChatRequest must accept."""
    body, _ = chat_body(request(**fields))
    ChatRequest.model_validate(body)
    return body


def refusal(**fields) -> AdapterError:
    with pytest.raises(AdapterError) as caught:
        chat_body(request(**fields))
    return caught.value


# The request.


def test_a_system_string_is_the_first_message():
    assert chat(system="Be brief.")["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]


def test_system_blocks_are_joined_without_the_attribution_line():
    system = [
        {"type": "text", "text": BILLING},
        {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": f"Rules:\n{BILLING}\nBe brief."},
    ]
    first = chat(system=system)["messages"][0]
    assert first == {"role": "system", "content": "You are Claude Code.\n\nRules:\nBe brief."}


def test_the_attribution_line_is_dropped_from_a_system_turn_too():
    messages = [{"role": "system", "content": f"{BILLING}\nBe brief."}, *HI]
    assert chat(messages=messages)["messages"][0] == {"role": "system", "content": "Be brief."}


def test_leading_system_turns_join_the_system_text():
    messages = [{"role": "system", "content": [{"type": "text", "text": "Second."}]}, *HI]
    assert chat(system="First.", messages=messages)["messages"][0] == {"role": "system", "content": "First.\n\nSecond."}


def test_a_later_system_turn_is_prepended_to_the_next_user_turn():
    messages = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "ok"},
        {"role": "system", "content": "a reminder"},
        {"role": "user", "content": [{"type": "text", "text": "two"}]},
    ]
    assert chat(messages=messages)["messages"][-1] == {"role": "user", "content": "a reminder\n\ntwo"}


def test_a_system_turn_with_no_user_turn_after_it_joins_the_one_before():
    messages = [{"role": "user", "content": "one"}, {"role": "system", "content": "a reminder"}]
    assert chat(messages=messages)["messages"] == [{"role": "user", "content": "one\n\na reminder"}]


def test_a_system_turn_after_an_answer_is_user_text_in_its_place():
    messages = [*HI, {"role": "assistant", "content": "ok"}, {"role": "system", "content": "a reminder"}]
    assert chat(messages=messages)["messages"][1:] == [
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "a reminder"},
    ]


def test_a_user_turns_text_blocks_are_one_message_and_consecutive_user_turns_one_turn():
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "<reminder>"}, {"type": "text", "text": "one"}]},
        {"role": "user", "content": "two"},
    ]
    assert chat(messages=messages)["messages"] == [{"role": "user", "content": "<reminder>\n\none\n\ntwo"}]


def test_tool_use_and_tool_result_round_trip():
    messages = [
        *HI,
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "toolu_01", "name": "Bash", "input": {"command": "ls", "n": [1, "é"]}},
                {"type": "tool_use", "id": "toolu_02", "name": "mcp__files__read", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "and then?"},
                {"type": "tool_result", "tool_use_id": "toolu_01", "content": "a.txt"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_02",
                    "content": [{"type": "text", "text": "no such"}, {"type": "text", "text": "file"}],
                    "is_error": True,
                },
            ],
        },
    ]
    out = chat(messages=messages, tools=[BASH, READ])["messages"]
    calls = out[1]["tool_calls"]
    assert out[1]["content"] == "Looking."
    assert [c["id"] for c in calls] == ["toolu_01", "toolu_02"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"command": "ls", "n": [1, "é"]}
    assert calls[1]["function"] == {"name": "mcp__files__read", "arguments": "{}"}
    assert out[2:] == [
        {"role": "tool", "tool_call_id": "toolu_01", "content": "a.txt"},
        {"role": "tool", "tool_call_id": "toolu_02", "content": "Error: no such\n\nfile"},
        {"role": "user", "content": "and then?"},
    ]


def test_a_turn_of_tool_results_only_and_an_answer_of_calls_only():
    messages = [
        *HI,
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_01", "name": "Bash", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01"}]},
    ]
    out = chat(messages=messages, tools=[BASH])["messages"]
    assert out[1]["content"] is None and out[1]["tool_calls"][0]["id"] == "toolu_01"
    assert out[2:] == [{"role": "tool", "tool_call_id": "toolu_01", "content": ""}]


def test_thinking_blocks_become_reasoning_content_and_redacted_thinking_is_dropped():
    turn = {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Let me see.", "signature": "abc"},
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "text", "text": "Hello."},
        ],
    }
    out = chat(messages=[*HI, turn, {"role": "user", "content": "more"}])["messages"]
    assert out[1] == {"role": "assistant", "content": "Hello.", "reasoning_content": "Let me see."}


def test_tools_become_functions_and_server_tools_are_left_out_and_named():
    body, left_out = chat_body(request(tools=[BASH, WEB, {**READ, "type": "custom"}]))
    ChatRequest.model_validate(body)
    assert left_out == ["web_search"]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {"name": "Bash", "parameters": {"type": "object"}, "description": "Run a command"},
        },
        {"type": "function", "function": {"name": "mcp__files__read", "parameters": {"type": "object"}}},
    ]


@pytest.mark.parametrize(
    ("choice", "fields"),
    [
        ({"type": "auto"}, {"tool_choice": "auto"}),
        ({"type": "any"}, {"tool_choice": "required"}),
        ({"type": "none"}, {"tool_choice": "none"}),
        ({"type": "tool", "name": "Bash"}, {"tool_choice": {"type": "function", "function": {"name": "Bash"}}}),
        ({"type": "auto", "disable_parallel_tool_use": True}, {"tool_choice": "auto", "parallel_tool_calls": False}),
        ({"type": "any", "disable_parallel_tool_use": False}, {"tool_choice": "required"}),
    ],
)
def test_tool_choice(choice, fields):
    body = chat(tools=[BASH], tool_choice=choice)
    assert {k: body[k] for k in ("tool_choice", "parallel_tool_calls") if k in body} == fields


@pytest.mark.parametrize(
    ("choice", "tools", "param"),
    [
        ({"type": "tool", "name": "Read"}, [BASH], "tool_choice.name"),
        ({"type": "tool", "name": "web_search"}, [BASH, WEB], "tool_choice.name"),
        ({"type": "any"}, [WEB], "tool_choice"),
    ],
)
def test_a_tool_choice_the_tools_cannot_satisfy_is_refused(choice, tools, param):
    error = refusal(tools=tools, tool_choice=choice)
    assert error.param == param and error.message


def test_a_tool_name_the_chat_endpoint_cannot_take_is_refused_by_name():
    error = refusal(tools=[BASH, {**BASH, "name": "x" * 65}])
    assert error.param == "tools.1.name"


@pytest.mark.parametrize(
    ("thinking", "kwargs"),
    [
        ({"type": "enabled", "budget_tokens": 2048}, {"enable_thinking": True}),
        ({"type": "disabled"}, {"enable_thinking": False}),
        ({"type": "adaptive"}, None),
        (None, None),
    ],
)
def test_the_thinking_switch(thinking, kwargs):
    body = chat(**({"thinking": thinking} if thinking else {}))
    assert body.get("chat_template_kwargs") == kwargs


def test_sampling_fields_and_the_client_key():
    body = chat(
        stop_sequences=["\n\nHuman:", "END"],
        temperature=0.5,
        top_p=0.9,
        top_k=40,
        stream=True,
        metadata={"user_id": "user_abc"},
    )
    expected = {"stop": ["\n\nHuman:", "END"], "temperature": 0.5, "top_p": 0.9, "top_k": 40, "stream": True}
    assert {k: body[k] for k in expected} == expected
    assert body["user"] == "user_abc" and body["max_tokens"] == 64 and body["model"] == "claude"
    assert "stream" not in chat() and "user" not in chat()


@pytest.mark.parametrize(
    ("content", "param", "said"),
    [
        ([{"type": "text", "text": "see"}, {"type": "image", "source": {}}], "messages.0.content.1", "images"),
        ([{"type": "document", "source": {}}], "messages.0.content.0", "documents"),
        (
            [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image", "source": {}}]}],
            "messages.0.content.0.content.0",
            "images",
        ),
        ([{"type": "tool_use", "id": "t", "name": "Bash", "input": {}}], "messages.0.content.0", "tool_use"),
    ],
)
def test_what_the_model_cannot_read_is_refused_by_name(content, param, said):
    error = refusal(messages=[{"role": "user", "content": content}])
    assert error.param == param and said in error.message


def test_an_image_in_a_system_turn_is_refused():
    error = refusal(messages=[*HI, {"role": "system", "content": [{"type": "image", "source": {}}]}])
    assert error.param == "messages.1.content.0" and "images are not supported" in error.message


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"max_tokens": None}, ("max_tokens",)),
        ({"messages": [{"role": "user", "content": [{"type": "video"}]}]}, ("messages", 0, "content")),
        ({"tools": [{"name": "Bash"}]}, ("tools", 0, "input_schema")),
        ({"tool_choice": {"type": "tool"}}, ("tool_choice", "name")),
        ({"max_tokens": 0}, ("max_tokens",)),
        ({"temperature": "0.5"}, ("temperature",)),
    ],
)
def test_bodies_the_schema_refuses(fields, where):
    body = {"model": "claude", "max_tokens": 64, "messages": HI, **fields}
    body = {k: v for k, v in body.items() if v is not None}
    with pytest.raises(ValidationError) as caught:
        MessagesRequest.model_validate(body)
    assert any(tuple(e["loc"][: len(where)]) == where for e in caught.value.errors())


def test_an_unknown_block_type_is_named_with_the_known_ones():
    with pytest.raises(ValidationError) as caught:
        request(messages=[{"role": "user", "content": [{"type": "video"}]}])
    said = [e["msg"] for e in caught.value.errors() if e["type"] == "invalid_content_block"]
    assert said and "'tool_result'" in said[0]


def test_fields_of_the_api_that_change_nothing_here_are_accepted_and_not_reported():
    from specrun.serve.schemas import unknown_fields

    fields = {
        "metadata": {"user_id": "u"},
        "context_management": {"edits": []},
        "output_config": {"effort": "high"},
        "service_tier": "auto",
        "container": None,
        "mcp_servers": [],
        "tools": [READ],
        "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
    }
    assert unknown_fields(request(**fields)) == []
    assert unknown_fields(request(future_field=1)) == ["future_field"]


def test_count_tokens_needs_no_max_tokens_and_counts_a_whole_answer_of_one_token():
    counted = CountTokensRequest.model_validate({"model": "claude", "messages": HI, "system": "s", "tools": [BASH]})
    body, left_out = count_body(counted)
    ChatRequest.model_validate(body)
    assert body["max_tokens"] == 1 and body["stream"] is False and left_out == []
    assert body["messages"][0] == {"role": "system", "content": "s"} and body["tools"][0]["function"]["name"] == "Bash"


# The answer, whole.


def parsed(message: dict, finish_reason: str = "stop", stop_sequence: str | None = None, **usage) -> dict:
    """The Message for a chat answer, as the SDK's type validates it."""
    usage = {"prompt_tokens": 30, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 20}, **usage}
    answer = message_response(
        message_id="msg_01",
        model="claude",
        message=message,
        finish_reason=finish_reason,
        usage=usage,
        stop_sequence=stop_sequence,
    )
    anthropic.types.Message.model_validate(answer)
    return answer


def test_a_text_answer():
    answer = parsed({"role": "assistant", "content": "Hello."})
    assert answer["content"] == [{"type": "text", "text": "Hello."}]
    assert (answer["id"], answer["model"], answer["stop_reason"], answer["stop_sequence"]) == (
        "msg_01",
        "claude",
        "end_turn",
        None,
    )
    assert answer["usage"] == {
        "input_tokens": 10,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 20,
        "output_tokens": 7,
    }


def test_thinking_comes_first_with_a_signature():
    answer = parsed({"content": "Four.", "reasoning_content": "2+2..."})
    assert answer["content"] == [
        {"type": "thinking", "thinking": "2+2...", "signature": ""},
        {"type": "text", "text": "Four."},
    ]


def test_tool_calls_become_tool_use_blocks():
    calls = [
        {"id": "call_abc123", "type": "function", "function": {"name": "Bash", "arguments": '{"command": "ls"}'}},
        {"id": "toolu_keep", "type": "function", "function": {"name": "Read", "arguments": '{"path": "a", "lim'}},
        {"id": "call_x", "type": "function", "function": {"name": "Read", "arguments": "not json"}},
    ]
    answer = parsed({"content": None, "tool_calls": calls}, "tool_calls")
    assert answer["stop_reason"] == "tool_use"
    assert answer["content"] == [
        {"type": "tool_use", "id": "toolu_abc123", "name": "Bash", "input": {"command": "ls"}},
        {"type": "tool_use", "id": "toolu_keep", "name": "Read", "input": {"path": "a"}},
        {"type": "tool_use", "id": "toolu_x", "name": "Read", "input": {}},
    ]


@pytest.mark.parametrize(
    ("finish", "stop", "reason", "sequence"),
    [
        ("stop", "END", "stop_sequence", "END"),
        ("length", None, "max_tokens", None),
        ("length", "END", "max_tokens", None),
        ("cancelled", None, "end_turn", None),
    ],
)
def test_stop_reasons(finish, stop, reason, sequence):
    answer = parsed({"content": "cut"}, finish, stop)
    assert (answer["stop_reason"], answer["stop_sequence"]) == (reason, sequence)


def test_an_empty_answer_has_no_blocks():
    assert parsed({"content": ""})["content"] == []


def test_errors_in_anthropics_envelope():
    assert error_body("bad") == {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}
    kinds = {s: error_kind(s) for s in (400, 401, 403, 404, 413, 429, 500, 503, 529, 422, 502)}
    assert kinds == {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        413: "request_too_large",
        429: "rate_limit_error",
        500: "api_error",
        503: "overloaded_error",
        529: "overloaded_error",
        422: "invalid_request_error",
        502: "api_error",
    }


# The answer, streamed.

CHUNKS = [
    {"role": "assistant", "content": ""},
    {"reasoning_content": "The user "},
    {"reasoning_content": "wants files."},
    {"content": "Listing "},
    {"content": "them."},
    {"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "Bash", "arguments": ""}}]},
    {"tool_calls": [{"index": 0, "function": {"arguments": '{"comm'}}]},
    {"tool_calls": [{"index": 0, "function": {"arguments": 'and": "ls"}'}}]},
    {"tool_calls": [{"index": 1, "id": "call_2", "type": "function", "function": {"name": "Read", "arguments": ""}}]},
    {"tool_calls": [{"index": 1, "function": {"arguments": '{"path": '}}]},
    {"tool_calls": [{"index": 1, "function": {"arguments": '"a.txt", "n": [1, 2]}'}}]},
]
USAGE = {"prompt_tokens": 50, "completion_tokens": 12, "prompt_tokens_details": {"cached_tokens": 40}}


def events(chunks=CHUNKS, finish=("tool_calls", USAGE, None)) -> list[tuple[str, dict]]:
    stream = MessageStream(message_id="msg_02", model="claude", input_tokens=50)
    out = stream.start()
    for chunk in chunks:
        out += stream.delta(chunk)
    return out + stream.finish(*finish)


def sdk_http():
    """The HTTP library the SDK is built on: httpx, or httpx2 from anthropic 2 on (which refuses
    httpx's objects)."""
    module = next(c.__module__ for c in anthropic.DefaultHttpxClient.__mro__ if c.__module__.startswith("httpx"))
    return importlib.import_module(module.partition(".")[0])


def client(stream_events: list[tuple[str, dict]]) -> anthropic.Anthropic:
    """An SDK client whose every request is answered with these events."""
    http = sdk_http()
    text = "".join(sse(name, data) for name, data in stream_events)

    def answer(request):
        return http.Response(200, headers={"content-type": "text/event-stream"}, content=text.encode())

    transport = http.MockTransport(answer)
    return anthropic.Anthropic(base_url="http://test", api_key="x", http_client=http.Client(transport=transport))


def ask(sdk: anthropic.Anthropic):
    return sdk.messages.stream(model="claude", max_tokens=64, messages=HI)


def test_the_sdk_assembles_the_streamed_answer():
    with ask(client(events())) as stream:
        final = stream.get_final_message()
    thinking, text, bash, read = final.content
    assert (thinking.type, thinking.thinking, thinking.signature) == ("thinking", "The user wants files.", "")
    assert (text.type, text.text) == ("text", "Listing them.")
    assert (bash.type, bash.id, bash.name, bash.input) == ("tool_use", "toolu_1", "Bash", {"command": "ls"})
    assert (read.id, read.name, read.input) == ("toolu_2", "Read", {"path": "a.txt", "n": [1, 2]})
    assert final.stop_reason == "tool_use" and final.stop_sequence is None
    usage = final.usage
    assert (usage.input_tokens, usage.cache_read_input_tokens, usage.output_tokens) == (10, 40, 12)


def test_blocks_open_and_close_in_order():
    seen = events()
    assert [name for name, _ in seen[:2]] == ["message_start", "ping"]
    assert [name for name, _ in seen[-2:]] == ["message_delta", "message_stop"]
    starts = [data["index"] for name, data in seen if name == "content_block_start"]
    stops = [data["index"] for name, data in seen if name == "content_block_stop"]
    assert starts == stops == [0, 1, 2, 3]
    signature = [i for i, (_, data) in enumerate(seen) if data.get("delta", {}).get("type") == "signature_delta"]
    assert len(signature) == 1 and seen[signature[0] + 1][0] == "content_block_stop"
    assert not any(data.get("delta", {}).get("partial_json") == "" for _, data in seen)


def test_one_delta_with_reasoning_and_content_gives_thinking_first():
    seen = events([{"reasoning_content": "r", "content": "c"}], ("stop", USAGE, None))
    kinds = [data["content_block"]["type"] for name, data in seen if name == "content_block_start"]
    assert kinds == ["thinking", "text"]


def test_a_stop_sequence_ends_the_stream():
    with ask(client(events([{"content": "one two"}], ("stop", USAGE, "three")))) as stream:
        final = stream.get_final_message()
    assert (final.stop_reason, final.stop_sequence, final.content[0].text) == ("stop_sequence", "three", "one two")


def test_raw_events_iterate():
    sdk = client(events())
    raw = sdk.messages.create(model="claude", max_tokens=64, messages=HI, stream=True)
    types = [event.type for event in raw]
    assert types[0] == "message_start" and types[-1] == "message_stop" and "content_block_delta" in types


def test_an_error_event_raises_the_sdks_error():
    stream = MessageStream(message_id="msg_03", model="claude", input_tokens=5)
    broken = stream.start() + stream.delta({"content": "par"}) + stream.error("the engine stopped", "overloaded_error")
    with pytest.raises(anthropic.APIStatusError) as caught:
        with ask(client(broken)) as sdk_stream:
            sdk_stream.get_final_message()
    assert "the engine stopped" in str(caught.value)
    assert broken[-1] == ("error", error_body("the engine stopped", "overloaded_error"))


def test_sse_keeps_text_as_it_is():
    assert sse("ping", {"t": "é"}) == 'event: ping\ndata: {"t": "é"}\n\n'


def test_a_left_out_server_tools_fields_are_not_named_as_unknown():
    request = MessagesRequest.model_validate(
        {
            "model": "m",
            "max_tokens": 4,
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [
                {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
                {"name": "f", "input_schema": {"type": "object"}, "surprise": 1},
            ],
        }
    )
    assert unknown_fields(request) == ["tools.1.surprise"]
