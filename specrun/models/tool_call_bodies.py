"""The body of one tool call block in each family's syntax, read into calls (tool_calls.py finds
the blocks in an answer and says what each syntax looks like); reading never raises: what does not
parse is None, and the block stays content."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Collection
from typing import Any

from .tool_syntax import DS_CALL_BEGIN, DS_CALL_END, DS_SEP, ToolCall, ToolSyntax

# --- JSON helpers -------------------------------------------------------------------------------


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_no_constant)  # NaN and Infinity are not JSON
_CALL_KEYS = {"name", "arguments", "parameters", "id", "type", "function", "tool_name", "tool_call_id"}
_RawCall = tuple[Any, Any, Any]  # (name, arguments, id) as found, checked by _checked


def _decode(text: str, at: int = 0) -> tuple[Any, int] | None:
    """The JSON value starting at `at` and where it ends; None when there is none (yet)."""
    try:
        return _DECODER.raw_decode(text, at)
    except (ValueError, RecursionError):
        return None


def _json_object(text: str) -> dict | None:
    """The text as one JSON object (surrounding whitespace allowed), or None."""
    text = text.strip()
    found = _decode(text)
    return found[0] if found and found[1] == len(text) and isinstance(found[0], dict) else None


def _loose_value(text: str) -> Any:
    """A key/value form's value: JSON when it parses as JSON, else the text itself."""
    try:
        return _DECODER.decode(text)
    except (ValueError, RecursionError):
        return text


def _object_call(obj: Any) -> _RawCall | None:
    """A JSON call object, in any of the shapes models write: {"name", "arguments" | "parameters"},
    OpenAI's {"function": {...}}, Command R's {"tool_name", "parameters"}."""
    if not isinstance(obj, dict) or not obj.keys() <= _CALL_KEYS:
        return None
    if isinstance(obj.get("function"), dict) and "name" not in obj:
        inner = obj["function"]
        if not inner.keys() <= _CALL_KEYS:
            return None
        obj = {**inner, "id": obj.get("id")}
    name = obj.get("name", obj.get("tool_name"))
    arguments = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(arguments, str):
        arguments = _json_object(arguments)
    return name, arguments, obj.get("id", obj.get("tool_call_id"))


def _json_calls(value: Any) -> list[_RawCall] | None:
    """One call object, or a non-empty list of them."""
    items = value if isinstance(value, list) else [value]
    calls = [_object_call(item) for item in items]
    return calls if calls and all(calls) else None


def _compact(arguments: dict) -> str | None:
    try:
        return json.dumps(arguments, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        return None


def _checked(raw: list[_RawCall] | None, names: Collection[str]) -> list[ToolCall] | None:
    """The calls, when every one names a declared tool with an object for arguments."""
    if not raw:
        return None
    calls = []
    for name, arguments, call_id in raw:
        if not isinstance(name, str) or name not in names or not isinstance(arguments, dict):
            return None
        text = _compact(arguments)
        if text is None:
            return None
        calls.append(ToolCall(name, text, call_id if isinstance(call_id, str) and call_id else None))
    return calls


# --- bodies of the families ---------------------------------------------------------------------

_FUNCTION = re.compile(r"<function=([^>\n]+)>(.*)</function>", re.S)
_PARAMETER = re.compile(r"\s*<parameter=([^>\n]+)>(.*?)</parameter>", re.S)
_GLM_NAME = re.compile(r"([^\s<]+)\s*")
_GLM_PAIR = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>\s*", re.S)
_RECIPIENT = re.compile(r"to=functions\.([^\s<]+)")


def _pairs(pattern: re.Pattern, text: str, at: int) -> list[tuple[str, str]] | None:
    """Key/value pairs matched back to back from `at` to the end of the text."""
    pairs = []
    while at < len(text):
        match = pattern.match(text, at)
        if not match:
            return None
        pairs.append((match.group(1), match.group(2)))
        at = match.end()
    return pairs


def _trim_newline(value: str) -> str:
    """Qwen3-Coder writes each value on lines of its own: one newline either side is markup."""
    value = value[1:] if value.startswith("\n") else value
    return value[:-1] if value.endswith("\n") else value


def _function_call(body: str) -> list[_RawCall] | None:
    """<function=NAME><parameter=K>V</parameter>…</function> (Qwen3-Coder, Qwen3.5, Seed-OSS)."""
    match = _FUNCTION.fullmatch(body)
    pairs = match and _pairs(_PARAMETER, match.group(2).rstrip(), 0)
    if pairs is None:
        return None
    arguments = {key.strip(): _loose_value(_trim_newline(value)) for key, value in pairs}
    return [(match.group(1).strip(), arguments, None)]


def _glm_call(body: str) -> list[_RawCall] | None:
    """NAME then <arg_key>K</arg_key><arg_value>V</arg_value> pairs (GLM-4.5 / 4.6)."""
    match = _GLM_NAME.match(body)
    pairs = match and _pairs(_GLM_PAIR, body, match.end())
    if pairs is None:
        return None
    return [(match.group(1), {key.strip(): _loose_value(value) for key, value in pairs}, None)]


def _tool_call_body(body: str) -> list[_RawCall] | None:
    """What stands between <tool_call> and </tool_call>: JSON (hermes), a <function=…> block
    (qwen3-coder) or a name and key/value pairs (glm); any of the three is read under any of the
    families that share the tags."""
    body = body.strip()
    if body.startswith(("{", "[")):
        found = _decode(body)
        return _json_calls(found[0]) if found and found[1] == len(body) else None
    if body.startswith("<function="):
        return _function_call(body)
    return _glm_call(body)


def _json_body(body: str) -> list[_RawCall] | None:
    body = body.strip()
    found = _decode(body)
    return _json_calls(found[0]) if found and found[1] == len(body) else None


def _unfence(text: str) -> str:
    """JSON as DeepSeek R1 wraps it: in a ```json fence."""
    text = text.strip()
    if text.startswith("```") and text.endswith("```") and "\n" in text:
        return text[text.index("\n") + 1 : -3]
    return text


def _deepseek_body(body: str) -> list[_RawCall] | None:
    """<｜tool▁call▁begin｜>…<｜tool▁call▁end｜> one after the other; inside, V3.1's NAME<sep>JSON
    or R1's function<sep>NAME\\n```json\\nJSON\\n```."""
    calls, rest = [], body
    while rest.strip():
        rest = rest.lstrip()
        end = rest.find(DS_CALL_END)
        if not rest.startswith(DS_CALL_BEGIN) or end < 0:
            return None
        head, sep, tail = rest[len(DS_CALL_BEGIN) : end].partition(DS_SEP)
        rest = rest[end + len(DS_CALL_END) :]
        if not sep:
            return None
        if head.strip() == "function" and not tail.lstrip().startswith("{"):
            head, _, tail = tail.partition("\n")
        calls.append((head.strip(), _json_object(_unfence(tail)), None))
    return calls or None


_GEMMA_QUOTE = '<|"|>'
_SCALARS = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}


class _GemmaValues:
    """Gemma 4's argument notation: JSON with bare keys and strings quoted by <|"|>."""

    def __init__(self, text: str):
        self.text, self.at = text, 0

    def _space(self) -> None:
        while self.at < len(self.text) and self.text[self.at].isspace():
            self.at += 1

    def _peek(self) -> str:
        self._space()
        return self.text[self.at : self.at + 1]

    def _expect(self, char: str) -> None:
        if self._peek() != char:
            raise ValueError(f"expected {char!r}")
        self.at += 1

    def _quoted(self) -> str:
        end = self.text.find(_GEMMA_QUOTE, self.at + len(_GEMMA_QUOTE))
        if end < 0:
            raise ValueError("unclosed string")
        value, self.at = self.text[self.at + len(_GEMMA_QUOTE) : end], end + len(_GEMMA_QUOTE)
        return value

    def _bare(self, stops: str) -> str:
        start = self.at
        while self.at < len(self.text) and self.text[self.at] not in stops:
            self.at += 1
        return self.text[start : self.at].strip()

    def value(self) -> Any:
        char = self._peek()
        if self.text.startswith(_GEMMA_QUOTE, self.at):
            return self._quoted()
        if char == "{":
            return self.mapping()
        if char == "[":
            self.at += 1
            items: list = []
            while self._peek() != "]":
                if items:
                    self._expect(",")
                items.append(self.value())
            self.at += 1
            return items
        token = self._bare(",}]")
        if token in _SCALARS:
            return _SCALARS[token]
        return _DECODER.decode(token)  # a number; anything else raises

    def mapping(self) -> dict:
        self._expect("{")
        out: dict = {}
        while self._peek() != "}":
            if out:
                self._expect(",")
            self._space()
            key = self._quoted() if self.text.startswith(_GEMMA_QUOTE, self.at) else self._bare(":")
            self._expect(":")
            out[key] = self.value()
        self.at += 1
        return out


def _gemma_body(body: str) -> list[_RawCall] | None:
    """call:NAME{…} (Gemma 4)."""
    body = body.strip()
    brace = body.find("{")
    if not body.startswith("call:") or brace < 0:
        return None
    reader = _GemmaValues(body[brace:])
    try:
        arguments = reader.mapping()
    except (ValueError, IndexError, RecursionError):
        return None
    if body[brace + reader.at :].strip():
        return None
    return [(body[5:brace].strip(), arguments, None)]


def _python_literal(node: ast.AST) -> Any:
    """A Python (or JSON) literal from its syntax tree; anything else raises ValueError."""
    if isinstance(node, ast.Constant) and (node.value is None or type(node.value) in (str, int, float, bool)):
        return node.value
    if isinstance(node, ast.Name) and node.id in _SCALARS:
        return _SCALARS[node.id]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_python_literal(item) for item in node.elts]
    if isinstance(node, ast.Dict) and all(key is not None for key in node.keys):
        keys = [_python_literal(key) for key in node.keys]
        if not all(isinstance(key, str) for key in keys):
            raise ValueError("non-string key")
        return dict(zip(keys, (_python_literal(value) for value in node.values)))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _python_literal(node.operand)
        if type(value) in (int, float):
            return -value
    raise ValueError("not a literal")


def _lfm2_body(body: str) -> list[_RawCall] | None:
    """[name(k='v', …), …] as Python calls (LFM2), or the same calls as JSON."""
    body = body.strip()
    if body.startswith("{") or (body.startswith("[") and body[1:].lstrip().startswith("{")):
        return _json_body(body)
    try:
        tree = ast.parse(body, mode="eval").body
        calls = []
        for node in tree.elts if isinstance(tree, ast.List) else [tree]:
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.args:
                return None
            if any(keyword.arg is None for keyword in node.keywords):
                return None
            calls.append((node.func.id, {kw.arg: _python_literal(kw.value) for kw in node.keywords}, None))
        return calls or None
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


_TAG_BODIES: dict[str, Callable[[str], list[_RawCall] | None]] = {
    "hermes": _tool_call_body,
    "qwen3-coder": _tool_call_body,
    "glm": _tool_call_body,
    "seed-oss": _tool_call_body,
    "deepseek": _deepseek_body,
    "gemma": _gemma_body,
    "lfm2": _lfm2_body,
    "command-r": _json_body,
}

# --- blocks: where a call block ends, given the text from its opening on ------------------------
# A block reader returns None to wait for more text (never when `final`), or (end, calls) where
# calls is None when the block is no call: the scanner then takes the opening for content.

_Step = tuple[int, list[_RawCall] | None] | None
_REJECT: _Step = (0, None)


def _tagged_block(syntax: ToolSyntax, text: str, start: int, final: bool) -> _Step:
    at = text.find(syntax.closing, start)
    if at >= 0:
        return at + len(syntax.closing), _TAG_BODIES[syntax.family](text[start:at])
    if not final:
        return None
    return (len(text), _TAG_BODIES[syntax.family](text[start:])) if syntax.closed_by_end else _REJECT


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


def _json_value_block(text: str, at: int, final: bool, shape: Callable[[Any], list[_RawCall] | None]) -> _Step:
    """A JSON object or list starting at `at` (after whitespace): the block ends where it ends."""
    at = _skip_space(text, at)
    if at == len(text):
        return _REJECT if final else None
    if text[at] not in "[{":
        return _REJECT
    found = _decode(text, at)
    if found is None:
        return _REJECT if final else None
    return found[1], shape(found[0])


def _json_block(syntax: ToolSyntax, text: str, start: int, final: bool) -> _Step:
    return _json_value_block(text, start, final, _json_calls)


def _mistral_block(syntax: ToolSyntax, text: str, start: int, final: bool) -> _Step:
    """[TOOL_CALLS] then a JSON list (Nemo) or NAME[CALL_ID]ID[ARGS]{…} (Small 3.2, Ministral)."""
    at = _skip_space(text, start)
    if at == len(text):
        return _REJECT if final else None
    if text[at] in "[{":
        return _json_value_block(text, at, final, _json_calls)
    args = text.find("[ARGS]", start)
    if args < 0:
        return _REJECT if final else None
    name, _, call_id = text[start:args].partition("[CALL_ID]")

    def shape(value: Any) -> list[_RawCall]:
        return [(name.strip(), value, call_id.strip())]

    return _json_value_block(text, args + len("[ARGS]"), final, shape)


def _harmony_block(syntax: ToolSyntax, text: str, start: int, final: bool) -> _Step:
    """A gpt-oss message: a header up to <|message|> naming `to=functions.NAME`, then the JSON
    arguments up to <|call|> (a stop token, so the end of the answer closes it too). A message to
    anyone else is content as soon as its header is complete."""
    message = text.find("<|message|>", start)
    if message < 0:
        return _REJECT if final else None
    header = text[start:message]
    recipient = _RECIPIENT.search(header)
    if not recipient or "<|start|>" in header:
        return _REJECT
    body = message + len("<|message|>")
    close = text.find(syntax.closing, body)
    if close < 0 and not final:
        return None
    end = len(text) if close < 0 else close + len(syntax.closing)
    return end, [(recipient.group(1), _json_object(text[body : len(text) if close < 0 else close]), None)]


_BLOCKS: dict[str, Callable[[ToolSyntax, str, int, bool], _Step]] = {
    **dict.fromkeys(_TAG_BODIES, _tagged_block),
    "llama3": _json_block,
    "granite": _json_block,
    "mistral": _mistral_block,
    "gpt-oss": _harmony_block,
}
