"""Tool calling on a real server on loopback serving tiny models: a required or named call always
parses and validates against its tool's schema, whole and streamed (as the official client
assembles it), the tool's result goes back in the history, and every bad tools request is a 400
naming its field. The tiny models' template shows no call syntax, so calls are read as bare JSON;
the syntax of each family is tests/models/test_tool_calls.py's."""

from __future__ import annotations

import json

import httpx
import jsonschema
import pytest
from serve_helpers import FLAT_COSTS, WAIT, load_pair, served

CHAT = "/v1/chat/completions"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
READ_FILE = {
    "type": "function",
    "function": {
        "name": "read_file",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string", "maxLength": 20}},
            "required": ["path"],
            "additionalProperties": False,
        },
    },
}
TOOLS = [WEATHER, READ_FILE]
ASK = [{"role": "user", "content": "How warm is it in Paris?"}]


@pytest.fixture(scope="module")
def server(tiny_target, tiny_draft):
    pair = load_pair(tiny_target, tiny_draft)
    with served(pair, costs=FLAT_COSTS, mode="ngram") as running:
        yield running
    pair.close()


def chat(url: str, **fields) -> httpx.Response:
    body = {"messages": ASK, "max_tokens": 96, "temperature": 0, **fields}
    return httpx.post(url + CHAT, json=body, timeout=WAIT)


def schema_of(name: str) -> dict:
    return next(t for t in TOOLS if t["function"]["name"] == name)["function"]["parameters"]


@pytest.mark.parametrize("parallel", [True, False])
def test_a_required_call_parses_and_validates(server, parallel):
    response = chat(server.url, tools=TOOLS, tool_choice="required", parallel_tool_calls=parallel)
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    calls = choice["message"]["tool_calls"]
    assert choice["finish_reason"] == "tool_calls" and calls and (parallel or len(calls) == 1)
    for call in calls:
        assert call["type"] == "function" and call["id"].startswith("call_")
        jsonschema.validate(json.loads(call["function"]["arguments"]), schema_of(call["function"]["name"]))
    assert choice["message"]["content"] is None


def test_a_named_function_is_the_one_called(server):
    named = {"type": "function", "function": {"name": "read_file"}}
    response = chat(server.url, tools=TOOLS, tool_choice=named)
    calls = response.json()["choices"][0]["message"]["tool_calls"]
    assert {c["function"]["name"] for c in calls} == {"read_file"}


def test_the_streamed_call_is_the_whole_one_as_the_official_client_assembles_it(server):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    fields = {"model": "tiny", "messages": ASK, "tools": TOOLS, "tool_choice": "required", "temperature": 0}
    whole = client.chat.completions.create(**fields, max_tokens=96)
    with client.beta.chat.completions.stream(**fields, max_tokens=96) as stream:
        for _ in stream:
            pass
        streamed = stream.get_final_completion()
    expected = [(c.function.name, c.function.arguments) for c in whole.choices[0].message.tool_calls]
    got = [(c.function.name, c.function.arguments) for c in streamed.choices[0].message.tool_calls]
    assert got == expected and streamed.choices[0].finish_reason == "tool_calls"


def test_the_tools_result_goes_back_and_an_answer_follows(server):
    first = chat(server.url, tools=TOOLS, tool_choice="required", parallel_tool_calls=False).json()
    message = first["choices"][0]["message"]
    call = message["tool_calls"][0]
    history = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": message["tool_calls"]},
        {"role": "tool", "tool_call_id": call["id"], "content": '{"temperature": 21}'},
    ]
    second = chat(server.url, messages=history, tools=TOOLS, tool_choice="none", max_tokens=8)
    assert second.status_code == 200, second.text
    answer = second.json()["choices"][0]
    assert "tool_calls" not in answer["message"] and answer["finish_reason"] in ("stop", "length")


def test_tool_choice_none_shows_no_tools_and_reads_no_calls(server):
    plain = chat(server.url, max_tokens=8).json()["choices"][0]["message"]
    none = chat(server.url, tools=TOOLS, tool_choice="none", max_tokens=8).json()["choices"][0]["message"]
    assert none == plain


@pytest.mark.parametrize(
    "fields, param",
    [
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": [WEATHER, WEATHER]}, "tools"),
        ({"tools": [{"type": "function", "function": {"name": "x", "parameters": {"type": "strin"}}}]}, "tools"),
        ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice"),
    ],
)
def test_a_bad_tools_request_is_a_400_naming_its_field(server, fields, param):
    response = chat(server.url, **fields)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


@pytest.mark.parametrize(
    "fields",
    [
        {"tools": [{"type": "function", "function": {"name": "bad name!"}}]},
        {"tools": [{"type": "retrieval"}]},
        {"tool_choice": "sometimes"},
        {"messages": [{"role": "tool", "content": "21"}]},
        {"messages": [{"role": "user", "content": "x", "tool_calls": []}]},
        {"messages": [{"role": "user"}]},
    ],
)
def test_a_malformed_tools_field_is_a_400(server, fields):
    assert chat(server.url, **fields).status_code == 400


def test_an_assistant_turn_with_calls_and_no_content_is_accepted(server):
    history = [
        *ASK,
        {
            "role": "assistant",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "21"},
    ]
    assert chat(server.url, messages=history, tools=TOOLS, max_tokens=4).status_code == 200


def test_under_auto_a_syntax_whose_opened_calls_are_written_runs_constrained(server):
    """With a syntax whose opened calls are constrained (Hermes'), "auto" runs under the lazy
    grammar: free text (valid UTF-8) until the model writes the opening, which these tiny models
    never do, so the answer is text and no call."""
    from specrun.models.tool_syntax import HERMES

    service = server.service
    saved, service.tool_syntax = service.tool_syntax, HERMES
    try:
        lazy = chat(server.url, tools=TOOLS, tool_choice="auto", max_tokens=24).json()
    finally:
        service.tool_syntax = saved
    message = lazy["choices"][0]["message"]
    assert "forced_n" in lazy["timings"]  # it ran constrained
    assert message["content"] and "tool_calls" not in message and "\ufffd" not in message["content"]
    free = chat(server.url, tools=TOOLS, tool_choice="auto", max_tokens=24).json()
    assert "forced_n" not in free["timings"]  # this template shows no syntax: nothing is constrained


def test_a_template_without_a_call_syntax_is_said_once_through_the_servers_warnings(server, monkeypatch):
    said: list[str] = []
    monkeypatch.setattr(server.service, "_warn", said.append)
    monkeypatch.setattr(server.service, "_unread_syntax_said", False)
    for _ in range(2):
        assert chat(server.url, tools=TOOLS, max_tokens=2).status_code == 200
    assert len(said) == 1 and "no tool-call syntax" in said[0]
