"""OpenAI's Responses API (POST /v1/responses, /v1/responses/input_tokens) on top of the chat path:
a Responses body becomes a chat completions body (`chat_body`), and the chat answer, whole or as
deltas, becomes a Response object (`response_object`) or its server-sent events (`ResponseStream`).
Nothing here runs the model; app.py does, through the chat path.

Stateless first, as Codex uses it (the whole conversation in `input`, `store` false); a
`previous_response_id` is looked up in a `ResponseStore`, a bounded in-memory store of recent
conversations (the least recently used go first; all go with a restart). What the chat path cannot
do is left out and named for a warning, not refused: hosted tools (web search, file search, code
interpreter...) that this server does not run, and input items of them. Images and files in a
message are refused: the models served here read text only.

The function tools of a `namespace` tool (as Codex declares an MCP server's tools) become chat
functions named as Codex flattens them (`mcp__docs__` + `search` → `mcp__docs__search`), made valid
chat names where they are not; a call of one is given back with its `name` and `namespace` apart,
as Codex routes it (`Names`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag

from .schemas import MAX_INT32, MAX_TOOLS, JsonObject, JsonObjectFormat, Strict, Text, TextFormat, integer

MAX_ITEMS = 8192  # input items of one request (a long agent session stays far below)
MAX_PARTS = 1024  # content parts of one item
MAX_INCLUDE = 32
CHAT_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # chat's function names (schemas.FunctionSpec)
NOT_IN_NAME = re.compile(r"[^a-zA-Z0-9_-]")
DEFAULT_NAMESPACE = "functions"  # Codex's namespace of top-level functions: flattened to the bare name
NO_THINKING = ("none", "minimal")  # reasoning efforts that turn a thinking template's thinking off
TEXT_PARTS = ("input_text", "output_text", "text")
MEDIA = {"input_image": "images are", "input_file": "files are", "input_audio": "audio is"}
OMITTED_MEDIA = "[{kind} left out: the model served here reads text only]"


class AdapterError(Exception):
    """A Responses request the chat path cannot serve: a 400 with this message, naming `param`."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param


# -- the request ---------------------------------------------------------------------------------


def _kind(value: Any) -> Any:
    return value.get("type") if isinstance(value, dict) else getattr(value, "type", None)


def _tagged(*kinds: str, default: str | None = None):
    """A discriminator on `type`: the member tagged `type=KIND`, else `type=other`. Its tags hold a
    `=` so that an error's loc, as app.py reads it, names the field path without them."""

    def tag(value: Any) -> str:
        kind = _kind(value)
        if kind is None and default is not None and isinstance(value, dict) and "role" in value:
            kind = default  # an easy input message: `type` may be left out
        return f"type={kind}" if kind in kinds else "type=other"

    return Discriminator(tag)


class TextPart(Strict):
    type: Literal["input_text", "output_text", "text"]
    text: Text


class RefusalPart(Strict):
    type: Literal["refusal"]
    refusal: Text


class OtherPart(Strict):
    """An image, a file, audio...: refused in a message, left out of a tool's output."""

    type: Text


def _part_tag(value: Any) -> str:
    kind = _kind(value)
    return "type=text" if kind in TEXT_PARTS else "type=refusal" if kind == "refusal" else "type=other"


Part = Annotated[
    Annotated[TextPart, Tag("type=text")]
    | Annotated[RefusalPart, Tag("type=refusal")]
    | Annotated[OtherPart, Tag("type=other")],
    Discriminator(_part_tag),
]
Content = Text | Annotated[list[Part], Field(max_length=MAX_PARTS)]


class MessageItem(Strict):
    type: Literal["message"] = "message"
    role: Literal["system", "developer", "user", "assistant"]
    content: Content
    id: Text | None = None
    status: Text | None = None
    phase: Text | None = None  # Codex's commentary / final answer: nothing for the template


class FunctionCallItem(Strict):
    type: Literal["function_call"]
    call_id: Text
    name: Text
    arguments: Text  # a JSON object, as text
    namespace: Text | None = None
    id: Text | None = None
    status: Text | None = None


class FunctionCallOutputItem(Strict):
    type: Literal["function_call_output"]
    call_id: Text
    output: Content
    name: Text | None = None
    namespace: Text | None = None
    id: Text | None = None
    status: Text | None = None


class SummaryText(Strict):
    type: Literal["summary_text"]
    text: Text


class ReasoningText(Strict):
    type: Literal["reasoning_text", "text"]
    text: Text


class ReasoningItem(Strict):
    type: Literal["reasoning"]
    summary: Annotated[list[SummaryText], Field(max_length=MAX_PARTS)] = []
    content: Annotated[list[ReasoningText], Field(max_length=MAX_PARTS)] | None = None
    encrypted_content: Text | None = None  # another server's, opaque here: left aside
    id: Text | None = None
    status: Text | None = None

    def text(self) -> str:
        """The reasoning itself where it was given, else its summary."""
        parts = self.content if self.content else self.summary
        return "\n\n".join(p.text for p in parts)


class OtherItem(Strict):
    """An item of a hosted tool (web_search_call, local_shell_call...), an item_reference...: left out."""

    type: Text


Item = Annotated[
    Annotated[MessageItem, Tag("type=message")]
    | Annotated[FunctionCallItem, Tag("type=function_call")]
    | Annotated[FunctionCallOutputItem, Tag("type=function_call_output")]
    | Annotated[ReasoningItem, Tag("type=reasoning")]
    | Annotated[OtherItem, Tag("type=other")],
    _tagged("message", "function_call", "function_call_output", "reasoning", default="message"),
]


class FunctionTool(Strict):
    type: Literal["function"]
    name: Text
    description: Text | None = None
    parameters: JsonObject | None = None  # a JSON schema of the arguments
    strict: bool | None = None
    defer_loading: bool | None = None  # shown at once here: there is no tool search


class HostedTool(Strict):
    """A tool the server runs at OpenAI (web_search, file_search, code_interpreter, mcp...), or a
    freeform `custom` one: left out of the prompt."""

    type: Text


NamespaceMember = Annotated[
    Annotated[FunctionTool, Tag("type=function")] | Annotated[HostedTool, Tag("type=other")], _tagged("function")
]


class NamespaceTool(Strict):
    """Tools grouped under a name, as Codex declares an MCP server's tools; called back with it."""

    type: Literal["namespace"]
    name: Text
    description: Text | None = None
    tools: Annotated[list[NamespaceMember], Field(max_length=MAX_TOOLS)]


Tool = Annotated[
    Annotated[FunctionTool, Tag("type=function")]
    | Annotated[NamespaceTool, Tag("type=namespace")]
    | Annotated[HostedTool, Tag("type=other")],
    _tagged("function", "namespace"),
]


class FunctionChoice(Strict):
    type: Literal["function"]
    name: Text
    namespace: Text | None = None


class OtherChoice(Strict):
    """allowed_tools, a hosted tool, mcp, custom...: refused by chat_body."""

    type: Text


ToolChoice = (  # the object first: for an object, its own error is the one app.py reports
    Annotated[
        Annotated[FunctionChoice, Tag("type=function")] | Annotated[OtherChoice, Tag("type=other")],
        _tagged("function"),
    ]
    | Literal["none", "auto", "required"]
)


class JsonSchemaFormat(Strict):
    type: Literal["json_schema"]
    name: Annotated[str, Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")]
    schema_: JsonObject = Field(alias="schema")
    description: Text | None = None
    strict: bool | None = None


Format = Annotated[
    Annotated[TextFormat, Tag("type=text")]
    | Annotated[JsonObjectFormat, Tag("type=json_object")]
    | Annotated[JsonSchemaFormat, Tag("type=json_schema")],
    Discriminator(
        lambda v: f"type={_kind(v)}" if _kind(v) in ("text", "json_object", "json_schema") else None,
        custom_error_type="invalid_format",
        custom_error_message="must be an object whose type is 'text', 'json_object' or 'json_schema'",
    ),
]


class TextConfig(Strict):
    format: Format | None = None
    verbosity: Literal["low", "medium", "high"] | None = None  # echoed; the model is not told


class ReasoningConfig(Strict):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None  # no summaries are written here
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


class Prompt(Strict):
    """The fields that make the prompt, which both endpoints take."""

    model: Text | None = None
    input: Text | Annotated[list[Item], Field(max_length=MAX_ITEMS)] | None = None
    instructions: Text | None = None
    tools: Annotated[list[Tool], Field(max_length=MAX_TOOLS)] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    previous_response_id: Text | None = None
    conversation: Text | JsonObject | None = None  # refused: conversations are not kept here
    truncation: Literal["auto", "disabled"] | None = None  # a prompt too long is refused either way


class InputTokensRequest(Prompt):
    """POST /v1/responses/input_tokens: the prompt whose tokens are counted."""


class ResponsesRequest(Prompt):
    """POST /v1/responses."""

    max_output_tokens: integer(ge=1) | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    top_k: integer(ge=0, le=MAX_INT32) | None = None  # llama.cpp's
    stream: bool = False
    stream_options: JsonObject | None = None
    background: bool | None = None  # refused when true: answers are not kept to poll for

    # Accepted: they do not change the answer.
    store: bool | None = None  # false: not kept for a later previous_response_id
    include: Annotated[list[Text], Field(max_length=MAX_INCLUDE)] | None = None
    prompt_cache_key: Text | None = None  # keys prompt lookup's pool, as in chat
    metadata: dict[Text, Text] | None = None
    client_metadata: JsonObject | None = None
    user: Text | None = None
    safety_identifier: Text | None = None
    service_tier: Text | None = None


# -- names ---------------------------------------------------------------------------------------


def flat_name(namespace: str | None, name: str) -> str:
    """A namespaced function's chat name: Codex's flat form (namespace, `__`, name, the underscores
    around the join trimmed), or where that is not a chat name (its characters, over 64), a valid
    prefix of it and a hash of the two."""
    if namespace and namespace != DEFAULT_NAMESPACE:
        joined = f"{namespace.rstrip('_')}__{name.lstrip('_')}"
    else:
        joined = name
    return joined if CHAT_NAME.match(joined) else _hashed(NOT_IN_NAME.sub("_", joined), namespace, name)


def _hashed(base: str, namespace: str | None, name: str) -> str:
    digest = hashlib.sha256(f"{namespace}\0{name}".encode()).hexdigest()[:8]
    return f"{base[:55]}_{digest}"


@dataclass(frozen=True)
class Names:
    """The chat function name of each declared function, and back: `original[chat name]` is the
    (namespace, name) the client declared (namespace None for a top-level function). A flat name
    two functions would share goes, for the second, to a hashed one."""

    chat: dict[tuple[str | None, str], str]
    original: dict[str, tuple[str | None, str]]

    @classmethod
    def of(cls, declared: Iterable[tuple[str | None, FunctionTool]]) -> Names:
        chat: dict[tuple[str | None, str], str] = {}
        original: dict[str, tuple[str | None, str]] = {}
        for namespace, tool in declared:
            key = (namespace, tool.name)
            if key in chat:
                continue
            name = flat_name(namespace, tool.name)
            if name in original:
                name = _hashed(name, namespace, tool.name)
            chat[key], original[name] = name, key
        return cls(chat, original)

    def to_chat(self, namespace: str | None, name: str) -> str:
        return self.chat.get((namespace, name)) or flat_name(namespace, name)

    def back(self, chat_name: str) -> tuple[str | None, str]:
        """The (namespace, name) a call of `chat_name` is given back with."""
        return self.original.get(chat_name, (None, chat_name))


Declared = tuple[NamespaceTool | None, FunctionTool]  # a function tool, and the namespace it is in


def _declared(tools: list | None, left_out: list[str]) -> list[Declared]:
    """The function tools, each with its namespace; the others named in `left_out`."""
    functions: list[Declared] = []
    for tool in tools or []:
        if isinstance(tool, FunctionTool):
            functions.append((None, tool))
        elif isinstance(tool, NamespaceTool):
            for member in tool.tools:
                if isinstance(member, FunctionTool):
                    functions.append((tool, member))
                else:
                    _note(left_out, f"{member.type} tool (in namespace {tool.name})")
        else:
            _note(left_out, f"{tool.type} tool")
    return functions


def _names(declared: list[Declared]) -> Names:
    return Names.of((namespace.name if namespace else None, tool) for namespace, tool in declared)


def tool_names(request: Prompt) -> Names:
    """The request's name table (the same one chat_body used)."""
    return _names(_declared(request.tools, []))


def _note(left_out: list[str], what: str) -> None:
    if what not in left_out:
        left_out.append(what)


# -- the chat request ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Conversion:
    """A Responses request as a chat request.

    body: the chat completions body (ChatRequest.model_validate accepts it).
    left_out: what was left out of the prompt, for a warning: hosted tools and items of them.
    names: chat function name → (namespace, name) the client declared; the rendering functions
        compute the same table from the request, so it is for logs and tests.
    conversation: the chat messages of the conversation before `instructions` and the folding
        of system messages: previous messages, then the input's; what `messages_for_store` keeps.
    """

    body: dict
    left_out: list[str]
    names: dict[str, tuple[str | None, str]]
    conversation: list[dict]


def chat_body(request: Prompt, previous: list[dict] | None = None) -> Conversion:
    """The chat request for `request`, after the chat messages `previous` (a stored conversation,
    from resolve_previous). AdapterError: what the chat path cannot serve."""
    _refuse(request)
    left_out: list[str] = []
    declared = _declared(request.tools, left_out)
    names = _names(declared)
    conversation = [dict(m) for m in previous or []]
    _Items(conversation, names, left_out).add_all(request.input)
    if not conversation:
        raise AdapterError("input is empty: send the conversation to answer in input", "input")
    body: dict = {"messages": _arranged(request.instructions, conversation)}
    if request.model is not None:
        body["model"] = request.model
    body.update(_tools(request, declared, names))
    body.update(_format(request.text))
    body.update(_thinking(request.reasoning))
    if isinstance(request, ResponsesRequest):
        body.update(_sampling(request))
    return Conversion(body, left_out, dict(names.original), conversation)


def _refuse(request: Prompt) -> None:
    if request.conversation is not None:
        raise AdapterError(
            "conversation is not supported: this server keeps no conversations; send the whole "
            "conversation in input, or previous_response_id",
            "conversation",
        )
    if getattr(request, "background", None):
        raise AdapterError("background is not supported: answers are not kept to be polled for", "background")


class _Items:
    """Responses input items appended to chat messages, in order: a function call joins the
    assistant message before it, reasoning goes to the next assistant message."""

    def __init__(self, messages: list[dict], names: Names, left_out: list[str]):
        self.messages = messages
        self.names = names
        self.left_out = left_out
        self.reasoning: list[str] = []  # waiting for the assistant message it belongs to

    def add_all(self, items: str | list | None) -> None:
        if isinstance(items, str):
            self.messages.append({"role": "user", "content": items})
            return
        for at, item in enumerate(items or []):
            self.add(item, f"input.{at}")

    def add(self, item, at: str) -> None:
        if isinstance(item, MessageItem):
            self.message(item, at)
        elif isinstance(item, FunctionCallItem):
            self.call(item)
        elif isinstance(item, FunctionCallOutputItem):
            content = _text(item.output, f"{at}.output", self.left_out)
            self.messages.append({"role": "tool", "tool_call_id": item.call_id, "content": content})
        elif isinstance(item, ReasoningItem):
            if text := item.text():
                self.reasoning.append(text)
        else:
            _note(self.left_out, f"{item.type} item")

    def message(self, item: MessageItem, at: str) -> None:
        text = _text(item.content, f"{at}.content", None)
        role = "system" if item.role in ("system", "developer") else item.role
        message = {"role": role, "content": text}
        if role == "assistant":
            self._think(message)
        self.messages.append(message)

    def call(self, item: FunctionCallItem) -> None:
        call = {
            "id": item.call_id,
            "type": "function",
            "function": {"name": self.names.to_chat(item.namespace, item.name), "arguments": item.arguments},
        }
        last = self.messages[-1] if self.messages else None
        if last is None or last["role"] != "assistant":
            last = {"role": "assistant", "content": None}
            self.messages.append(last)
        last["tool_calls"] = [*(last.get("tool_calls") or []), call]
        self._think(last)

    def _think(self, message: dict) -> None:
        """The reasoning waiting, onto this assistant message."""
        if self.reasoning:
            said = [message["reasoning_content"]] if message.get("reasoning_content") else []
            message["reasoning_content"] = "\n\n".join([*said, *self.reasoning])
            self.reasoning = []


def _text(content: str | list, at: str, left_out: list[str] | None) -> str:
    """A content's text. Media: refused (left_out None: a message), or a note in its place (a tool's
    output, which the conversation cannot do without)."""
    if isinstance(content, str):
        return content
    pieces = []
    for i, part in enumerate(content):
        if isinstance(part, TextPart):
            pieces.append(part.text)
        elif isinstance(part, RefusalPart):
            pieces.append(part.refusal)
        elif left_out is not None and part.type in MEDIA:
            pieces.append(OMITTED_MEDIA.format(kind=part.type.removeprefix("input_")))
            _note(left_out, f"{part.type} part of a tool output")
        elif part.type in MEDIA:
            raise AdapterError(f"{MEDIA[part.type]} not supported: the model served here reads text only", f"{at}.{i}")
        else:
            raise AdapterError(f"content parts of type {part.type!r} are not supported: send input_text", f"{at}.{i}")
    return "".join(pieces)


def _arranged(instructions: str | None, messages: list[dict]) -> list[dict]:
    """`instructions` and the system messages at the start as one first system message; a system
    message later on folded into the user message after it (or standing as one), as many chat
    templates take a system message only first."""
    head = [instructions] if instructions else []
    start = 0
    while start < len(messages) and messages[start]["role"] == "system":
        head.append(messages[start]["content"])
        start += 1
    out = [{"role": "system", "content": "\n\n".join(head)}] if head else []
    waiting: list[str] = []
    for message in messages[start:]:
        if message["role"] == "system":
            waiting.append(message["content"])
            continue
        if waiting and message["role"] == "user":
            message = {**message, "content": "\n\n".join([*waiting, message["content"]])}
        elif waiting:
            out.append({"role": "user", "content": "\n\n".join(waiting)})
        waiting = []
        out.append(message)
    if waiting:
        out.append({"role": "user", "content": "\n\n".join(waiting)})
    return out


def _tools(request: Prompt, declared: list[Declared], names: Names) -> dict:
    if len(declared) > MAX_TOOLS:
        raise AdapterError(
            f"tools declares {len(declared)} functions (namespaces counted by their functions); "
            f"at most {MAX_TOOLS} are supported",
            "tools",
        )
    body: dict = {}
    if declared:
        body["tools"] = [_function(namespace, tool, names) for namespace, tool in declared]
    choice = _choice(request.tool_choice, names, bool(declared))
    if choice is not None:
        body["tool_choice"] = choice
    if request.parallel_tool_calls is not None:
        body["parallel_tool_calls"] = request.parallel_tool_calls
    return body


def _function(namespace: NamespaceTool | None, tool: FunctionTool, names: Names) -> dict:
    """A chat function; one of a namespace says what the namespace is first (the model sees no
    namespace otherwise)."""
    spec: dict = {"name": names.to_chat(namespace.name if namespace else None, tool.name)}
    about = [namespace.description] if namespace is not None and namespace.description else []
    if about or tool.description is not None:
        spec["description"] = "\n\n".join([*about, *([tool.description] if tool.description else [])])
    for field in ("parameters", "strict"):
        if getattr(tool, field) is not None:
            spec[field] = getattr(tool, field)
    return {"type": "function", "function": spec}


def _choice(choice, names: Names, any_function: bool):
    if choice is None or choice in ("auto", "none"):
        return choice
    if choice == "required":
        if not any_function:
            raise AdapterError(
                'tool_choice "required" needs a function in tools (hosted tools are not run here)', "tool_choice"
            )
        return choice
    if isinstance(choice, FunctionChoice):
        name = names.chat.get((choice.namespace, choice.name))
        if name is None:
            named = f"{choice.namespace}.{choice.name}" if choice.namespace else choice.name
            raise AdapterError(f"tool_choice names the function {named!r}, which tools does not declare", "tool_choice")
        return {"type": "function", "function": {"name": name}}
    raise AdapterError(
        f'tool_choice of type {choice.type!r} is not supported: send "auto", "none", "required" or a function',
        "tool_choice",
    )


def _format(text: TextConfig | None) -> dict:
    """text.format as chat's response_format (free text: none)."""
    shape = text.format if text is not None else None
    if isinstance(shape, JsonObjectFormat):
        return {"response_format": {"type": "json_object"}}
    if isinstance(shape, JsonSchemaFormat):
        spec = {"name": shape.name, "schema": shape.schema_}
        for field in ("description", "strict"):
            if getattr(shape, field) is not None:
                spec[field] = getattr(shape, field)
        return {"response_format": {"type": "json_schema", "json_schema": spec}}
    return {}


def _thinking(reasoning: ReasoningConfig | None) -> dict:
    """An effort asked for turns a thinking template's thinking on or off; none asked, the template's default."""
    if reasoning is None or reasoning.effort is None:
        return {}
    return {"chat_template_kwargs": {"enable_thinking": reasoning.effort not in NO_THINKING}}


def _sampling(request: ResponsesRequest) -> dict:
    fields = {
        "max_tokens": request.max_output_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "top_k": request.top_k,
        "prompt_cache_key": request.prompt_cache_key,
        "user": request.user,
        "safety_identifier": request.safety_identifier,
    }
    return {"stream": request.stream, **{k: v for k, v in fields.items() if v is not None}}


def messages_for_store(conversion: Conversion, message: Mapping) -> list[dict]:
    """What a ResponseStore keeps of a response: its conversation's chat messages (without its
    instructions, which a later request does not inherit, as OpenAI has it) and the answer, whose
    `message` is the chat answer's `choices[0].message`."""
    answer: dict = {"role": "assistant", "content": message.get("content")}
    if message.get("reasoning_content"):
        answer["reasoning_content"] = message["reasoning_content"]
    if message.get("tool_calls"):
        answer["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": dict(c["function"])} for c in message["tool_calls"]
        ]
    elif answer["content"] is None:
        answer["content"] = ""
    return [*conversion.conversation, answer]


# -- the store -----------------------------------------------------------------------------------


class ResponseStore:
    """Recent responses' conversations by response id, for previous_response_id: in memory, the
    least recently used dropped first beyond `max_entries` or `max_bytes` of their JSON.
    Thread-safe."""

    def __init__(self, max_entries: int = 256, max_bytes: int = 64 * 2**20):
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, response_id: str, messages: list[dict]) -> bool:
        """Keep `messages` (False: larger than the whole store, not kept)."""
        text = json.dumps(messages, ensure_ascii=False)
        size = len(text.encode())
        if size > self.max_bytes or self.max_entries < 1:
            return False
        with self._lock:
            self._drop(response_id)
            self._entries[response_id] = text
            self.bytes += size
            while len(self._entries) > self.max_entries or self.bytes > self.max_bytes:
                self._drop(next(iter(self._entries)))
        return True

    def get(self, response_id: str) -> list[dict] | None:
        """A fresh copy of the messages kept (None: never kept, or dropped since)."""
        with self._lock:
            text = self._entries.get(response_id)
            if text is None:
                return None
            self._entries.move_to_end(response_id)
        return json.loads(text)

    def __len__(self) -> int:
        return len(self._entries)

    def _drop(self, response_id: str) -> None:
        text = self._entries.pop(response_id, None)
        if text is not None:
            self.bytes -= len(text.encode())


def resolve_previous(store: ResponseStore, request: Prompt) -> list[dict] | None:
    """The stored conversation `previous_response_id` names (None: none named); AdapterError when
    it is not kept."""
    if request.previous_response_id is None:
        return None
    messages = store.get(request.previous_response_id)
    if messages is None:
        raise AdapterError(
            f"previous_response_id {request.previous_response_id!r} not found (responses are kept in memory, "
            f"the {store.max_entries} most recent within {store.max_bytes // 2**20} MiB, not those created with "
            "store false, and none across a restart); send the whole conversation in input instead",
            "previous_response_id",
        )
    return messages


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
