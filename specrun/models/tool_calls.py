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

import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from .held_text import partial_suffix
from .tool_call_bodies import _BLOCKS, _checked, _decode, _json_calls, _RawCall, _skip_space
from .tool_syntax import ToolCall, ToolSyntax

# --- results ------------------------------------------------------------------------------------


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
                    keep = 0 if final else partial_suffix(held, opening)
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
