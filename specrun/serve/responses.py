"""OpenAI's Responses API (POST /v1/responses, /v1/responses/input_tokens) on top of the chat path:
a Responses body (responses_request.py) becomes a chat completions body (`chat_body`); the chat
answer, whole or as deltas, becomes a Response object or its server-sent events in
responses_render.py. Nothing here runs the model; responses_routes.py does, through the chat path.

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

import hashlib
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .responses_request import (
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionChoice,
    FunctionTool,
    JsonSchemaFormat,
    MessageItem,
    NamespaceTool,
    Prompt,
    ReasoningConfig,
    ReasoningItem,
    RefusalPart,
    ResponsesRequest,
    TextConfig,
    TextPart,
)
from .schemas import MAX_TOOLS, JsonObjectFormat

CHAT_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # chat's function names (schemas.FunctionSpec)
NOT_IN_NAME = re.compile(r"[^a-zA-Z0-9_-]")
DEFAULT_NAMESPACE = "functions"  # Codex's namespace of top-level functions: flattened to the bare name
NO_THINKING = ("none", "minimal")  # reasoning efforts that turn a thinking template's thinking off
MEDIA = {"input_image": "images are", "input_file": "files are", "input_audio": "audio is"}
OMITTED_MEDIA = "[{kind} left out: the model served here reads text only]"


class AdapterError(Exception):
    """A Responses request the chat path cannot serve: a 400 with this message, naming `param`."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param


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
