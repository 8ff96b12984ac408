"""The Responses API adapter without a model: Responses bodies become chat bodies the chat endpoint
accepts (namespaces flattened and named back, hosted tools left out and named, images refused),
the store keeps recent conversations within its bounds, and whole and streamed answers are what
the official SDK parses: its Response model, its typed stream events, its stream helper's final
response."""

from __future__ import annotations

import json
from typing import get_args

import httpx
import openai
import pytest
from openai.types.responses import (
    InputTokenCountResponse,
    Response,
    ResponseCompletedEvent,
    ResponseFailedEvent,
    ResponseStreamEvent,
)
from pydantic import ValidationError

from specrun.serve import responses, responses_request
from specrun.serve.responses import (
    AdapterError,
    ResponseStore,
    chat_body,
    flat_name,
    messages_for_store,
    resolve_previous,
)
from specrun.serve.responses_render import ResponseStream, input_tokens_body, new_response_id, response_object, sse
from specrun.serve.responses_request import InputTokensRequest, ResponsesRequest
from specrun.serve.schemas import ChatRequest, unknown_fields

USAGE = {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19, "prompt_tokens_details": {"cached_tokens": 4}}
EVENTS = {get_args(c.model_fields["type"].annotation)[0]: c for c in get_args(get_args(ResponseStreamEvent)[0])}


def convert(body: dict, previous: list[dict] | None = None) -> responses.Conversion:
    """chat_body of a Responses body, checked as the chat endpoint checks its body."""
    conversion = chat_body(ResponsesRequest.model_validate(body), previous)
    ChatRequest.model_validate(conversion.body)
    return conversion


def messages(body: dict) -> list[dict]:
    return convert(body).body["messages"]


def refused(body: dict, param: str) -> str:
    with pytest.raises(AdapterError) as caught:
        convert(body)
    assert caught.value.param == param, caught.value.message
    return caught.value.message


def namespaced_tools() -> list[dict]:
    """Tools as Codex declares them: a plain function, an MCP server's namespace, hosted tools."""
    return [
        {"type": "function", "name": "shell", "parameters": {"type": "object"}, "strict": False},
        {
            "type": "namespace",
            "name": "mcp__docs__",
            "description": "Tools in the mcp__docs__ namespace.",
            "tools": [
                {"type": "function", "name": "search", "description": "find", "parameters": {"type": "object"}},
                {
                    "type": "custom",
                    "name": "apply_patch",
                    "format": {"type": "grammar", "syntax": "lark", "definition": "s: /.+/"},
                },
            ],
        },
        {
            "type": "namespace",
            "name": "odd.space",
            "description": "",
            "tools": [{"type": "function", "name": "look up"}],
        },
        {"type": "web_search"},
        {"type": "local_shell"},
    ]


# -- the chat request ----------------------------------------------------------------------------


def test_a_string_input_is_one_user_message():
    assert messages({"model": "m", "input": "hi"}) == [{"role": "user", "content": "hi"}]


def test_instructions_and_leading_developer_messages_are_one_system_message_and_later_ones_are_folded():
    body = {
        "instructions": "Be brief.",
        "input": [
            {"role": "developer", "content": "Sandbox: read-only."},
            {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "Tools: shell."}]},
            {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
            {"role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
            {"role": "developer", "content": "Sandbox: write."},
            {"role": "user", "content": "go"},
            {"role": "developer", "content": "last word"},
        ],
    }
    assert messages(body) == [
        {"role": "system", "content": "Be brief.\n\nSandbox: read-only.\n\nTools: shell."},
        {"role": "user", "content": "ab"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "Sandbox: write.\n\ngo"},
        {"role": "user", "content": "last word"},
    ]


def test_a_system_message_before_an_assistant_turn_stands_as_a_user_message():
    body = {
        "input": [
            {"role": "user", "content": "q"},
            {"role": "system", "content": "note"},
            {"role": "assistant", "content": "a"},
        ]
    }
    assert [m["role"] for m in messages(body)] == ["user", "user", "assistant"]


def test_function_calls_join_the_assistant_message_before_them_and_outputs_become_tool_messages():
    body = {
        "input": [
            {"role": "user", "content": "list and count"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Running."}]},
            {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": '{"cmd":"ls"}', "id": "fc_1"},
            {
                "type": "function_call",
                "call_id": "c2",
                "name": "shell",
                "arguments": '{"cmd":"wc"}',
                "status": "completed",
            },
            {"type": "function_call_output", "call_id": "c1", "output": "a b"},
            {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "2"}]},
            {"type": "function_call", "call_id": "c3", "name": "shell", "arguments": "{}"},
        ],
        "tools": [{"type": "function", "name": "shell"}],
    }
    out = messages(body)
    assert out[1] == {
        "role": "assistant",
        "content": "Running.",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": '{"cmd":"ls"}'}},
            {"id": "c2", "type": "function", "function": {"name": "shell", "arguments": '{"cmd":"wc"}'}},
        ],
    }
    assert out[2:4] == [
        {"role": "tool", "tool_call_id": "c1", "content": "a b"},
        {"role": "tool", "tool_call_id": "c2", "content": "2"},
    ]
    assert out[4] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c3", "type": "function", "function": {"name": "shell", "arguments": "{}"}}],
    }


def test_reasoning_items_become_the_reasoning_content_of_the_next_assistant_message():
    body = {
        "input": [
            {"role": "user", "content": "q"},
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": "think"}],
            },
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me look."}]},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "more"}], "encrypted_content": "xyz"},
            {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "done"},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "unused"}]},
            {"role": "user", "content": "thanks"},
        ],
    }
    out = messages(body)
    assert out[1]["reasoning_content"] == "think\n\nmore"
    assert out[1]["tool_calls"][0]["id"] == "c1"
    assert all("reasoning_content" not in m for m in out[2:])


def test_namespace_tools_are_flattened_as_codex_flattens_them():
    conversion = convert(
        {
            "input": [
                {"role": "user", "content": "find it"},
                {
                    "type": "function_call",
                    "call_id": "c1",
                    "namespace": "mcp__docs__",
                    "name": "search",
                    "arguments": "{}",
                },
                {"type": "function_call_output", "call_id": "c1", "output": "[]", "namespace": "mcp__docs__"},
            ],
            "tools": namespaced_tools(),
            "tool_choice": {"type": "function", "name": "search", "namespace": "mcp__docs__"},
        }
    )
    odd = flat_name("odd.space", "look up")
    assert [t["function"]["name"] for t in conversion.body["tools"]] == ["shell", "mcp__docs__search", odd]
    assert conversion.body["tools"][1]["function"]["description"] == "Tools in the mcp__docs__ namespace.\n\nfind"
    assert "description" not in conversion.body["tools"][2]["function"]
    assert conversion.body["tool_choice"] == {"type": "function", "function": {"name": "mcp__docs__search"}}
    assert conversion.body["messages"][1]["tool_calls"][0]["function"]["name"] == "mcp__docs__search"
    assert conversion.names == {
        "shell": (None, "shell"),
        "mcp__docs__search": ("mcp__docs__", "search"),
        odd: ("odd.space", "look up"),
    }
    assert odd.startswith("odd_space__look_up_") and responses.CHAT_NAME.match(odd)


def test_flat_names_are_valid_distinct_chat_names():
    assert flat_name("collaboration", "send_message") == "collaboration__send_message"
    assert flat_name("mcp__calendar__", "__create_event") == "mcp__calendar__create_event"
    assert flat_name("functions", "exec_command") == flat_name(None, "exec_command") == "exec_command"
    long = flat_name("mcp__" + "x" * 60, "tool")
    assert len(long) <= 64 and responses.CHAT_NAME.match(long) and long != flat_name("mcp__" + "x" * 61, "tool")
    names = responses.Names.of(
        [
            (None, responses_request.FunctionTool(type="function", name="a__b")),
            ("a", responses_request.FunctionTool(type="function", name="b")),
        ]
    )
    assert len(set(names.original)) == 2 and names.back(names.to_chat("a", "b")) == ("a", "b")


def test_hosted_tools_and_their_items_are_left_out_and_named():
    conversion = convert(
        {
            "input": [
                {"role": "user", "content": "q"},
                {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search"}},
                {"type": "local_shell_call", "call_id": "s1", "status": "completed", "action": {"type": "exec"}},
                {"type": "item_reference", "id": "msg_0"},
            ],
            "tools": namespaced_tools(),
        }
    )
    assert conversion.left_out == [
        "custom tool (in namespace mcp__docs__)",
        "web_search tool",
        "local_shell tool",
        "web_search_call item",
        "local_shell_call item",
        "item_reference item",
    ]
    assert len(conversion.body["tools"]) == 3
    assert (
        convert({"input": "q", "tools": [{"type": "file_search", "vector_store_ids": ["v"]}]}).body.get("tools") is None
    )


def test_text_format_becomes_response_format():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    body = {"input": "q", "text": {"format": {"type": "json_schema", "name": "out", "schema": schema, "strict": True}}}
    assert convert(body).body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "out", "schema": schema, "strict": True},
    }
    assert convert({"input": "q", "text": {"format": {"type": "json_object"}}}).body["response_format"] == {
        "type": "json_object"
    }
    assert (
        "response_format" not in convert({"input": "q", "text": {"format": {"type": "text"}, "verbosity": "low"}}).body
    )


@pytest.mark.parametrize(
    "effort, thinking", [("none", False), ("minimal", False), ("low", True), ("medium", True), ("xhigh", True)]
)
def test_a_reasoning_effort_turns_thinking_on_or_off(effort, thinking):
    body = convert({"input": "q", "reasoning": {"effort": effort, "summary": "auto"}}).body
    assert body["chat_template_kwargs"] == {"enable_thinking": thinking}


def test_without_an_effort_the_template_decides():
    assert "chat_template_kwargs" not in convert({"input": "q", "reasoning": {"summary": "auto"}}).body


def test_generation_fields_map_to_chat_fields():
    body = convert(
        {
            "model": "m",
            "input": "q",
            "max_output_tokens": 64,
            "temperature": 0.2,
            "top_p": 0.9,
            "top_k": 20,
            "stream": True,
            "parallel_tool_calls": False,
            "tools": [{"type": "function", "name": "f"}],
            "tool_choice": "required",
            "prompt_cache_key": "session-1",
            "store": False,
            "include": ["reasoning.encrypted_content"],
            "metadata": {"k": "v"},
            "client_metadata": {"x": 1},
            "service_tier": "auto",
            "truncation": "disabled",
        }
    ).body
    assert {k: v for k, v in body.items() if k not in ("messages", "tools")} == {
        "model": "m",
        "max_tokens": 64,
        "temperature": 0.2,
        "top_p": 0.9,
        "top_k": 20,
        "stream": True,
        "parallel_tool_calls": False,
        "tool_choice": "required",
        "prompt_cache_key": "session-1",
    }


def test_a_tool_choice_naming_an_undeclared_function_is_refused():
    tools = namespaced_tools()
    assert "'nope'" in refused(
        {"input": "q", "tools": tools, "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice"
    )
    assert "'search'" in refused(
        {"input": "q", "tools": tools, "tool_choice": {"type": "function", "name": "search"}}, "tool_choice"
    )
    refused({"input": "q", "tools": tools, "tool_choice": {"type": "web_search_preview"}}, "tool_choice")
    refused({"input": "q", "tools": [{"type": "web_search"}], "tool_choice": "required"}, "tool_choice")


def test_images_and_files_in_a_message_are_refused():
    image = {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}
    message = refused(
        {"input": [{"role": "user", "content": [{"type": "input_text", "text": "see"}, image]}]}, "input.0.content.1"
    )
    assert message == "images are not supported: the model served here reads text only"
    file = {"type": "input_file", "file_data": "AAAA", "filename": "a.pdf"}
    assert refused({"input": [{"role": "user", "content": [file]}]}, "input.0.content.0").startswith("files are")


def test_an_image_in_a_tool_output_is_left_out_with_a_note():
    conversion = convert(
        {
            "input": [
                {"type": "function_call", "call_id": "c1", "name": "view_image", "arguments": "{}"},
                {
                    "type": "function_call_output",
                    "call_id": "c1",
                    "output": [{"type": "input_image", "image_url": "x"}],
                },
            ]
        }
    )
    assert "left out" in conversion.body["messages"][1]["content"]
    assert conversion.left_out == ["input_image part of a tool output"]


def test_what_the_server_cannot_do_is_refused_by_name():
    refused({"input": "q", "background": True}, "background")
    refused({"input": "q", "conversation": "conv_1"}, "conversation")
    refused({"instructions": "alone"}, "input")
    too_many = [{"type": "function", "name": f"f{i}"} for i in range(100)]
    namespace = {"type": "namespace", "name": "ns", "tools": too_many}
    refused({"input": "q", "tools": [*too_many, namespace]}, "tools")


def test_malformed_items_are_validation_errors():
    with pytest.raises(ValidationError):
        ResponsesRequest.model_validate({"input": [{"content": "no role, no type"}]})
    with pytest.raises(ValidationError):
        ResponsesRequest.model_validate({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]})
    with pytest.raises(ValidationError):
        ResponsesRequest.model_validate({"input": "q", "temperature": "0.5"})


def test_unknown_fields_are_kept_aside_and_named():
    request = ResponsesRequest.model_validate(
        {"input": [{"role": "user", "content": [{"type": "input_text", "text": "q", "cache": 1}]}], "max_tool_calls": 3}
    )
    assert unknown_fields(request) == ["max_tool_calls", "input.0.content.0.cache"]


def test_input_tokens_requests_convert_without_generation_fields():
    request = InputTokensRequest.model_validate({"model": "m", "input": "count me", "instructions": "sys"})
    body = chat_body(request).body
    ChatRequest.model_validate(body)
    assert body == {
        "model": "m",
        "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "count me"}],
    }
    assert InputTokenCountResponse.model_validate(input_tokens_body(9)).input_tokens == 9


# -- the store -----------------------------------------------------------------------------------


def test_the_store_drops_the_least_recently_used_beyond_its_count():
    store = ResponseStore(max_entries=2)
    store.put("a", [{"role": "user", "content": "a"}])
    store.put("b", [{"role": "user", "content": "b"}])
    assert store.get("a") is not None  # now the most recent
    store.put("c", [{"role": "user", "content": "c"}])
    assert store.get("b") is None and store.get("a") and store.get("c") and len(store) == 2


def test_the_store_drops_the_least_recently_used_beyond_its_bytes():
    one = [{"role": "user", "content": "x" * 100}]
    size = len(json.dumps(one).encode())
    store = ResponseStore(max_entries=100, max_bytes=size * 2)
    for rid in ("a", "b", "c"):
        assert store.put(rid, one)
    assert store.get("a") is None and store.get("b") == one and store.bytes == size * 2
    assert not store.put("big", [{"role": "user", "content": "x" * 1000}])
    assert store.get("big") is None and store.get("c") == one
    store.put("c", [{"role": "user", "content": "y"}])  # replacing counts the new size only
    assert store.bytes == size + len(json.dumps([{"role": "user", "content": "y"}]).encode())


def test_the_store_gives_copies():
    store = ResponseStore()
    store.put("a", [{"role": "user", "content": "a"}])
    store.get("a")[0]["content"] = "changed"
    assert store.get("a") == [{"role": "user", "content": "a"}]
    assert store.get("unknown") is None


def test_previous_response_id_continues_the_stored_conversation():
    store = ResponseStore()
    first = ResponsesRequest.model_validate(
        {
            "instructions": "old rules",
            "input": [{"role": "developer", "content": "dev"}, {"role": "user", "content": "q1"}],
        }
    )
    conversion = chat_body(first, resolve_previous(store, first))
    answer = {
        "content": None,
        "reasoning_content": "hm",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    }
    store.put("resp_1", messages_for_store(conversion, answer))

    second = ResponsesRequest.model_validate(
        {
            "instructions": "new rules",
            "previous_response_id": "resp_1",
            "input": [{"type": "function_call_output", "call_id": "c1", "output": "42"}],
        }
    )
    out = convert(second.model_dump(by_alias=True, exclude_none=True), resolve_previous(store, second)).body["messages"]
    assert out == [
        {"role": "system", "content": "new rules\n\ndev"},
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": None, "reasoning_content": "hm", "tool_calls": answer["tool_calls"]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]


def test_an_unknown_previous_response_id_is_refused():
    store = ResponseStore()
    assert resolve_previous(store, ResponsesRequest.model_validate({"input": "q"})) is None
    with pytest.raises(AdapterError) as caught:
        resolve_previous(store, ResponsesRequest.model_validate({"input": "q", "previous_response_id": "resp_x"}))
    assert caught.value.param == "previous_response_id"
    assert "'resp_x' not found (responses are kept in memory" in caught.value.message


# -- whole answers -------------------------------------------------------------------------------


def render(body: dict, message: dict, finish_reason: str = "stop") -> Response:
    request = ResponsesRequest.model_validate(body)
    payload = response_object(
        response_id=new_response_id(),
        model="m",
        created=1700000000,
        request=request,
        message=message,
        finish_reason=finish_reason,
        usage=USAGE,
    )
    return Response.model_validate(payload)


def test_a_text_answer_is_a_response_the_sdk_reads():
    response = render(
        {"input": "q", "temperature": 0.5, "metadata": {"k": "v"}}, {"role": "assistant", "content": "Hello."}
    )
    assert response.status == "completed" and response.output_text == "Hello."
    assert response.id.startswith("resp_") and response.output[0].id.startswith("msg_")
    assert response.temperature == 0.5 and response.metadata == {"k": "v"} and response.tool_choice == "auto"
    usage = response.usage
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (12, 7, 19)
    assert usage.input_tokens_details.cached_tokens == 4 and usage.output_tokens_details.reasoning_tokens == 0


def test_reasoning_comes_before_the_text():
    response = render({"input": "q", "reasoning": {"effort": "high"}}, {"content": "4", "reasoning_content": "2+2"})
    reasoning, message = response.output
    assert reasoning.type == "reasoning" and reasoning.id.startswith("rs_") and reasoning.summary == []
    assert reasoning.content[0].text == "2+2" and message.content[0].text == "4"
    assert response.reasoning.effort == "high"


def test_function_calls_are_given_back_with_the_declared_name_and_namespace():
    calls = [
        {"id": "call_1", "type": "function", "function": {"name": "mcp__docs__search", "arguments": '{"q":"x"}'}},
        {"id": "call_2", "type": "function", "function": {"name": "shell", "arguments": "{}"}},
        {
            "id": "call_3",
            "type": "function",
            "function": {"name": flat_name("odd.space", "look up"), "arguments": "{}"},
        },
    ]
    response = render({"input": "q", "tools": namespaced_tools()}, {"content": None, "tool_calls": calls}, "tool_calls")
    assert [(c.call_id, c.namespace, c.name, c.arguments) for c in response.output] == [
        ("call_1", "mcp__docs__", "search", '{"q":"x"}'),
        ("call_2", None, "shell", "{}"),
        ("call_3", "odd.space", "look up", "{}"),
    ]
    assert all(c.type == "function_call" and c.id.startswith("fc_") for c in response.output)
    assert response.status == "completed" and len(response.tools) == 5


def test_an_answer_cut_by_its_limit_is_incomplete():
    response = render({"input": "q", "max_output_tokens": 7}, {"content": "Once upon"}, "length")
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    assert response.output[0].status == "incomplete" and response.max_output_tokens == 7


def test_a_json_schema_request_is_echoed():
    text = {"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}, "strict": True}}
    response = render({"input": "q", "text": text}, {"content": "{}"})
    assert response.text.format.type == "json_schema" and response.text.format.schema_ == {"type": "object"}


# -- streamed answers ----------------------------------------------------------------------------

DELTAS = [
    {"role": "assistant"},
    {"reasoning_content": "Think"},
    {"reasoning_content": "ing."},
    {"content": "Let me "},
    {"content": "look."},
    {
        "tool_calls": [
            {"index": 0, "id": "call_a", "type": "function", "function": {"name": "mcp__docs__search", "arguments": ""}}
        ]
    },
    {"tool_calls": [{"index": 0, "function": {"arguments": '{"q":'}}]},
    {"tool_calls": [{"index": 0, "function": {"arguments": '"x"}'}}]},
    {
        "tool_calls": [
            {"index": 1, "id": "call_b", "type": "function", "function": {"name": "shell", "arguments": '{"c'}}
        ]
    },
    {"tool_calls": [{"index": 1, "function": {"arguments": 'md":"ls"}'}}]},
]


def stream_events(deltas=DELTAS, finish=("tool_calls", USAGE), error=None, body=None) -> list[dict]:
    request = ResponsesRequest.model_validate(body or {"input": "hi", "tools": namespaced_tools(), "stream": True})
    stream = ResponseStream(response_id="resp_1", model="m", created=1700000000, request=request)
    events = stream.start()
    for delta in deltas:
        events += stream.delta(delta)
    events += stream.error(*error) if error else stream.finish(*finish)
    return events


def client_for(events: list[dict]) -> openai.OpenAI:
    """The official client, answered by these events as server-sent events."""
    text = "".join(sse(e) for e in events).encode()

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/responses"
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=text)

    return openai.OpenAI(
        base_url="http://test/v1", api_key="x", http_client=httpx.Client(transport=httpx.MockTransport(answer))
    )


def test_every_event_is_a_valid_sdk_event_numbered_in_order():
    events = stream_events()
    for event in events:
        EVENTS[event["type"]].model_validate(event)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events if "output_item" in e["type"]] == [
        "response.output_item.added",
        "response.output_item.done",
    ] * 4
    added = [e["item"]["id"] for e in events if e["type"] == "response.output_item.added"]
    done = [e["item"]["id"] for e in events if e["type"] == "response.output_item.done"]
    assert added == done and len(set(added)) == 4


def test_the_sdk_stream_helper_gets_the_final_response():
    with client_for(stream_events()).responses.stream(model="m", input="hi") as stream:
        final = stream.get_final_response()
    assert final.output_text == "Let me look."
    reasoning, message, first, second = final.output
    assert reasoning.content[0].text == "Thinking." and message.status == "completed"
    assert (first.call_id, first.namespace, first.name, first.arguments) == (
        "call_a",
        "mcp__docs__",
        "search",
        '{"q":"x"}',
    )
    assert (second.call_id, second.namespace, second.name, second.arguments) == (
        "call_b",
        None,
        "shell",
        '{"cmd":"ls"}',
    )
    assert final.usage.input_tokens == 12 and final.usage.output_tokens == 7
    assert final.usage.input_tokens_details.cached_tokens == 4


def test_the_sdk_iterates_every_event_as_its_typed_class():
    received = list(client_for(stream_events()).responses.create(model="m", input="hi", stream=True))
    kinds = [type(e).__name__ for e in received]
    assert kinds[:2] == ["ResponseCreatedEvent", "ResponseInProgressEvent"]
    assert {
        "ResponseReasoningTextDeltaEvent",
        "ResponseTextDeltaEvent",
        "ResponseFunctionCallArgumentsDeltaEvent",
    } <= set(kinds)
    assert {
        "ResponseFunctionCallArgumentsDoneEvent",
        "ResponseOutputItemDoneEvent",
        "ResponseContentPartDoneEvent",
    } <= set(kinds)
    assert isinstance(received[-1], ResponseCompletedEvent)
    assert (
        "".join(e.delta for e in received if e.type == "response.function_call_arguments.delta")
        == '{"q":"x"}{"cmd":"ls"}'
    )


def test_the_streamed_final_response_is_the_whole_answer_rendered():
    events = stream_events()
    streamed = events[-1]["response"]
    message = {
        "content": "Let me look.",
        "reasoning_content": "Thinking.",
        "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "mcp__docs__search", "arguments": '{"q":"x"}'}},
            {"id": "call_b", "type": "function", "function": {"name": "shell", "arguments": '{"cmd":"ls"}'}},
        ],
    }
    request = ResponsesRequest.model_validate({"input": "hi", "tools": namespaced_tools(), "stream": True})
    whole = response_object(
        response_id="resp_1",
        model="m",
        created=1700000000,
        request=request,
        message=message,
        finish_reason="tool_calls",
        usage=USAGE,
    )

    def without_ids(response):
        return [{k: v for k, v in item.items() if k != "id"} for item in response["output"]]

    assert without_ids(streamed) == without_ids(whole)
    assert {k: v for k, v in streamed.items() if k != "output"} == {k: v for k, v in whole.items() if k != "output"}


def test_a_stream_cut_by_its_limit_ends_incomplete():
    events = stream_events(
        deltas=[{"content": "Once"}], finish=("length", USAGE), body={"input": "hi", "max_output_tokens": 1}
    )
    last = events[-1]
    assert last["type"] == "response.incomplete" and last["response"]["incomplete_details"] == {
        "reason": "max_output_tokens"
    }
    received = list(client_for(events).responses.create(model="m", input="hi", stream=True))
    assert received[-1].type == "response.incomplete" and received[-1].response.output[0].status == "incomplete"


def test_an_error_fails_the_response_as_the_sdk_expects():
    events = stream_events(deltas=[{"content": "par"}], error=("the engine stopped", "server_error"))
    for event in events:
        EVENTS[event["type"]].model_validate(event)
    received = list(client_for(events).responses.create(model="m", input="hi", stream=True))
    failed = received[-1]
    assert isinstance(failed, ResponseFailedEvent) and failed.response.status == "failed"
    assert failed.response.error.code == "server_error" and failed.response.error.message == "the engine stopped"
    assert failed.response.output[0].status == "incomplete"
    with (
        client_for(events).responses.stream(model="m", input="hi") as stream,
        pytest.raises(RuntimeError, match="completed"),
    ):
        stream.get_final_response()


def test_sse_names_each_event():
    event = {"type": "response.output_text.delta", "sequence_number": 3, "delta": "é"}
    data = '{"type": "response.output_text.delta", "sequence_number": 3, "delta": "é"}'
    assert sse(event) == f"event: response.output_text.delta\ndata: {data}\n\n"


def test_a_left_out_hosted_tools_fields_are_not_named_as_unknown():
    request = ResponsesRequest.model_validate(
        {
            "input": "hi",
            "tools": [{"type": "web_search", "external_web_access": True, "filters": {}}],
            "surprise": 1,
        }
    )
    assert unknown_fields(request) == ["surprise"]
