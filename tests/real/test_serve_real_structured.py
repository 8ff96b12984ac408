"""Structured output and tool calls on the real Qwen2.5-Coder pair through the official openai
client: a JSON schema answer validates, and a weather tool is called (whole and streamed), its
result sent back, and an answer follows."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest
from paths import DATA
from serve_helpers import WAIT, served

from specrun.models.tool_calls import parse_tool_calls
from specrun.models.tool_grammar import tool_names_of
from specrun.models.tool_syntax import HERMES
from specrun.runtime.pair import Pair, PairConfig

pytestmark = pytest.mark.real

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"],
        },
    },
}
READ_FILE = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file from disk",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
}
ASK = [{"role": "user", "content": "What's the weather like in Paris today, in celsius?"}]
PEOPLE = {
    "type": "object",
    "properties": {
        "people": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                "required": ["name", "age"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["people"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def client(real_pair_paths):
    target, draft = real_pair_paths
    pair = Pair(PairConfig(target, draft, ctx_size=2048))
    try:
        with served(pair, parallel=1) as running:
            yield openai.OpenAI(base_url=running.url + "/v1", api_key="none", max_retries=0, timeout=WAIT * 10)
    finally:
        pair.close()


def test_a_json_schema_answer_validates(client):
    answer = client.chat.completions.create(
        model="qwen",
        messages=[{"role": "user", "content": "List the people as JSON: Ann is 31, Bob is 45."}],
        response_format={"type": "json_schema", "json_schema": {"name": "people", "schema": PEOPLE}},
        temperature=0,
        max_tokens=96,
    )
    jsonschema.validate(json.loads(answer.choices[0].message.content), PEOPLE)


@pytest.mark.parametrize("choice", ["auto", "required"])
def test_the_weather_tool_is_called_whole_and_streamed_and_its_result_answered(client, choice):
    fields = {"model": "qwen", "tools": [WEATHER, READ_FILE], "tool_choice": choice, "temperature": 0}
    whole = client.chat.completions.create(messages=ASK, max_tokens=96, **fields)
    calls = whole.choices[0].message.tool_calls
    assert whole.choices[0].finish_reason == "tool_calls" and calls
    assert calls[0].function.name == "get_weather"
    assert json.loads(calls[0].function.arguments)["city"] == "Paris"
    with client.beta.chat.completions.stream(messages=ASK, max_tokens=96, **fields) as stream:
        for _ in stream:
            pass
        streamed = stream.get_final_completion().choices[0].message.tool_calls
    assert [(c.function.name, c.function.arguments) for c in streamed] == [
        (c.function.name, c.function.arguments) for c in calls
    ]
    history = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [c.model_dump() for c in calls]},
        {"role": "tool", "tool_call_id": calls[0].id, "content": json.dumps({"temperature": 21, "sky": "clear"})},
    ]
    # Told of the tools, this small model answers a tool's result with another call's JSON: the
    # answer is asked for without them, as an agent does once it has what it needs.
    final = client.chat.completions.create(messages=history, max_tokens=48, **{**fields, "tool_choice": "none"})
    text = final.choices[0].message.content or ""
    assert final.choices[0].message.tool_calls is None and "21" in text


LLAMA_SERVER = json.loads((DATA / "llama_server" / "qwen_tool_calls.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", LLAMA_SERVER["cases"], ids=lambda c: c["request"]["messages"][-1]["content"][:24])
def test_the_same_requests_give_llama_servers_answer_read_the_same_way(client, case):
    """The same file and requests as llama-server --jinja was given: specrun's answer is the one
    llama-server gave, and its calls are what specrun's reader makes of that answer."""
    request = case["request"]
    answer = client.chat.completions.create(model="qwen", **request).choices[0].message
    expected = parse_tool_calls(case["message"]["content"], HERMES, tool_names_of(request["tools"]))
    assert [(c.function.name, c.function.arguments) for c in answer.tool_calls or []] == [
        (c.name, c.arguments) for c in expected.calls
    ]
    assert (answer.content or "") == expected.content
