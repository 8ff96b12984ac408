"""While a long prompt is read no event comes for minutes on a CPU: a stream then sends its API's
keep-alive (Anthropic's `ping`, an SSE comment on the Responses API) so that no client or proxy
takes the silence for a dead server; the answer's events follow unchanged."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from serve_helpers import FLAT_COSTS, WAIT, StepGate, load_pair, served

from specrun import defaults
from specrun.serve.answers import with_keepalive


def test_keepalives_fill_the_silences_and_the_items_pass_in_order():
    async def slow():
        for item in ("a", "b"):
            await asyncio.sleep(0.05)
            yield item

    async def run():
        return [item async for item in with_keepalive(slow(), 0.01)]

    got = asyncio.run(run())
    assert [item for item in got if item is not None] == ["a", "b"]
    assert got.index("a") > 0 and got.count(None) >= 4


def test_an_error_of_the_items_is_raised_to_the_reader():
    async def failing():
        yield "a"
        raise ValueError("boom")

    async def run():
        return [item async for item in with_keepalive(failing(), 1.0)]

    with pytest.raises(ValueError, match="boom"):
        asyncio.run(run())


TOOL = {"name": "lookup", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}


@pytest.fixture(scope="module")
def pair(tiny_target):
    loaded = load_pair(tiny_target, None)
    yield loaded
    loaded.close()


@pytest.mark.parametrize(
    "path, body, keepalive",
    [
        ("/v1/messages", {"model": "m", "max_tokens": 4}, "event: ping"),
        ("/v1/responses", {"model": "m", "max_output_tokens": 4}, ": keep-alive"),
        (  # a constrained stream (a required call) starts before its sequence is admitted too
            "/v1/messages",
            {"model": "m", "max_tokens": 48, "tools": [TOOL], "tool_choice": {"type": "any"}},
            "event: ping",
        ),
    ],
)
def test_a_stream_waiting_for_its_first_step_sends_keepalives(pair, monkeypatch, path, body, keepalive):
    monkeypatch.setattr(defaults, "SERVE_KEEPALIVE_S", 0.05)
    gate = StepGate()
    with served(pair, gate=gate, costs=FLAT_COSTS, mode="off") as running:
        ask = {
            **body,
            "stream": True,
            ("messages" if "messages" in path else "input"): [{"role": "user", "content": "hi"}],
        }
        with httpx.stream("POST", running.url + path, json=ask, timeout=WAIT) as response:
            lines = response.iter_lines()
            seen = []
            while seen.count(keepalive) < 3:
                seen.append(next(lines))
            gate.open()
            seen += list(lines)
    text = "\n".join(seen)
    assert response.status_code == 200
    assert ("message_stop" if "messages" in path else "response.incomplete") in text
    if "tools" in body:
        assert '"type": "tool_use"' in text
