"""Tool calling in chat requests: the request's tools shown to the model by its own chat template,
a required call constrained to a declared tool's schema, and the answer read back into OpenAI's
`tool_calls`, whole or as deltas.

`tool_choice`: "none" shows the model no tools and reads no calls; "auto" shows them and reads the
calls the model writes (in its template's syntax, or as the bare JSON small models write instead),
a call it opens in its syntax held to the declared tools where that is written (Hermes' syntax);
"required" and a named function constrain the answer to such a call, in the template's syntax, or
as bare JSON `{"name": …, "arguments": …}` where specrun cannot write that syntax.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..engine import constraint as constraints
from ..engine.constraint import Constraint, ConstraintError
from ..models.tool_calls import (
    CallArguments,
    CallStart,
    Content,
    ParsedAnswer,
    ToolCallStream,
    parse_tool_calls,
)
from ..models.tool_grammar import call_grammar, opened_call_grammar, tool_names_of, validate_tools
from ..models.tool_syntax import ToolSyntax


class ToolRequestError(ValueError):
    """A tools request the server refuses: its message, and the field to name."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class ToolUse:
    """What a chat request asks of tools: the ones shown to the model, whether a call is required,
    whether several may come, and the syntax the answer is read in."""

    tools: tuple[Mapping, ...]
    required: bool
    parallel: bool
    syntax: ToolSyntax | None

    @property
    def names(self) -> list[str]:
        return tool_names_of(self.tools)

    def parse(self, content: str) -> ParsedAnswer:
        return parse_tool_calls(content, self.syntax, self.names)

    def stream(self) -> ToolCallStream:
        return ToolCallStream(self.syntax, self.names)


def tool_use(
    tools: Sequence[Mapping] | None, choice, parallel: bool | None, syntax: ToolSyntax | None
) -> ToolUse | None:
    """The request's tool use (None: no tools, or tool_choice "none"); ToolRequestError names what
    is wrong with it."""
    tools = list(tools or [])
    if isinstance(choice, Mapping):
        named = choice["function"]["name"]
        if named not in tool_names_of(tools):
            raise ToolRequestError(
                f"tool_choice names the function {named!r}, which tools does not declare", "tool_choice"
            )
    if choice == "required" and not tools:
        raise ToolRequestError('tool_choice "required" needs at least one tool in tools', "tool_choice")
    if not tools or choice == "none":
        return None
    try:
        validate_tools(tools)
    except ValueError as error:
        raise ToolRequestError(str(error), "tools") from None
    if isinstance(choice, Mapping):
        tools = [t for t in tools if t["function"]["name"] == choice["function"]["name"]]
    required = choice == "required" or isinstance(choice, Mapping)
    return ToolUse(tuple(tools), required, parallel is not False, syntax)


def call_constraint(
    use: ToolUse, special_tokens: Mapping[str, int], reasoning=None, inside: bool = False
) -> Constraint | None:
    """The constraint of the request's calls. Required: a call in the family's syntax where it can
    be written, else bare JSON calls (which the answer is read back from as well). "auto": free
    text until the model opens a call in its syntax, then a valid call (where the family's opened
    call is written; elsewhere None, and calls are only read)."""
    if not use.required:
        if use.syntax is None:
            return None
        grammar = opened_call_grammar(use.syntax, use.tools, special_tokens=special_tokens)
        return _compiled(grammar) if grammar is not None else None
    grammar = None
    if use.syntax is not None:
        grammar = call_grammar(
            use.syntax,
            use.tools,
            parallel=use.parallel,
            required=True,
            special_tokens=special_tokens,
            reasoning=reasoning,
            inside=inside,
        )
    if grammar is not None:
        return _compiled(grammar)
    try:
        return constraints.json_schema(bare_calls_schema(use.tools, use.parallel), what="tools")
    except ConstraintError as error:
        raise ToolRequestError(error.one_line(), "tools") from None


def _compiled(grammar: str) -> Constraint:
    try:
        return constraints.grammar(grammar, what="tools")
    except ConstraintError as error:
        raise ToolRequestError(error.one_line(), "tools") from None


def bare_calls_schema(tools: Sequence[Mapping], parallel: bool) -> dict:
    """A JSON schema of one call `{"name": …, "arguments": {…}}` of one of `tools` (a list of them
    with `parallel`)."""
    calls = [
        {
            "type": "object",
            "properties": {
                "name": {"const": tool["function"]["name"]},
                "arguments": tool["function"].get("parameters") or {"type": "object"},
            },
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for tool in tools
    ]
    one = calls[0] if len(calls) == 1 else {"anyOf": calls}
    return {"type": "array", "items": one, "minItems": 1} if parallel else one


def template_messages(messages) -> list[dict]:
    """Request messages as chat templates read them: an assistant's tool calls with their arguments
    as an object (what templates expect; a string that is not a JSON object stays a string), and a
    tool's answer with the id of the call it answers; an assistant's reasoning as templates read it
    (`reasoning_content`), for the template to render or drop."""
    out = []
    for m in messages:
        item: dict = {"role": "system" if m.role == "developer" else m.role, "content": m.text()}
        reasoning = m.reasoning_content if m.reasoning_content is not None else m.reasoning
        if m.role == "assistant" and reasoning:
            item["reasoning_content"] = reasoning
        if m.role == "assistant" and m.tool_calls:
            item["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.function.name, "arguments": _arguments(call.function.arguments)},
                }
                for call in m.tool_calls
            ]
        if m.role == "tool":
            item["tool_call_id"] = m.tool_call_id
            if m.name:
                item["name"] = m.name
        out.append(item)
    return out


def _arguments(text: str):
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return text
    return value if isinstance(value, dict) else text


def call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def tool_calls_field(parsed: ParsedAnswer) -> list[dict]:
    """OpenAI's `message.tool_calls` for the calls read from an answer."""
    return [
        {"id": call.id or call_id(), "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
        for call in parsed.calls
    ]


class ToolDeltas:
    """A streamed answer's content turned into content and `tool_calls` deltas as OpenAI streams
    them: per call its index, id, type and name first, then its arguments."""

    def __init__(self, use: ToolUse):
        self.reader = use.stream()
        self.calls = 0

    def feed(self, content: str, *, final: bool = False) -> list[dict]:
        events = self.reader.feed(content) if content else []
        if final:
            events += self.reader.finish()
        deltas: list[dict] = []
        for event in events:
            if isinstance(event, Content):
                if event.text:
                    deltas.append({"content": event.text})
            elif isinstance(event, CallStart):
                self.calls = max(self.calls, event.index + 1)
                head = {"name": event.name, "arguments": ""}
                deltas.append(
                    {
                        "tool_calls": [
                            {"index": event.index, "id": event.id or call_id(), "type": "function", "function": head}
                        ]
                    }
                )
            elif isinstance(event, CallArguments):
                deltas.append({"tool_calls": [{"index": event.index, "function": {"arguments": event.text}}]})
        return deltas


def finish_reason(reason: str, called: bool) -> str:
    """OpenAI's finish reason for an answer that may call tools: "tool_calls" when it called one
    and ended of itself, else the engine's (a call cut by max_tokens is still "length")."""
    return "tool_calls" if called and reason == "stop" else reason


def unread_syntax_note(model_name: str) -> str:
    """What is said once when a template shows no call syntax specrun reads."""
    return (
        f"specrun: note: {model_name}'s chat template shows no tool-call syntax specrun reads; "
        "calls are read from answers that are bare JSON calls, other answers are content"
    )
