"""Anthropic's Messages API (POST /v1/messages and /v1/messages/count_tokens) on top of the chat
endpoint: a Messages request becomes a chat-completions body here, and a chat answer, whole or
streamed, becomes a Message or Anthropic's server-sent events in anthropic_render.py.

The request is validated as strictly as the chat endpoint's (schemas.Strict: strict types, unknown
fields kept aside and ignored), then turned into a body that schemas.ChatRequest accepts. What the
model served here cannot take is refused by name (images, documents: it reads text only); what it
cannot run is left out and named (Anthropic's server tools, such as web search). A system turn
inside `messages` becomes user text at its place, because most chat templates take a system
message only first; Claude Code's attribution line, which changes with every request, is dropped
from the system text so that the prompt cache holds across turns.
"""

from __future__ import annotations

import functools
import json
import operator
import re
from typing import Annotated, Any, Literal, get_args

from pydantic import Discriminator, Field, Tag, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from .schemas import MAX_INT32, MAX_TOOLS, JsonObject, StopList, Strict, Text, integer

JOIN = "\n\n"  # between the text blocks of one turn, and between system texts
BILLING_LINE = re.compile(r"^[ \t]*x-anthropic-billing-header:[^\n]*(\n|$)", re.MULTILINE)
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # as the chat endpoint names functions
CUSTOM_TOOLS = (None, "custom")  # a tool of any other type is one of Anthropic's server tools
IMAGES = "images are not supported: the model served here reads text only"
DOCUMENTS = "documents are not supported: the model served here reads text only (send the text as a text block)"
ERROR_PREFIX = "Error: "  # what a tool_result with is_error becomes: its text, after this


class AdapterError(Exception):
    """A Messages request this server refuses (a 400): why, and the field at fault."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param


# The request: content blocks.


class TextBlock(Strict):
    type: Literal["text"]
    text: Text
    cache_control: Any = None
    citations: Any = None


class ImageBlock(Strict):
    """Accepted by the schema so that the refusal says why (conversion refuses it)."""

    type: Literal["image"]
    source: Any = None
    cache_control: Any = None


class DocumentBlock(Strict):
    """Accepted by the schema so that the refusal says why (conversion refuses it)."""

    type: Literal["document"]
    source: Any = None
    title: Any = None
    context: Any = None
    citations: Any = None
    cache_control: Any = None


class ToolUseBlock(Strict):
    type: Literal["tool_use"]
    id: Text
    name: Text
    input: JsonObject
    cache_control: Any = None


def _tag(kinds: tuple[str, ...]):
    """A block's union member, named by its `type`; the tag holds a `=`, as schemas.py's do, so that
    an error's param names the field path without it."""

    def tag(value: Any) -> str | None:
        kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
        return f"type={kind}" if isinstance(kind, str) and kind in kinds else None

    return tag


def _union(*models: type[Strict]) -> Any:
    """A union of blocks told apart by `type`; another type is an error that lists the known ones."""
    kinds = [get_args(model.model_fields["type"].annotation)[0] for model in models]
    members = functools.reduce(operator.or_, [Annotated[m, Tag(f"type={k}")] for m, k in zip(models, kinds)])
    known = ", ".join(repr(kind) for kind in kinds)
    return Annotated[
        members,
        Discriminator(
            _tag(tuple(kinds)),
            custom_error_type="invalid_content_block",
            custom_error_message=f"a content block's type must be one of {known}",
        ),
    ]


ResultBlock = _union(TextBlock, ImageBlock, DocumentBlock)


class ToolResultBlock(Strict):
    type: Literal["tool_result"]
    tool_use_id: Text
    content: Text | list[ResultBlock] | None = None
    is_error: bool | None = None
    cache_control: Any = None


class ThinkingBlock(Strict):
    type: Literal["thinking"]
    thinking: Text
    signature: Text | None = None


class RedactedThinkingBlock(Strict):
    type: Literal["redacted_thinking"]
    data: Text


Block = _union(
    TextBlock, ImageBlock, DocumentBlock, ToolUseBlock, ToolResultBlock, ThinkingBlock, RedactedThinkingBlock
)


class InputMessage(Strict):
    role: Literal["user", "assistant", "system"]  # Claude Code sends system turns inside messages
    content: Text | list[Block]


# The request: tools, tool choice, thinking.


class ToolSpec(Strict):
    """A tool the model may call (`type` absent or "custom"), or one of Anthropic's server tools,
    which are left out here."""

    type: Text | None = None
    name: Text
    description: Text | None = None
    input_schema: Annotated[JsonObject | None, Field(validate_default=True)] = None
    cache_control: Any = None
    strict: bool | None = None
    defer_loading: Any = None
    eager_input_streaming: Any = None
    input_examples: Any = None
    allowed_callers: Any = None

    def left_out(self) -> bool:
        return self.type not in CUSTOM_TOOLS

    @field_validator("input_schema", mode="after")
    @classmethod
    def _schema(cls, schema, info: ValidationInfo):
        if schema is None and info.data.get("type") in CUSTOM_TOOLS:
            raise PydanticCustomError("missing", "Field required (a custom tool needs the JSON schema of its input)")
        return schema


class ToolChoice(Strict):
    type: Literal["auto", "any", "tool", "none"]
    disable_parallel_tool_use: bool | None = None
    name: Annotated[Text | None, Field(validate_default=True)] = None

    @field_validator("name", mode="after")
    @classmethod
    def _named(cls, name, info: ValidationInfo):
        if name is None and info.data.get("type") == "tool":
            raise PydanticCustomError("missing", 'Field required (tool_choice of type "tool" names the tool)')
        return name


class Thinking(Strict):
    """Whether the model thinks first: "enabled" and "disabled" switch the chat template's
    thinking; "adaptive" (and "between_tools") leave it to the template's default."""

    type: Literal["enabled", "disabled", "adaptive", "between_tools"]
    budget_tokens: integer(ge=0, le=MAX_INT32) | None = None  # not enforced: max_tokens bounds the answer
    display: Any = None


class Metadata(Strict):
    user_id: Text | None = None


class CountTokensRequest(Strict):
    """The body of POST /v1/messages/count_tokens: the conversation, without sampling."""

    model: Text
    messages: list[InputMessage] = Field(min_length=1)
    system: Text | list[TextBlock] | None = None
    tools: Annotated[list[ToolSpec], Field(max_length=MAX_TOOLS)] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None

    # Accepted and ignored: they do not change the answer, or name what this server does not have.
    context_management: Any = None
    output_config: Any = None
    mcp_servers: Any = None
    container: Any = None


class MessagesRequest(CountTokensRequest):
    """The body of POST /v1/messages."""

    max_tokens: integer(ge=1)  # required, as Anthropic requires it
    stop_sequences: StopList | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=1.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    top_k: integer(ge=0, le=MAX_INT32) | None = None
    stream: bool = False
    metadata: Metadata | None = None

    # Accepted and ignored.
    service_tier: Any = None
    inference_geo: Any = None


# The request, as a chat-completions body.


def chat_body(request: MessagesRequest) -> tuple[dict, list[str]]:
    """The chat-completions body of a Messages request, and the names of the server tools left out."""
    body, left_out = _conversation(request)
    body["max_tokens"] = request.max_tokens
    for name in ("temperature", "top_p", "top_k"):
        if getattr(request, name) is not None:
            body[name] = getattr(request, name)
    if request.stop_sequences:
        body["stop"] = list(request.stop_sequences)
    if request.stream:
        body["stream"] = True
    if request.metadata is not None and request.metadata.user_id:
        body["user"] = request.metadata.user_id  # the lookup pool keys the client by it
    return body, left_out


def count_body(request: CountTokensRequest) -> tuple[dict, list[str]]:
    """The chat-completions body whose prompt is the conversation to count (one token of answer, whole)."""
    body, left_out = _conversation(request)
    body.update(max_tokens=1, stream=False)
    return body, left_out


def _conversation(request: CountTokensRequest) -> tuple[dict, list[str]]:
    """What both endpoints share: model, messages, tools, tool choice and the thinking switch."""
    tools, left_out = _tools(request.tools or [])
    body: dict = {"model": request.model, "messages": _messages(request)}
    if tools:
        body["tools"] = tools
    if request.tool_choice is not None:
        body.update(_tool_choice(request.tool_choice, tools, left_out))
    if request.thinking is not None and request.thinking.type in ("enabled", "disabled"):
        body["chat_template_kwargs"] = {"enable_thinking": request.thinking.type == "enabled"}
    return body, left_out


def _tools(tools: list[ToolSpec]) -> tuple[list[dict], list[str]]:
    """The custom tools as chat functions; the server tools' names, left out."""
    functions, left_out = [], []
    for i, tool in enumerate(tools):
        if tool.type not in CUSTOM_TOOLS:
            left_out.append(tool.name)
            continue
        if not TOOL_NAME.match(tool.name):
            raise AdapterError("a tool name must be 1 to 64 letters, digits, underscores or dashes", f"tools.{i}.name")
        function: dict = {"name": tool.name, "parameters": tool.input_schema}
        if tool.description is not None:
            function["description"] = tool.description
        if tool.strict is not None:
            function["strict"] = tool.strict
        functions.append({"type": "function", "function": function})
    return functions, left_out


def _tool_choice(choice: ToolChoice, tools: list[dict], left_out: list[str]) -> dict:
    """The chat fields of a tool choice; one the declared tools cannot satisfy is refused."""
    fields: dict = {}
    if choice.type == "tool":
        if choice.name not in [t["function"]["name"] for t in tools]:
            why = "a server tool this server cannot run" if choice.name in left_out else "not declared in tools"
            raise AdapterError(f"tool_choice names the tool {choice.name!r}, {why}", "tool_choice.name")
        fields["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
    elif choice.type == "any":
        if not tools:
            raise AdapterError('tool_choice "any" needs at least one tool this server can run in tools', "tool_choice")
        fields["tool_choice"] = "required"
    else:
        fields["tool_choice"] = choice.type
    if choice.disable_parallel_tool_use:
        fields["parallel_tool_calls"] = False
    return fields


def _messages(request: CountTokensRequest) -> list[dict]:
    """The chat messages: the system text first, then each turn's. A system turn before any other
    joins the system text; a later one is user text at its place (joined to the user turn beside it)."""
    system = [text for text in [_system_text(request.system)] if text]
    out: list[dict] = []
    pending: list[str] = []  # system turns' text, for the next user turn
    for i, turn in enumerate(request.messages):
        if turn.role == "system":
            text = _system_text(turn.content, f"messages.{i}.content")
            if text:
                (pending if out or pending else system).append(text)
        elif turn.role == "user":
            out += _user(turn, i, pending)
            pending = []
        else:
            if pending:
                out.append({"role": "user", "content": JOIN.join(pending)})
                pending = []
            out.append(_assistant(turn, i))
    if pending:
        out.append({"role": "user", "content": JOIN.join(pending)})
    head = [{"role": "system", "content": JOIN.join(system)}] if system else []
    return head + _merged(out)


def _system_text(content: str | list | None, at: str = "system") -> str:
    """System text without Claude Code's attribution line, which changes with every request."""
    if content is None:
        return ""
    blocks = [content] if isinstance(content, str) else _texts(content, at, "a system turn carries text only")
    kept = [BILLING_LINE.sub("", text) for text in blocks]
    return JOIN.join(text for text in kept if text.strip())


def _texts(blocks: list, at: str, other: str) -> list[str]:
    """The text of text blocks; an image or document is refused, any other block with `other`."""
    texts = []
    for j, block in enumerate(blocks):
        if block.type == "text":
            texts.append(block.text)
        else:
            _refuse(block, f"{at}.{j}", other)
    return texts


def _refuse(block, at: str, other: str):
    raise AdapterError(IMAGES if block.type == "image" else DOCUMENTS if block.type == "document" else other, at)


def _user(turn: InputMessage, i: int, before: list[str]) -> list[dict]:
    """A user turn: a tool message per tool_result, then its text (after the system text before it)."""
    if isinstance(turn.content, str):
        return [{"role": "user", "content": JOIN.join([*before, turn.content])}]
    results, texts = [], list(before)
    for j, block in enumerate(turn.content):
        at = f"messages.{i}.content.{j}"
        if block.type == "tool_result":
            results.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": _result_text(block, at)})
        elif block.type == "text":
            texts.append(block.text)
        else:
            _refuse(block, at, f"a user turn cannot carry a {block.type} block")
    if results and not texts:
        return results
    return [*results, {"role": "user", "content": JOIN.join(texts)}]


def _result_text(block: ToolResultBlock, at: str) -> str:
    """A tool result's text; a failed call's after `Error: `, so that the model reads that it failed."""
    content = block.content
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    else:
        text = JOIN.join(_texts(content, f"{at}.content", "a tool_result carries text only"))
    return ERROR_PREFIX + text if block.is_error else text


def _assistant(turn: InputMessage, i: int) -> dict:
    """An assistant turn: its text as content, its thinking as reasoning_content, its tool_use
    blocks as tool_calls (content None when it only called tools)."""
    if isinstance(turn.content, str):
        return {"role": "assistant", "content": turn.content}
    texts, thoughts, calls = [], [], []
    for j, block in enumerate(turn.content):
        if block.type == "text":
            texts.append(block.text)
        elif block.type == "thinking":
            thoughts.append(block.thinking)
        elif block.type == "tool_use":
            arguments = json.dumps(block.input, ensure_ascii=False)
            calls.append({"id": block.id, "type": "function", "function": {"name": block.name, "arguments": arguments}})
        elif block.type != "redacted_thinking":  # opaque: nothing the model here can read
            _refuse(block, f"messages.{i}.content.{j}", f"an assistant turn cannot carry a {block.type} block")
    if len(calls) > MAX_TOOLS:
        raise AdapterError(f"an assistant turn may carry at most {MAX_TOOLS} tool_use blocks", f"messages.{i}.content")
    message: dict = {"role": "assistant", "content": JOIN.join(texts) if texts or not calls else None}
    if thoughts:
        message["reasoning_content"] = JOIN.join(thoughts)
    if calls:
        message["tool_calls"] = calls
    return message


def _merged(messages: list[dict]) -> list[dict]:
    """Adjacent user messages as one, as Anthropic reads consecutive user turns (and as chat
    templates that want roles to alternate need them)."""
    out: list[dict] = []
    for message in messages:
        if out and message["role"] == "user" and out[-1]["role"] == "user":
            out[-1] = {"role": "user", "content": out[-1]["content"] + JOIN + message["content"]}
        else:
            out.append(message)
    return out
