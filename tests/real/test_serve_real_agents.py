"""Anthropic's Messages API and OpenAI's Responses API on the real Qwen2.5-Coder pair, through the
official SDKs: a greedy answer equals chat's for the same conversation, whole and streamed (or
parts from it only at measured near-ties); a
required tool call comes back in Qwen's own syntax as a tool_use block / function_call item whose
input validates, and its result sent back is answered; count_tokens is what the engine reads."""

from __future__ import annotations

import json

import anthropic
import httpx
import jsonschema
import openai
import pytest
from serve_helpers import WAIT, served

from specrun.engine.identity import check_output, logit_noise, tolerance_from_noise
from specrun.runtime.pair import Pair, PairConfig

pytestmark = pytest.mark.real

CTX = 2048
TOKENS = 24
ASK = "Name three uses of Python's itertools module."
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def server(real_pair_paths):
    target, draft = real_pair_paths
    pair = Pair(PairConfig(target, draft, ctx_size=CTX))
    try:
        with served(pair, parallel=1) as running:
            yield running
    finally:
        pair.close()


def chat_text(server, messages: list[dict]) -> str:
    """Chat's greedy answer once the prompt is in the prompt cache, as it is for the requests
    compared with it (read cold, its first token may part at a near-tie of batched and
    single-token kernels)."""
    body = {"messages": messages, "max_tokens": TOKENS, "temperature": 0}
    for _ in range(2):
        response = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=WAIT * 10)
    return response.json()["choices"][0]["message"]["content"]


def assert_targets_answer(paths, system: str, text: str, expected: str) -> None:
    """`text` is chat's `expected`, or every token of it is the target's own choice or a measured
    near-tie of batched and single-token kernels (engine/identity.py)."""
    if text == expected:
        return
    checker = Pair(PairConfig(paths[0], None, ctx_size=CTX))
    try:
        prompt = checker.prompt_tokens(ASK, system=system)
        tokens = checker.target_model.tokenize(text, add_special=False, parse_special=False)
        tolerance = tolerance_from_noise(logit_noise(checker.session.target_ctx, prompt))
        verdict = check_output(checker.session.target_ctx, prompt, tokens, tolerance)
    finally:
        checker.close()
    assert not verdict.violations and verdict.ties, (text, expected, verdict.to_dict())


def test_messages_answer_as_chat_does_and_call_a_tool(server, real_pair_paths):
    client = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0, timeout=WAIT * 10)
    system = "You are terse."
    expected = chat_text(server, [{"role": "system", "content": system}, {"role": "user", "content": ASK}])
    greedy = {"extra_body": {"temperature": 0}}  # the SDK no longer names it; the API still takes it
    ask = {"model": "qwen", "max_tokens": TOKENS, "system": system, **greedy}
    message = client.messages.create(**ask, messages=[{"role": "user", "content": ASK}])
    assert message.stop_reason == "max_tokens"
    assert_targets_answer(real_pair_paths, system, message.content[0].text, expected)
    with client.messages.stream(**ask, messages=[{"role": "user", "content": ASK}]) as stream:
        assert_targets_answer(real_pair_paths, system, stream.get_final_message().content[0].text, expected)
    counted = client.messages.count_tokens(model="qwen", system=system, messages=[{"role": "user", "content": ASK}])
    usage = message.usage
    assert counted.input_tokens == usage.input_tokens + (usage.cache_read_input_tokens or 0)

    tools = [{"name": "get_weather", "description": "Weather in a city", "input_schema": WEATHER_SCHEMA}]
    turn = [{"role": "user", "content": "What is the weather in Paris?"}]
    called = client.messages.create(
        model="qwen", max_tokens=64, tools=tools, tool_choice={"type": "any"}, messages=turn, **greedy
    )
    use = next(block for block in called.content if block.type == "tool_use")
    jsonschema.validate(use.input, WEATHER_SCHEMA)
    assert called.stop_reason == "tool_use" and use.name == "get_weather"
    result = {"type": "tool_result", "tool_use_id": use.id, "content": "18 degrees, sunny"}
    answered = client.messages.create(
        model="qwen",
        max_tokens=32,
        tools=tools,
        tool_choice={"type": "none"},  # whether to call again is the model's choice; "none" asks for the answer
        messages=[*turn, {"role": "assistant", "content": called.content}, {"role": "user", "content": [result]}],
        **greedy,
    )
    assert [block.type for block in answered.content] == ["text"] and answered.content[0].text.strip()
    assert answered.stop_reason in ("end_turn", "max_tokens")


def test_responses_answer_as_chat_does_and_call_a_tool(server, real_pair_paths):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=WAIT * 10)
    expected = chat_text(server, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": ASK}])
    ask = {"model": "qwen", "instructions": "Be brief.", "input": ASK, "max_output_tokens": TOKENS, "temperature": 0}
    response = client.responses.create(**ask)
    assert response.status == "incomplete"
    assert_targets_answer(real_pair_paths, "Be brief.", response.output_text, expected)
    with client.responses.stream(**ask) as stream:  # cut by max_output_tokens: it ends "incomplete", not "completed"
        last = [event for event in stream][-1]
    assert last.type == "response.incomplete"
    assert_targets_answer(real_pair_paths, "Be brief.", last.response.output_text, expected)

    tools = [{"type": "function", "name": "get_weather", "parameters": WEATHER_SCHEMA}, {"type": "web_search"}]
    turn = [{"role": "user", "content": "What is the weather in Paris?"}]
    called = client.responses.create(
        model="qwen", input=turn, tools=tools, tool_choice="required", max_output_tokens=64, temperature=0, store=False
    )
    call = next(item for item in called.output if item.type == "function_call")
    assert call.name == "get_weather"
    jsonschema.validate(json.loads(call.arguments), WEATHER_SCHEMA)
    back = [
        *turn,
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "18 degrees, sunny"},
    ]
    answered = client.responses.create(model="qwen", input=back, tools=tools, max_output_tokens=32, temperature=0)
    assert answered.output and answered.usage.input_tokens > called.usage.input_tokens
