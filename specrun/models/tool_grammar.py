"""The tools a request declares: checked as OpenAI checks them, and turned into the grammar that
makes a model call one of them in its own syntax (tool_syntax.py names the syntaxes), with
arguments that validate against the tool's parameter schema.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .reasoning import ReasoningTags
from .tool_syntax import DS_CALL_BEGIN, DS_CALL_END, DS_CALLS_BEGIN, DS_CALLS_END, DS_SEP, ToolSyntax

# --- tools --------------------------------------------------------------------------------------

_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_NO_PARAMETERS = {"type": "object", "properties": {}, "additionalProperties": False}


def tool_names_of(tools: Sequence[Mapping]) -> list[str]:
    """The function names of OpenAI tool objects, in order."""
    return [tool["function"]["name"] for tool in tools]


def _parameters(tool: Mapping) -> dict:
    parameters = tool["function"].get("parameters")
    return _NO_PARAMETERS if parameters is None else parameters


def validate_tools(tools: Sequence[Mapping]) -> None:
    """Refuse, in one line naming the tool, what the server could neither show the model nor
    constrain it to: OpenAI's rules for tool objects, and schemas llguidance cannot compile (even
    leniently: keywords it does not implement are ignored)."""
    from llguidance import LLMatcher

    if not isinstance(tools, Sequence) or isinstance(tools, (str, bytes)):
        raise ValueError("tools must be a list of tool objects")
    seen: set[str] = set()
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        if not isinstance(tool, Mapping) or tool.get("type") != "function":
            raise ValueError(f"{where}: the type of a tool must be 'function'")
        function = tool.get("function")
        if not isinstance(function, Mapping):
            raise ValueError(f"{where}: a function tool needs a 'function' object")
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where}: the function has no name")
        if not _TOOL_NAME.fullmatch(name):
            raise ValueError(f"{where}: tool name {name!r} must be 1 to 64 letters, digits, '_' or '-'")
        if name in seen:
            raise ValueError(f"{where}: tool name {name!r} is declared twice")
        seen.add(name)
        parameters = function.get("parameters")
        if parameters is None:
            continue
        if not isinstance(parameters, Mapping):
            raise ValueError(f"tool {name!r}: parameters must be a JSON object (a JSON schema)")
        try:
            schema = {**parameters, "x-guidance": {**dict(parameters.get("x-guidance") or {}), **_LENIENT}}
            error = LLMatcher.validate_grammar(LLMatcher.grammar_from_json_schema(schema))
        except (TypeError, ValueError) as failed:
            error = str(failed)
        if error:
            detail = " ".join(error.split())
            raise ValueError(f"tool {name!r}: its parameters schema is not supported: {detail}")


# --- grammars -----------------------------------------------------------------------------------

# A tool's schema comes from the client, which writes it for the hosted models: keywords llguidance
# does not implement (`propertyNames`, unknown formats) leave the arguments less constrained rather
# than refuse the whole request; an invalid schema is still refused.
_LENIENT = {"lenient": True}
# Arguments as templates render them (json.dumps' separators), with no room for runaway whitespace.
_JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": ", **_LENIENT}
_REGEX_SPECIAL = set("\\.+*?()|[]{}^$#&-~/")
_STRING_LIMITS = {"pattern", "format", "minLength", "maxLength", "enum", "const", "anyOf", "oneOf", "allOf", "not"}


def _regex_text(text: str) -> str:
    """`text` as a literal inside a Lark /…/ regex."""
    escaped = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
    return "".join(escaped.get(c, "\\" + c if c in _REGEX_SPECIAL else c) for c in text)


class _Lark:
    """Builds an llguidance Lark grammar: literals (with the vocabulary's special tokens named as
    tokens), inline JSON schemas, and text up to a marker."""

    def __init__(self, special_tokens: Mapping[str, int] | None):
        self.special = dict(special_tokens or {})
        self.rules: list[str] = []

    def rule(self, body: str, options: str = "") -> str:
        name = f"r{len(self.rules)}"
        self.rules.append(f"{name}{options}: {body}")
        return name

    def lit(self, text: str) -> str:
        """Literal text; a marker that is one special token becomes that token."""
        pieces, at = [], 0
        while at < len(text):
            hits = [(text.find(m, at), -len(m), m) for m in self.special if text.find(m, at) >= 0]
            if not hits:
                pieces.append(json.dumps(text[at:], ensure_ascii=False))
                break
            where, _, marker = min(hits)
            if where > at:
                pieces.append(json.dumps(text[at:where], ensure_ascii=False))
            pieces.append(f"<[{self.special[marker]}]>")
            at = where + len(marker)
        return " ".join(pieces)

    def json(self, schema: Mapping) -> str:
        layout = {**_JSON_LAYOUT, **dict(schema.get("x-guidance") or {})}
        return "%json " + json.dumps({**schema, "x-guidance": layout}, ensure_ascii=False)

    def until(self, marker: str) -> str:
        """Any text, then `marker` (the first one: the match is lazy)."""
        if marker in self.special:
            return f"/(.|\\n)*/ {self.lit(marker)}"
        return self.rule(f"/(.|\\n)*{_regex_text(marker)}/", "[lazy]")

    def one_of(self, alternatives: Sequence[str]) -> str:
        return self.rule(" | ".join(alternatives))

    def text(self, start: str) -> str:
        return "\n".join([f"start: {start}", *self.rules]) + "\n"


_Function = tuple[str, dict]  # (name, parameters schema)


def _repeated(g: _Lark, call: str, separator: str, parallel: bool) -> str:
    """One call, or with `parallel` one or more joined by `separator`. A separator that is only
    whitespace may also end the calls: a model that writes it after every call must still be able
    to stop there, rather than be forced into another call."""
    if not parallel:
        return call
    if not separator:
        return f"{call}+"
    trailing = f" {g.lit(separator)}?" if not separator.strip() else ""
    return f"{call} ({g.lit(separator)} {call})*{trailing}"


def _json_calls_grammar(prefix: str, args_key: str, suffix: str, separator: str, *, single: bool = False):
    """Calls written `prefix{"name": NAME, args_key: ARGS}suffix`, joined by `separator`; `single`
    for families whose templates take one call per turn."""

    def build(g: _Lark, syntax: ToolSyntax, functions: list[_Function], parallel: bool) -> str:
        head = _named(args_key)
        calls = [
            f"{g.lit(prefix)} {head(g, name)} {g.json(schema)} {g.lit('}' + suffix)}" for name, schema in functions
        ]
        return _repeated(g, g.one_of(calls), separator, parallel and not single)

    return build


def _listed_grammar(
    opening: str, head: Callable[[_Lark, str], str], tail: Callable[[_Lark], str], separator: str, closing: str
):
    """A JSON list of call objects between an opening and a closing (Mistral-Nemo, Granite,
    Command R): `head` writes an object up to its arguments, `tail` what follows them."""

    def build(g: _Lark, syntax: ToolSyntax, functions: list[_Function], parallel: bool) -> str:
        call = g.one_of([f"{head(g, name)} {g.json(schema)} {tail(g)}" for name, schema in functions])
        return f"{g.lit(opening)} {_repeated(g, call, separator, parallel)} {g.lit(closing)}"

    return build


def _named(args_key: str) -> Callable[[_Lark, str], str]:
    """A call object up to its arguments: `{"name": NAME, args_key: `."""
    return lambda g, name: g.lit("{" + f'"name": {json.dumps(name)}, {json.dumps(args_key)}: ')


def _command_r_head(g: _Lark, name: str) -> str:
    before_id = '{"tool_call_id": "'
    after_id = f'", "tool_name": {json.dumps(name)}, "parameters": '
    return f"{g.lit(before_id)} /[0-9]+/ {g.lit(after_id)}"


_CALL_ID = "/[a-zA-Z0-9]{9}/"  # Mistral's call ids


def _nemo_tail(g: _Lark) -> str:
    """Mistral-Nemo's template writes a call's id after its arguments."""
    before_id, quote = ', "id": "', '"'
    return f"({g.lit(before_id)} {_CALL_ID} {g.lit(quote)})? {g.lit('}')}"


def _mistral_grammar(g: _Lark, syntax: ToolSyntax, functions: list[_Function], parallel: bool) -> str:
    if syntax.variant == "list":
        return _listed_grammar("[TOOL_CALLS][", _named("arguments"), _nemo_tail, ", ", "]")(
            g, syntax, functions, parallel
        )
    calls = [
        f"{g.lit('[TOOL_CALLS]' + name)} ({g.lit('[CALL_ID]')} {_CALL_ID})? {g.lit('[ARGS]')} {g.json(schema)}"
        for name, schema in functions
    ]
    return _repeated(g, g.one_of(calls), "", parallel)


def _deepseek_grammar(g: _Lark, syntax: ToolSyntax, functions: list[_Function], parallel: bool) -> str:
    if syntax.variant == "r1":
        heads = [f"{DS_CALL_BEGIN}function{DS_SEP}{name}\n```json\n" for name, _ in functions]
        tail, separator = f"\n```{DS_CALL_END}", "\n"
    else:
        heads = [f"{DS_CALL_BEGIN}{name}{DS_SEP}" for name, _ in functions]
        tail, separator = DS_CALL_END, ""
    call = g.one_of([f"{g.lit(head)} {g.json(s)} {g.lit(tail)}" for head, (_, s) in zip(heads, functions)])
    return f"{g.lit(DS_CALLS_BEGIN)} {_repeated(g, call, separator, parallel)} {g.lit(DS_CALLS_END)}"


def _harmony_grammar(g: _Lark, syntax: ToolSyntax, functions: list[_Function], parallel: bool) -> str:
    """gpt-oss: an optional analysis message, then one call (its templates take one per turn) with
    the recipient in the role or in the channel header."""
    calls = []
    for name, schema in functions:
        in_role = g.lit(f" to=functions.{name}<|channel|>commentary json<|message|>")
        in_channel = g.lit(f"<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>")
        calls.append(f"({in_role} | {in_channel}) {g.json(schema)} {g.lit('<|call|>')}")
    analysis = f"{g.lit('<|channel|>analysis<|message|>')} {g.until('<|end|>')} {g.lit('<|start|>assistant')}"
    return f"({analysis})? {g.one_of(calls)}"


def _value_grammar(g: _Lark, schema: Any, closer: str) -> str | None:
    """A key/value form's value, then `closer`: free text for a plain string, the literals of a
    string enum, JSON for everything else (JSON text reads back as its value)."""
    if not isinstance(schema, dict):
        return None
    enum = schema.get("enum", [schema["const"]] if "const" in schema else None)
    if enum and all(isinstance(value, str) and closer not in value for value in enum):
        return f"{g.one_of([g.lit(value) for value in enum])} {g.lit(closer)}"
    if schema.get("type") == "string" and not schema.keys() & _STRING_LIMITS:
        return g.until(closer)
    return f"{g.json(schema)} {g.lit(closer)}"


def _keyed_grammar(opening: str, key_open: str, key_close: str, value_close: str, closing: str, separator: str):
    """Calls as a name and key/value pairs (qwen3-coder, seed-oss, glm): the schema's properties in
    order, the required ones always. None for what the pairs cannot express ($ref, free-form keys)."""

    def build(g: _Lark, syntax: ToolSyntax, functions: list[_Function], parallel: bool) -> str | None:
        calls = []
        for name, schema in functions:
            properties = schema.get("properties") or {}
            required = set(schema.get("required") or ())
            if '"$ref"' in json.dumps(schema) or not required <= properties.keys():
                return None
            parts = [g.lit(opening.replace("NAME", name))]
            for key, subschema in properties.items():
                value = _value_grammar(g, subschema, value_close)
                if value is None or any(c in key for c in "<>\n"):
                    return None
                pair = f"{g.lit(key_open + key + key_close)} {value}"
                parts.append(pair if key in required else f"({pair})?")
            parts.append(g.lit(closing))
            calls.append(" ".join(parts))
        return _repeated(g, g.one_of(calls), separator, parallel)

    return build


_GRAMMARS: dict[str, Callable[[_Lark, ToolSyntax, list[_Function], bool], str | None]] = {
    "hermes": _json_calls_grammar("<tool_call>\n", "arguments", "\n</tool_call>", "\n"),
    "llama3": _json_calls_grammar("", "parameters", "", "", single=True),
    "granite": _listed_grammar("<|tool_call|>[", _named("arguments"), lambda g: g.lit("}"), ", ", "]"),
    "command-r": _listed_grammar(
        "<|START_ACTION|>[\n    ", _command_r_head, lambda g: g.lit("}"), ",\n    ", "\n]<|END_ACTION|>"
    ),
    "mistral": _mistral_grammar,
    "deepseek": _deepseek_grammar,
    "gpt-oss": _harmony_grammar,
    "qwen3-coder": _keyed_grammar(
        "<tool_call>\n<function=NAME>\n", "<parameter=", ">\n", "\n</parameter>\n", "</function>\n</tool_call>", "\n"
    ),
    "seed-oss": _keyed_grammar(
        "<seed:tool_call>\n<function=NAME>\n",
        "<parameter=",
        ">",
        "</parameter>\n",
        "</function>\n</seed:tool_call>",
        "\n",
    ),
    "glm": _keyed_grammar(
        "<tool_call>NAME\n", "<arg_key>", "</arg_key>\n<arg_value>", "</arg_value>\n", "</tool_call>", "\n"
    ),
}


def call_grammar(
    syntax: ToolSyntax,
    tools: Sequence[Mapping],
    *,
    parallel: bool,
    required: bool,
    special_tokens: Mapping[str, int] | None = None,
    reasoning: ReasoningTags | None = None,
    inside: bool = False,
) -> str | None:
    """An llguidance Lark grammar for an answer that is one call (with `parallel`, one or more) of
    one of `tools` in the family's syntax, its arguments valid against that tool's schema (pass the
    one named tool for a named tool_choice). None when `required` is false ("auto" leaves the model
    free, its calls are parsed afterwards) and for the families whose syntax it cannot express
    (gemma, lfm2: their argument notations are not JSON).

    `special_tokens` maps marker texts that are single special tokens of the model's vocabulary to
    their ids, so the grammar names the token instead of spelling its text. `reasoning` lets a
    thinking model reason first (`inside`: the prompt already opened the reasoning); gpt-oss's
    analysis message is always allowed.
    """
    if not required:
        return None
    if not tools:
        raise ValueError("a tool call needs at least one tool")
    build = _GRAMMARS.get(syntax.family)
    if build is None:
        return None
    g = _Lark(special_tokens)
    functions = [(tool["function"]["name"], dict(_parameters(tool))) for tool in tools]
    calls = build(g, syntax, functions, parallel)
    if calls is None:
        return None
    if reasoning is None or syntax.family == "gpt-oss":
        return g.text(calls)
    think = g.until(reasoning.end)
    space = "/[ \\t\\r\\n]+/"
    if inside:
        return g.text(f"{think} {space}? {calls}")
    return g.text(f"({space}? {g.lit(reasoning.start)} {think} {space}?)? {calls}")


# What follows a call's opening marker, per family whose calls may be constrained once the model
# opens one on its own ("auto"): the rest of one call.
_AFTER_OPENING: dict[str, Callable[[_Lark, ToolSyntax, list[_Function], bool], str | None]] = {
    "hermes": _json_calls_grammar("\n", "arguments", "\n</tool_call>", "\n", single=True),
}


def opened_call_grammar(
    syntax: ToolSyntax, tools: Sequence[Mapping], *, special_tokens: Mapping[str, int] | None = None
) -> str | None:
    """For tool_choice "auto": an llguidance Lark grammar that leaves the answer free until the
    model writes its family's call opening, then holds what follows to a call of one of `tools`
    whose arguments validate, then frees the answer again (a lazy grammar: the opening triggers
    it). None for the families where this is not written (their calls are read afterwards)."""
    build = _AFTER_OPENING.get(syntax.family)
    if build is None or not tools:
        return None
    g = _Lark(special_tokens)
    functions = [(tool["function"]["name"], dict(_parameters(tool))) for tool in tools]
    call = build(g, syntax, functions, False)
    if call is None:
        return None
    opened = g.rule(f"{g.until(syntax.opening)} {call}")
    return "%llguidance {}\n" + g.text(f"{opened}* /(.|\\n)*/")
