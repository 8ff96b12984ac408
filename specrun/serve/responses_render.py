"""A Responses API answer from a chat answer: the Response object of a whole answer
(`response_object`), and the typed server-sent events of a streamed one (`ResponseStream`), with
each namespaced function call given back with its `name` and `namespace` apart, as Codex routes it."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Mapping
from typing import Any

from .responses import Names, tool_names
from .responses_request import Prompt, ResponsesRequest

# -- the answer ----------------------------------------------------------------------------------


def new_response_id() -> str:
    return f"resp_{uuid.uuid4().hex}"


def _item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def _reasoning_item(item_id: str, text: str, status: str) -> dict:
    content = [{"type": "reasoning_text", "text": text}]
    return {"type": "reasoning", "id": item_id, "summary": [], "content": content, "status": status}


def _message_item(item_id: str, text: str, status: str) -> dict:
    content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    return {"type": "message", "id": item_id, "role": "assistant", "status": status, "content": content}


def _call_item(item_id: str, call_id: str, chat_name: str, arguments: str, names: Names, status: str) -> dict:
    item = {"type": "function_call", "id": item_id, "call_id": call_id, "arguments": arguments, "status": status}
    return _name(item, chat_name, names)


def _name(item: dict, chat_name: str, names: Names) -> dict:
    """A call's item named as the client declared the function: name, and namespace where it has one."""
    namespace, item["name"] = names.back(chat_name)
    item.pop("namespace", None)
    if namespace is not None:
        item["namespace"] = namespace
    return item


def _usage(usage: Mapping | None) -> dict | None:
    """Chat's usage as the Responses API counts it (reasoning tokens are not counted apart here)."""
    if usage is None:
        return None
    prompt, answer = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": answer,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.get("total_tokens", prompt + answer),
    }


def _dump(value) -> Any:
    return value.model_dump(by_alias=True, exclude_none=True) if hasattr(value, "model_dump") else value


def _envelope(
    response_id: str, model: str, created: int, request: Prompt, *, status: str, output: list[dict], usage: dict | None
) -> dict:
    """A Response object: the answer, and the request's settings echoed as OpenAI echoes them."""
    text = _dump(request.text) if request.text is not None else {}
    reasoning = _dump(request.reasoning) if request.reasoning is not None else {}
    return {
        "id": response_id,
        "object": "response",
        "created_at": created,
        "status": status,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": request.instructions,
        "model": model,
        "output": output,
        "parallel_tool_calls": request.parallel_tool_calls is not False,
        "tool_choice": _dump(request.tool_choice) if request.tool_choice is not None else "auto",
        "tools": [_dump(tool) for tool in request.tools or []],
        "text": {"format": {"type": "text"}, **text},
        "reasoning": {"effort": None, "summary": None, **reasoning},
        "previous_response_id": request.previous_response_id,
        "truncation": request.truncation or "disabled",
        "background": False,
        "usage": usage,
        **_settings(request),
    }


def _settings(request: Prompt) -> dict:
    if not isinstance(request, ResponsesRequest):
        return {}
    return {
        "max_output_tokens": request.max_output_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "store": request.store is not False,
        "metadata": request.metadata or {},
        "prompt_cache_key": request.prompt_cache_key,
        "safety_identifier": request.safety_identifier,
        "user": request.user,
    }


def response_object(
    *,
    response_id: str,
    model: str,
    created: int,
    request: Prompt,
    message: Mapping,
    finish_reason: str,
    usage: Mapping | None,
    status: str = "completed",
) -> dict:
    """The Response for a whole chat answer: `message` is its `choices[0].message`, `usage` its
    usage. Output items in order: reasoning, message, function calls; an answer cut by its token
    limit (finish_reason "length") is "incomplete", its last item too."""
    status = "incomplete" if finish_reason == "length" else status
    names = tool_names(request)
    output = []
    if message.get("reasoning_content"):
        output.append(_reasoning_item(_item_id("rs"), message["reasoning_content"], "completed"))
    if message.get("content"):
        output.append(_message_item(_item_id("msg"), message["content"], "completed"))
    for call in message.get("tool_calls") or []:
        name, arguments = call["function"]["name"], call["function"]["arguments"]
        output.append(_call_item(_item_id("fc"), call["id"], name, arguments, names, "completed"))
    if output and status == "incomplete":
        output[-1]["status"] = "incomplete"
    return _envelope(response_id, model, created, request, status=status, output=output, usage=_usage(usage))


class ResponseStream:
    """A streamed chat answer as the Responses API streams it: `start`, then `delta` for each chat
    delta, then `finish` (or `error`); each gives the events to send, in order, numbered."""

    def __init__(self, *, response_id: str, model: str, created: int, request: Prompt):
        self.response_id, self.model, self.created, self.request = response_id, model, created, request
        self.names = tool_names(request)
        self.sequence = 0
        self.output: list[dict] = []  # items, the last maybe still open
        self.open: str | None = None  # the kind of the last item while open: reasoning, message, call
        self.calls: dict[int, int] = {}  # a chat call's index → its item's output index
        self.chat_names: dict[int, str] = {}  # an output index → its call's chat name

    def start(self) -> list[dict]:
        response = self._response("in_progress", None)
        return [self._event(f"response.{kind}", response=response) for kind in ("created", "in_progress")]

    def delta(self, chat_delta: Mapping) -> list[dict]:
        """The events for one chat delta: reasoning_content, content, tool_calls pieces."""
        events: list[dict] = []
        if chat_delta.get("reasoning_content"):
            events += self._text("reasoning", chat_delta["reasoning_content"])
        if chat_delta.get("content"):
            events += self._text("message", chat_delta["content"])
        for piece in chat_delta.get("tool_calls") or []:
            events += self._call(piece)
        return events

    def finish(self, finish_reason: str, usage: Mapping | None) -> list[dict]:
        """The last events: the open item finished, then response.completed (response.incomplete
        when the answer was cut by its token limit), with the whole Response."""
        status = "incomplete" if finish_reason == "length" else "completed"
        events = self._close(status)
        events.append(self._event(f"response.{status}", response=self._response(status, _usage(usage))))
        return events

    def error(self, message: str, code: str = "server_error") -> list[dict]:
        """The open item cut, then response.failed carrying the error, as Codex reads one (a code
        "context_length_exceeded" tells it the conversation outgrew the context)."""
        events = self._close("incomplete")
        response = self._response("failed", None)
        response["error"] = {"code": code, "message": message}
        events.append(self._event("response.failed", response=response))
        return events

    # -- items

    def _text(self, kind: str, piece: str) -> list[dict]:
        events = [] if self.open == kind else [*self._close("completed"), *self._open_text(kind)]
        item = self.output[-1]
        item["content"][0]["text"] += piece
        event = "response.reasoning_text.delta" if kind == "reasoning" else "response.output_text.delta"
        extra = {"logprobs": []} if kind == "message" else {}
        return [*events, self._event(event, **self._where(), content_index=0, delta=piece, **extra)]

    def _open_text(self, kind: str) -> list[dict]:
        if kind == "reasoning":
            item, part = _reasoning_item(_item_id("rs"), "", "in_progress"), {"type": "reasoning_text", "text": ""}
        else:
            item = _message_item(_item_id("msg"), "", "in_progress")
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        added = self._added({**item, "content": []})
        self.output.append(item)
        self.open = kind
        return [added, self._event("response.content_part.added", **self._where(), content_index=0, part=part)]

    def _call(self, piece: Mapping) -> list[dict]:
        index = piece.get("index", 0)
        function = piece.get("function") or {}
        events: list[dict] = []
        if index not in self.calls:
            events += self._close("completed")
            chat_name = function.get("name") or ""
            call_id = piece.get("id") or f"call_{uuid.uuid4().hex[:24]}"
            item = _call_item(_item_id("fc"), call_id, chat_name, "", self.names, "in_progress")
            events.append(self._added(item))
            self.output.append(item)
            self.open, self.calls[index] = "call", len(self.output) - 1
            self.chat_names[self.calls[index]] = chat_name
        elif function.get("name"):  # a name sent in pieces
            at = self.calls[index]
            self.chat_names[at] += function["name"]
            _name(self.output[at], self.chat_names[at], self.names)
        arguments = function.get("arguments") or ""
        if arguments:
            at = self.calls[index]
            self.output[at]["arguments"] += arguments
            events.append(self._event("response.function_call_arguments.delta", **self._where(at), delta=arguments))
        return events

    def _close(self, status: str) -> list[dict]:
        """The events that finish the open item (none open: none)."""
        if self.open is None:
            return []
        item, where = self.output[-1], self._where()
        item["status"] = status
        if self.open == "call":
            events = [self._event("response.function_call_arguments.done", **where, arguments=item["arguments"])]
        else:
            part, done = dict(item["content"][0]), "response.output_text.done"
            if self.open == "reasoning":
                done = "response.reasoning_text.done"
            extra = {"logprobs": []} if self.open == "message" else {}
            events = [
                self._event(done, **where, content_index=0, text=part["text"], **extra),
                self._event("response.content_part.done", **where, content_index=0, part=part),
            ]
        self.open = None
        events.append(self._event("response.output_item.done", output_index=where["output_index"], item=item))
        return events

    def _added(self, item: dict) -> dict:
        return self._event("response.output_item.added", output_index=len(self.output), item=item)

    def _where(self, at: int | None = None) -> dict:
        at = len(self.output) - 1 if at is None else at
        return {"item_id": self.output[at]["id"], "output_index": at}

    def _response(self, status: str, usage: dict | None) -> dict:
        return _envelope(
            self.response_id, self.model, self.created, self.request, status=status, output=self.output, usage=usage
        )

    def _event(self, kind: str, **fields) -> dict:
        """An event, numbered; a snapshot, so that later deltas do not change what was sent."""
        event = {"type": kind, "sequence_number": self.sequence, **copy.deepcopy(fields)}
        self.sequence += 1
        return event


def sse(event: Mapping) -> str:
    """One server-sent event, named by its type as OpenAI sends them."""
    return f"event: {event['type']}\ndata: {json.dumps(event, ensure_ascii=False)}\n\n"


def input_tokens_body(count: int) -> dict:
    """The answer of POST /v1/responses/input_tokens."""
    return {"object": "response.input_tokens", "input_tokens": count}
