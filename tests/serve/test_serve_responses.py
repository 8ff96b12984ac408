"""OpenAI's Responses API on a real server on loopback serving tiny models, through the official
`openai` SDK: the greedy answer of /v1/chat/completions, whole and streamed, Codex's requests
(instructions, developer messages, function, hosted and namespaced tools, a required call given
back with its namespace, its output sent back), structured output, previous_response_id reading
the same prompt as the whole conversation, input_tokens equal to what the engine reads, reasoning
items from a thinking template, and every refusal in OpenAI's error envelope."""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest
from conftest import THINKER_CONTENT, THINKER_REASONING
from serve_helpers import FLAT_COSTS, WAIT, load_pair, served

RESPONSES = "/v1/responses"
CHAT = "/v1/chat/completions"
HELLO = "How warm is it in Paris?"
SHELL = {
    "type": "function",
    "name": "shell",
    "description": "Runs a shell command and returns its output.",
    "parameters": {
        "type": "object",
        "properties": {"command": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 3}},
        "required": ["command"],
        "additionalProperties": False,
    },
    "strict": False,
}
SEARCH = {
    "type": "object",
    "properties": {"query": {"type": "string", "maxLength": 12}},
    "required": ["query"],
    "additionalProperties": False,
}
DOCS = {
    "type": "namespace",
    "name": "mcp__docs__",
    "description": "Tools of the docs MCP server.",
    "tools": [{"type": "function", "name": "search", "description": "Search the docs.", "parameters": SEARCH}],
}
CODEX_TOOLS = [SHELL, {"type": "web_search"}, DOCS]
SCHEMAS = {(None, "shell"): SHELL["parameters"], ("mcp__docs__", "search"): SEARCH}
CODEX_INPUT = [
    {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Sandbox: read-only."}]},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Where is the parser?"}]},
]
SCHEMA = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean"},
        "colour": {"enum": ["red", "green", "blue"]},
        "n": {"type": "integer", "minimum": 0, "maximum": 99},
    },
    "required": ["ok", "colour", "n"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def said() -> list[str]:
    """What the shared server logged."""
    return []


@pytest.fixture(scope="module")
def pair(tiny_target, tiny_draft):
    loaded = load_pair(tiny_target, tiny_draft)
    yield loaded
    loaded.close()


@pytest.fixture(scope="module")
def server(pair, said):
    with served(pair, costs=FLAT_COSTS, mode="ngram", warn=said.append) as running:
        yield running


@pytest.fixture(scope="module")
def thinking(thinker):
    """A server on the `thinker` model (Qwen3's template): it answers THINKER_REASONING, then THINKER_CONTENT."""
    pair = load_pair(thinker, None)
    with served(pair, costs=FLAT_COSTS, parallel=1) as running:
        yield running
    pair.close()


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=WAIT)


def create(url: str, **fields) -> openai.types.responses.Response:
    """A greedy Response to HELLO (fields override)."""
    return client(url).responses.create(
        **{"model": "tiny", "input": HELLO, "max_output_tokens": 8, "temperature": 0, **fields}
    )


def post(url: str, path: str, body: dict | bytes) -> httpx.Response:
    if isinstance(body, bytes):
        return httpx.post(url + path, content=body, headers={"content-type": "application/json"}, timeout=WAIT)
    return httpx.post(url + path, json=body, timeout=WAIT)


def calls_of(response) -> list:
    return [item for item in response.output if item.type == "function_call"]


def assert_valid_call(call) -> None:
    key = (call.namespace, call.name)
    assert key in SCHEMAS, key  # a namespaced function comes back with its namespace apart
    assert call.call_id and call.status == "completed"
    jsonschema.validate(json.loads(call.arguments), SCHEMAS[key])


# -- text ----------------------------------------------------------------------------------------


def test_a_text_answer_is_the_chat_endpoints_greedy_answer(server):
    response = create(server.url)
    chat = post(server.url, CHAT, {"messages": [{"role": "user", "content": HELLO}], "max_tokens": 8, "temperature": 0})
    chat = chat.json()
    assert response.object == "response" and response.id.startswith("resp_") and response.model == "tiny"
    assert response.output_text == chat["choices"][0]["message"]["content"] and response.output_text
    assert [item.type for item in response.output] == ["message"]
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    assert response.output[0].status == "incomplete"
    assert response.usage.input_tokens == chat["usage"]["prompt_tokens"]
    assert response.usage.output_tokens == 8 and response.usage.total_tokens == response.usage.input_tokens + 8
    assert response.max_output_tokens == 8 and response.temperature == 0  # the request's settings, echoed


def test_a_streamed_answer_is_the_whole_one(server):
    whole = create(server.url)
    with client(server.url).responses.stream(model="tiny", input=HELLO, max_output_tokens=8, temperature=0) as stream:
        sent = list(stream)
    kinds = [event.type for event in sent]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.incomplete"
    assert "response.output_text.delta" in kinds and "response.output_text.done" in kinds
    assert [event.sequence_number for event in sent] == list(range(len(sent)))
    deltas = "".join(event.delta for event in sent if event.type == "response.output_text.delta")
    last = sent[-1].response
    assert deltas == last.output_text == whole.output_text
    assert last.status == "incomplete" and last.usage.output_tokens == 8
    assert last.usage.input_tokens == whole.usage.input_tokens


def test_a_streamed_answer_that_ends_of_itself_is_completed(thinking):
    fields = {"model": "tiny", "input": "hi", "max_output_tokens": 32, "temperature": 0}
    whole = client(thinking.url).responses.create(**fields)
    with client(thinking.url).responses.stream(**fields) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert final.output_text == whole.output_text == THINKER_CONTENT and final.status == "completed"
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.reasoning_text.delta" in kinds and "response.output_text.delta" in kinds
    assert [item.type for item in final.output] == [item.type for item in whole.output] == ["reasoning", "message"]


# -- Codex ---------------------------------------------------------------------------------------


def codex(url: str, **fields) -> openai.types.responses.Response:
    """A request as Codex sends one (it streams; the same fields, whole)."""
    request = {
        "model": "gpt-5.1-codex",
        "instructions": "You are Codex, a coding agent.",
        "input": CODEX_INPUT,
        "tools": CODEX_TOOLS,
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "0199-session",
        "reasoning": {"summary": "auto"},
        "max_output_tokens": 96,
        "temperature": 0,
        "extra_body": {"client_metadata": {"originator": "codex_cli_rs"}},
        **fields,
    }
    return client(url).responses.create(**request)


def test_a_codex_request_gets_a_call_that_validates_and_takes_its_output_back(server, said):
    first = codex(server.url)
    assert first.status == "completed" and first.model == "gpt-5.1-codex"
    calls = calls_of(first)
    assert len(calls) == 1 and calls == first.output[-1:]
    assert_valid_call(calls[0])
    codex(server.url)
    assert len([line for line in said if "web_search" in line]) == 1  # named in the log once, not refused

    call = calls[0].model_dump(exclude_none=True)
    call.pop("status")
    history = [
        *CODEX_INPUT,
        call,
        {"type": "function_call_output", "call_id": call["call_id"], "output": "src/parser.py"},
    ]
    answer = codex(server.url, input=history, tool_choice="auto", max_output_tokens=4)
    assert answer.output_text and answer.usage.input_tokens > first.usage.input_tokens


def test_a_namespaced_function_is_called_back_with_its_namespace(server):
    named = codex(server.url, tool_choice={"type": "function", "name": "search", "namespace": "mcp__docs__"})
    only = codex(server.url, tools=[DOCS, {"type": "web_search"}])
    for response in (named, only):
        (call,) = calls_of(response)
        assert (call.namespace, call.name) == ("mcp__docs__", "search")
        assert_valid_call(call)
    history = [
        *CODEX_INPUT,
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "search",
            "namespace": "mcp__docs__",
            "arguments": '{"query": "parser"}',
        },
        {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "3 pages"}]},
    ]
    assert codex(server.url, input=history, tool_choice="none", max_output_tokens=2).usage.output_tokens == 2


def test_codexs_streamed_call_is_the_whole_one(server):
    fields = dict(
        model="tiny",
        instructions="You are Codex.",
        input=CODEX_INPUT,
        tools=[DOCS],
        tool_choice="required",
        store=False,
        max_output_tokens=96,
        temperature=0,
    )
    whole = client(server.url).responses.create(**fields)
    with client(server.url).responses.stream(**fields) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert "response.function_call_arguments.delta" in kinds and kinds[-1] == "response.completed"
    got = [(c.namespace, c.name, c.arguments) for c in calls_of(final)]
    assert got == [(c.namespace, c.name, c.arguments) for c in calls_of(whole)] and got


# -- structured output ---------------------------------------------------------------------------


def test_a_json_schema_format_gives_text_that_validates(server):
    text = {"format": {"type": "json_schema", "name": "x", "schema": SCHEMA, "strict": True}}
    response = create(server.url, max_output_tokens=200, text=text)
    assert response.status == "completed", response
    jsonschema.validate(json.loads(response.output_text), SCHEMA)
    assert response.text.format.type == "json_schema"


# -- state ---------------------------------------------------------------------------------------


def test_a_previous_response_reads_as_the_whole_conversation(server):
    first = create(server.url, input="hello", instructions="Be brief.", max_output_tokens=4)
    then = create(server.url, input="and then?", previous_response_id=first.id, max_output_tokens=4)
    conversation = [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "and then?"},
    ]
    whole = create(server.url, input=conversation, max_output_tokens=4)  # instructions are not inherited
    assert then.previous_response_id == first.id
    assert then.usage.input_tokens == whole.usage.input_tokens > first.usage.input_tokens
    assert then.output_text == whole.output_text


def test_an_unknown_or_unstored_previous_response_is_a_400_naming_it(server):
    unstored = create(server.url, store=False, max_output_tokens=2)
    for response_id in ("resp_nope", unstored.id):
        with pytest.raises(openai.BadRequestError) as caught:
            create(server.url, previous_response_id=response_id)
        assert caught.value.body["param"] == "previous_response_id" and response_id in caught.value.message


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"instructions": "Be brief.", "input": CODEX_INPUT, "tools": CODEX_TOOLS, "tool_choice": "required"},
        {
            "input": [
                {"role": "system", "content": "One."},
                {"role": "user", "content": "hi"},
                {"role": "developer", "content": "Two."},
            ]
        },
    ],
    ids=["plain", "codex", "system-turns"],
)
def test_input_tokens_is_what_the_engine_reads(server, fields):
    fields = {"model": "tiny", "input": HELLO, **fields}
    counted = client(server.url).responses.input_tokens.count(**fields)
    assert counted.object == "response.input_tokens"
    assert counted.input_tokens == create(server.url, **fields, max_output_tokens=1).usage.input_tokens > 0


def test_input_tokens_counts_an_input_longer_than_the_context(server, pair):
    """What the count is for: telling a client that its input outgrew the context (512 tokens here)
    before it sends it. The count is not the engine's business, so no context bounds it."""
    long = "word " * 600
    counted = post(server.url, RESPONSES + "/input_tokens", {"input": long})
    assert counted.status_code == 200, counted.text
    expected = len(pair.tokens_for_messages([{"role": "user", "content": long}]))
    assert counted.json() == {"object": "response.input_tokens", "input_tokens": expected}
    assert expected > pair.config.ctx_size


# -- refusals ------------------------------------------------------------------------------------


IMAGE = {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}
SEEN = [{"role": "user", "content": [{"type": "input_text", "text": "see"}, IMAGE]}]
UNKNOWN = {"type": "function", "name": "nope"}
NESTED = b'{"input": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"


@pytest.mark.parametrize(
    "path, body, param",
    [
        pytest.param(RESPONSES, b'{"input": "hi", "max_output_tokens": ', None, id="malformed"),
        pytest.param(RESPONSES, NESTED, None, id="too-deep"),
        pytest.param(RESPONSES, {"input": 42}, "input", id="input-type"),
        pytest.param(RESPONSES, {"input": []}, "input", id="empty-input"),
        pytest.param(RESPONSES, {"input": "hi", "tools": [SHELL], "tool_choice": UNKNOWN}, "tool_choice", id="unknown"),
        pytest.param(
            RESPONSES,
            {"input": "hi", "tools": [{"type": "web_search"}], "tool_choice": "required"},
            "tool_choice",
            id="required-hosted-only",
        ),
        pytest.param(RESPONSES, {"input": SEEN}, "input.0.content.1", id="image"),
        pytest.param(RESPONSES, {"input": "hi", "conversation": "conv_1"}, "conversation", id="conversation"),
        pytest.param(RESPONSES + "/input_tokens", {"input": SEEN}, "input.0.content.1", id="count-image"),
    ],
)
def test_a_bad_request_is_a_400_in_openais_envelope_and_the_server_goes_on(server, path, body, param):
    response = post(server.url, path, body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error.keys() == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    assert error["param"] == param and error["message"]
    assert create(server.url, max_output_tokens=2).usage.output_tokens == 2


def test_an_input_longer_than_the_context_is_a_400_naming_input(server):
    """Codex reads the code; the field at fault is the Responses API's own (`input`), not the
    chat request's it was turned into (`messages`)."""
    with pytest.raises(openai.BadRequestError) as caught:
        create(server.url, input="word " * 600)
    assert caught.value.code == "context_length_exceeded"
    assert caught.value.param == "input"


def test_the_sdk_raises_a_bad_request_with_the_servers_message(server):
    with pytest.raises(openai.BadRequestError) as caught:
        create(server.url, input=[{"role": "user", "content": [IMAGE]}])
    assert caught.value.status_code == 400 and "images are not supported" in caught.value.message


# -- reasoning -----------------------------------------------------------------------------------


def test_a_thinking_template_answers_a_reasoning_item_then_the_message(thinking):
    response = create(thinking.url, input="hi", max_output_tokens=32)
    reasoning, message = response.output
    assert reasoning.type == "reasoning" and [part.text for part in reasoning.content] == [THINKER_REASONING]
    assert message.type == "message" and response.output_text == THINKER_CONTENT
    assert response.status == "completed"
    items = [item.model_dump(exclude_none=True) for item in response.output]
    again = create(thinking.url, input=[{"role": "user", "content": "hi"}, *items, {"role": "user", "content": "hi"}])
    assert again.output_text  # the output items, sent back as they came, are taken


def test_a_reasoning_effort_reaches_the_template(thinking):
    tokens = {}
    for effort in ("none", "high"):
        response = create(thinking.url, input="hi", max_output_tokens=32, reasoning={"effort": effort})
        counted = client(thinking.url).responses.input_tokens.count(
            model="tiny", input="hi", reasoning={"effort": effort}
        )
        assert response.usage.input_tokens == counted.input_tokens
        tokens[effort] = counted.input_tokens
    assert tokens["none"] > tokens["high"] == create(thinking.url, input="hi").usage.input_tokens
