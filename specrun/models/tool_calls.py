"""Tool calls in a model's answer: the syntax its chat template taught it, read back into OpenAI
`tool_calls` (whole or as the text streams); tool_grammar.py makes it call one.

Each model family writes a call its own way; the template's rendering of an assistant message with
`tool_calls` is what the model was trained to emit, so that is the syntax read here:

    hermes        <tool_call>\\n{"name": …, "arguments": {…}}\\n</tool_call>        Qwen2.5, Qwen3, QwQ, Hermes
    qwen3-coder   <tool_call>\\n<function=NAME>\\n<parameter=K>\\nV\\n</parameter>…     Qwen3-Coder, Qwen3.5
    glm           <tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>…  GLM-4.5 / 4.6
    seed-oss      <seed:tool_call>\\n<function=NAME>\\n<parameter=K>V</parameter>…   ByteDance Seed-OSS
    llama3        {"name": …, "parameters": {…}}, or after <|python_tag|>             Llama 3.1 / 3.2
    mistral       [TOOL_CALLS][{"name": …, "arguments": …, "id": …}] ("list")         Mistral-Nemo
                  [TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{…} ("args", CALL_ID optional)     Mistral-Small-3.2, Ministral
    gpt-oss       <|start|>assistant<|channel|>commentary to=functions.NAME … <|message|>{…}<|call|>
    deepseek      <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}<｜tool▁call▁end｜>…  V3.1 ("v3")
                  …<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{…}\\n```…    R1 distills ("r1")
    granite       <|tool_call|>[{"name": …, "arguments": {…}}]                         Granite 3.x
    gemma         <|tool_call>call:NAME{k:<|"|>v<|"|>,…}<tool_call|>                   Gemma 4
    lfm2          <|tool_call_start|>[name(k='v', …)]<|tool_call_end|>                 LFM2
    command-r     <|START_ACTION|>[{"tool_call_id": …, "tool_name": …, "parameters": …}]<|END_ACTION|>

Reading an answer never raises: a call that does not parse, or names a tool the request did not
declare, stays in the content as the model wrote it.

Bare JSON: small models, told about tools, often answer with a bare JSON object (or a list of them,
or one inside a ```json fence) shaped `{"name": …, "arguments": …}` instead of their template's
syntax. When the whole answer is such JSON and every name in it is a declared tool, it is read as
tool calls, whatever the family (or with no family at all): an agent gets a call it can run rather
than text it would have to recognise itself. Anything short of that (an undeclared name, text
around the JSON) is content.

Values in the key/value forms (qwen3-coder, glm, seed-oss) carry no types: a value that parses as
JSON is taken as JSON, any other as a string.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

# --- syntaxes -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolSyntax:
    """How one model family writes its tool calls.

    `opening` starts a call block; `closing` ends it ("" where the block's own JSON ends it).
    `closed_by_end`: the end of the answer also closes a block (its closing is a stop token, or
    templates leave it out). `answer_opens`: the generation prompt ends with the opening, so the
    answer itself starts as a block would. `variant` picks between a family's forms.
    """

    family: str
    opening: str
    closing: str = ""
    variant: str = ""
    closed_by_end: bool = False
    answer_opens: bool = False


DS_CALLS_BEGIN, DS_CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
DS_CALL_BEGIN, DS_CALL_END, DS_SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"

HERMES = ToolSyntax("hermes", "<tool_call>", "</tool_call>")
QWEN3_CODER = ToolSyntax("qwen3-coder", "<tool_call>", "</tool_call>")
GLM = ToolSyntax("glm", "<tool_call>", "</tool_call>")
SEED_OSS = ToolSyntax("seed-oss", "<seed:tool_call>", "</seed:tool_call>")
LLAMA3 = ToolSyntax("llama3", "<|python_tag|>")
MISTRAL_LIST = ToolSyntax("mistral", "[TOOL_CALLS]", variant="list")
MISTRAL_ARGS = ToolSyntax("mistral", "[TOOL_CALLS]", variant="args")
GPT_OSS = ToolSyntax("gpt-oss", "<|start|>assistant", "<|call|>", closed_by_end=True, answer_opens=True)
DEEPSEEK_V3 = ToolSyntax("deepseek", DS_CALLS_BEGIN, DS_CALLS_END, variant="v3", closed_by_end=True)
DEEPSEEK_R1 = ToolSyntax("deepseek", DS_CALLS_BEGIN, DS_CALLS_END, variant="r1", closed_by_end=True)
GRANITE = ToolSyntax("granite", "<|tool_call|>")
GEMMA = ToolSyntax("gemma", "<|tool_call>", "<tool_call|>")
LFM2 = ToolSyntax("lfm2", "<|tool_call_start|>", "<|tool_call_end|>")
COMMAND_R = ToolSyntax("command-r", "<|START_ACTION|>", "<|END_ACTION|>")


def tool_syntax(template_source: str | None) -> ToolSyntax | None:
    """The tool-call syntax a chat template teaches, from the markers in its source (the most
    specific first: GLM and Qwen3-Coder also use <tool_call>); None when it shows none (the answer
    is then read as content, bare JSON aside)."""
    s = template_source or ""
    if "<|channel|>" in s and "<|call|>" in s:
        return GPT_OSS
    if "<seed:tool_call>" in s:
        return SEED_OSS
    if "<tool_call>" in s:
        return GLM if "<arg_key>" in s else QWEN3_CODER if "<function=" in s else HERMES
    if DS_CALLS_BEGIN in s:
        return DEEPSEEK_R1 if "```json" in s else DEEPSEEK_V3
    if "[TOOL_CALLS]" in s:
        return MISTRAL_ARGS if "[ARGS]" in s else MISTRAL_LIST
    if "<|tool_call|>" in s:
        return GRANITE
    if "<|tool_call>" in s and "<tool_call|>" in s:
        return GEMMA
    if "<|tool_call_start|>" in s:
        return LFM2
    if "<|START_ACTION|>" in s:
        return COMMAND_R
    if "<|python_tag|>" in s or ('{"name": "' in s and '"parameters": ' in s):
        return LLAMA3
    return None


# --- results ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    """One call as OpenAI sends it: `arguments` is a JSON object as compact JSON text; `id` is the
    one the model wrote, where its syntax carries one."""

    name: str
    arguments: str
    id: str | None = None


@dataclass
class ParsedAnswer:
    """An answer's text outside its calls (stripped) and its calls, in order."""

    content: str
    calls: list[ToolCall] = field(default_factory=list)


@dataclass(frozen=True)
class Content:
    """Text of the answer outside its calls, ready to show."""

    text: str


@dataclass(frozen=True)
class CallStart:
    """A call begins: OpenAI's first delta of tool_calls[index] carries its name and id."""

    index: int
    name: str
    id: str | None


@dataclass(frozen=True)
class CallArguments:
    """A piece of call `index`'s arguments text (the pieces joined are the whole JSON object)."""

    index: int
    text: str


StreamEvent = Content | CallStart | CallArguments


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


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest end of `text` that is a proper beginning of `tag`."""
    for n in range(min(len(text), len(tag) - 1), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0


_Segment = tuple[str, Any]  # ("content", str) or ("calls", list[ToolCall])


class _Scanner:
    """Cuts an answer into content and call blocks as its text arrives, holding back only what more
    text could still change: a partial opening, or a block not yet closed."""

    def __init__(self, syntax: ToolSyntax, names: Collection[str]):
        self.syntax, self.names = syntax, names
        self.read = _BLOCKS[syntax.family]
        self.held = ""
        self.block: int | None = 0 if syntax.answer_opens else None  # opening length, inside a block

    def feed(self, text: str, *, final: bool = False) -> list[_Segment]:
        self.held += text
        out: list[_Segment] = []
        opening = self.syntax.opening
        while True:
            held = self.held
            if self.block is None:
                at = held.find(opening)
                if at < 0:
                    keep = 0 if final else _partial_suffix(held, opening)
                    out.append(("content", held[: len(held) - keep]))
                    self.held = held[len(held) - keep :]
                    return out
                out.append(("content", held[:at]))
                self.held, self.block = held[at:], len(opening)
                continue
            step = self.read(self.syntax, held, self.block, final)
            if step is None:
                return out
            end, raw = step
            calls = _checked(raw, self.names)
            if calls is None:  # not a call: its opening is text, and reading goes on after it
                out.append(("content", held[: self.block]))
                self.held = held[self.block :]
            else:
                out.append(("calls", calls))
                self.held = held[end:]
            self.block = None


# --- whole answers ------------------------------------------------------------------------------

_FENCE = re.compile(r"```(?:json)?[ \t\r]*\n(.*)\n[ \t\r]*```", re.S)


def _bare_calls(text: str, names: Collection[str]) -> list[ToolCall] | None:
    """The whole answer as bare (or fenced) JSON calls, one object, a list, or several separated
    by commas or semicolons; None unless every name is declared."""
    text = text.strip()
    fenced = _FENCE.fullmatch(text)
    if fenced:
        text = fenced.group(1).strip()
    if not text.startswith(("{", "[")):
        return None
    raw: list[_RawCall] = []
    at = 0
    while at < len(text):
        found = _decode(text, at)
        calls = found and _json_calls(found[0])
        if not calls:
            return None
        raw += calls
        at = _skip_space(text, found[1])
        if text[at : at + 1] in (",", ";"):
            at = _skip_space(text, at + 1)
    return _checked(raw, names)


def _answer_kind(text: str) -> str | None:
    """Whether an answer's beginning could be bare JSON calls ("whole": wait for all of it) or
    not ("scan"); None while its first characters leave it open."""
    text = text.lstrip()
    if not text:
        return None
    if text[0] == "{":
        return "whole"
    if text[0] == "[":
        rest = text[1:].lstrip()
        return None if not rest else "whole" if rest[0] == "{" else "scan"
    if text[0] != "`":
        return "scan"
    line, newline, _ = text.partition("\n")
    line = line.rstrip(" \t\r")
    if newline:
        return "whole" if line in ("```", "```json") else "scan"
    return None if "```json".startswith(line) or line in ("```", "```json") else "scan"


def _segments(text: str, syntax: ToolSyntax | None, names: Collection[str]) -> list[_Segment]:
    calls = _bare_calls(text, names)
    if calls is not None:
        return [("calls", calls)]
    if syntax is None:
        return [("content", text)]
    return _Scanner(syntax, names).feed(text, final=True)


def parse_tool_calls(text: str, syntax: ToolSyntax | None, tool_names: Collection[str]) -> ParsedAnswer:
    """A whole answer's content and calls; never raises."""
    segments = _segments(text, syntax, frozenset(tool_names))
    content = "".join(value for kind, value in segments if kind == "content")
    return ParsedAnswer(content.strip(), [call for kind, value in segments if kind == "calls" for call in value])


# --- streams ------------------------------------------------------------------------------------


class ToolCallStream:
    """An answer's text, fed piece by piece, as content and call events: content passes straight
    through, except what could begin a call (held until it is known) and an answer that starts like
    bare JSON (held to the end). The events add up to what parse_tool_calls makes of the whole text:
    the content pieces joined are its content, the calls its calls."""

    def __init__(self, syntax: ToolSyntax | None, tool_names: Collection[str]):
        self.syntax = syntax
        self.names = frozenset(tool_names)
        self._mode = "begin"  # begin → scan, or begin → whole
        self._held = ""
        self._scanner = _Scanner(syntax, self.names) if syntax else None
        self._space = ""  # trailing whitespace, sent only if more content follows
        self._started = False
        self._index = 0

    def feed(self, piece: str) -> list[StreamEvent]:
        """Add text; return the events now final (possibly none)."""
        if self._mode == "scan":
            return self._events(self._scan(piece, final=False))
        self._held += piece
        if self._mode == "begin":
            kind = _answer_kind(self._held)
            if kind == "scan":
                self._mode, held, self._held = "scan", self._held, ""
                return self._events(self._scan(held, final=False))
            self._mode = kind or "begin"
        return []

    def finish(self) -> list[StreamEvent]:
        """The answer has ended: release what was held back."""
        if self._mode == "scan":
            return self._events(self._scan("", final=True))
        held, self._held = self._held, ""
        return self._events(_segments(held, self.syntax, self.names))

    def _scan(self, text: str, *, final: bool) -> list[_Segment]:
        if self._scanner is None:
            return [("content", text)]
        return self._scanner.feed(text, final=final)

    def _events(self, segments: list[_Segment]) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        for kind, value in segments:
            if kind == "content":
                events += self._content(value)
                continue
            for call in value:
                events += [CallStart(self._index, call.name, call.id), CallArguments(self._index, call.arguments)]
                self._index += 1
        return events

    def _content(self, text: str) -> list[StreamEvent]:
        """Content without the whitespace that would be stripped from the whole answer's."""
        text = self._space + text
        if not self._started:
            text = text.lstrip()
        body = text.rstrip()
        self._space = text[len(body) :]
        if not body:
            return []
        self._started = True
        return [Content(body)]
