"""An Anthropic Messages answer from a chat answer: the Message of a whole answer
(`message_response`), Anthropic's server-sent events of a streamed one (`MessageStream`), and
Anthropic's error envelope."""

from __future__ import annotations

import json
import re
import uuid

from pydantic_core import from_json

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
ERROR_KINDS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


def message_response(
    *, message_id: str, model: str, message: dict, finish_reason: str, usage: dict, stop_sequence: str | None
) -> dict:
    """Anthropic's Message for a whole chat answer (`message` is the answer's choices[0].message)."""
    content: list[dict] = []
    if message.get("reasoning_content"):
        content.append({"type": "thinking", "thinking": message["reasoning_content"], "signature": ""})
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    calls = message.get("tool_calls") or []
    for call in calls:
        function = call.get("function") or {}
        content.append(
            {
                "type": "tool_use",
                "id": tool_use_id(call.get("id")),
                "name": function.get("name") or "",
                "input": tool_input(function.get("arguments") or ""),
            }
        )
    reason = stop_reason(finish_reason, stop_sequence, bool(calls))
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": stop_sequence if reason == "stop_sequence" else None,
        "usage": anthropic_usage(usage),
    }


def stop_reason(finish_reason: str, stop_sequence: str | None, called: bool) -> str:
    """Anthropic's stop reason for a chat finish reason (a cancelled answer ended its turn)."""
    if finish_reason == "stop" and stop_sequence is not None:
        return "stop_sequence"
    if finish_reason == "stop" and called:
        return "tool_use"
    return STOP_REASONS.get(finish_reason, "end_turn")


def anthropic_usage(usage: dict | None) -> dict:
    """Anthropic's usage: the prompt tokens read from the cache apart from those read anew."""
    usage = usage or {}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return {
        "input_tokens": max(0, (usage.get("prompt_tokens") or 0) - cached),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
        "output_tokens": usage.get("completion_tokens") or 0,
    }


def tool_use_id(call_id: str | None) -> str:
    """A tool_use id for a chat call id: the same id when it is one already (a call the client
    named), else `toolu_` and the call id's letters and digits (a fresh one when it has none)."""
    if call_id and call_id.startswith("toolu_"):
        return call_id
    rest = re.sub(r"[^a-zA-Z0-9_-]", "", (call_id or "").removeprefix("call_"))
    return "toolu_" + (rest or uuid.uuid4().hex[:24])


def tool_input(arguments: str) -> dict:
    """A call's arguments as an object: JSON cut short (by max_tokens) gives what it holds, as the
    Anthropic SDK reads streamed input; arguments that are no JSON object give {}."""
    try:
        value = from_json(arguments, allow_partial=True)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class MessageStream:
    """A streamed chat answer as Anthropic's events: message_start, then a content block per kind
    of text (thinking, text, each tool call) opened when its first piece comes and closed when the
    next kind starts, then message_delta and message_stop."""

    def __init__(self, *, message_id: str, model: str, input_tokens: int):
        self.message_id = message_id
        self.model = model
        self.input_tokens = input_tokens
        self.index = -1  # the open block's index
        self.open: str | None = None  # its type
        self.call: int | None = None  # the open tool_use block's chat index
        self.called = False

    def start(self) -> list[tuple[str, dict]]:
        message = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": self.input_tokens,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                "output_tokens": 0,
            },
        }
        return [("message_start", {"type": "message_start", "message": message}), ("ping", {"type": "ping"})]

    def delta(self, chat_delta: dict) -> list[tuple[str, dict]]:
        """The events of one chat chunk's choices[0].delta: reasoning, then content, then calls."""
        events = []
        if chat_delta.get("reasoning_content"):
            events += self._piece("thinking", {"type": "thinking_delta", "thinking": chat_delta["reasoning_content"]})
        if chat_delta.get("content"):
            events += self._piece("text", {"type": "text_delta", "text": chat_delta["content"]})
        for item in chat_delta.get("tool_calls") or []:
            events += self._call(item)
        return events

    def finish(self, finish_reason: str, usage: dict, stop_sequence: str | None) -> list[tuple[str, dict]]:
        """The closing events: the open block's end, why the answer stopped, and its usage."""
        events = self._close()
        reason = stop_reason(finish_reason, stop_sequence, self.called)
        delta = {"stop_reason": reason, "stop_sequence": stop_sequence if reason == "stop_sequence" else None}
        usage = anthropic_usage(usage)
        events.append(("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}))
        events.append(("message_stop", {"type": "message_stop"}))
        return events

    def error(self, message: str, kind: str = "api_error") -> list[tuple[str, dict]]:
        return [("error", error_body(message, kind))]

    def _piece(self, kind: str, delta: dict) -> list[tuple[str, dict]]:
        events = []
        if self.open != kind:
            empty = (
                {"type": "thinking", "thinking": "", "signature": ""}
                if kind == "thinking"
                else {"type": "text", "text": ""}
            )
            events = self._start(kind, empty)
        return [*events, self._delta(delta)]

    def _call(self, item: dict) -> list[tuple[str, dict]]:
        """A tool call's delta: a call not open yet opens a tool_use block; its arguments follow."""
        function = item.get("function") or {}
        events = []
        index = item.get("index", 0)
        if self.open != "tool_use" or self.call != index:
            block = {
                "type": "tool_use",
                "id": tool_use_id(item.get("id")),
                "name": function.get("name") or "",
                "input": {},
            }
            events = self._start("tool_use", block)
            self.call, self.called = index, True
        if function.get("arguments"):
            events.append(self._delta({"type": "input_json_delta", "partial_json": function["arguments"]}))
        return events

    def _start(self, kind: str, block: dict) -> list[tuple[str, dict]]:
        events = self._close()
        self.index += 1
        self.open = kind
        events.append(
            ("content_block_start", {"type": "content_block_start", "index": self.index, "content_block": block})
        )
        return events

    def _delta(self, delta: dict) -> tuple[str, dict]:
        return ("content_block_delta", {"type": "content_block_delta", "index": self.index, "delta": delta})

    def _close(self) -> list[tuple[str, dict]]:
        """The open block's end; a thinking block's signature before it (empty: nothing signs it here)."""
        if self.open is None:
            return []
        events = []
        if self.open == "thinking":
            events.append(self._delta({"type": "signature_delta", "signature": ""}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": self.index}))
        self.open = self.call = None
        return events


def sse(name: str, data: dict) -> str:
    """One server-sent event, as Anthropic names them."""
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def error_body(message: str, kind: str = "invalid_request_error") -> dict:
    """Anthropic's error envelope."""
    return {"type": "error", "error": {"type": kind, "message": message}}


def error_kind(status: int) -> str:
    """Anthropic's error type for an HTTP status."""
    if status in ERROR_KINDS:
        return ERROR_KINDS[status]
    return "api_error" if status >= 500 else "invalid_request_error"
