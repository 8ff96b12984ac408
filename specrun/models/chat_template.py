"""A model's own chat template (the Jinja program in its GGUF metadata), rendered exactly as Hugging
Face transformers' `apply_chat_template` renders it.

Why transformers' rules: the template was written and tested against them, and every other tool
(transformers, vLLM, llama-server `--jinja`, LM Studio) sends the model what they produce, so the
model sees the prompt it was trained on. The rules, from transformers' documentation:

- a sandboxed, immutable Jinja environment with `trim_blocks` and `lstrip_blocks`, the loop
  controls (`break`, `continue`) and the `{% generation %}` block (which only marks text);
- the variables `messages`, `tools` and `documents` (None when not given), `add_generation_prompt`,
  `bos_token` and `eos_token`, and whatever else the caller passes (`enable_thinking`, ...);
- `raise_exception(message)`, `strftime_now(format)`, a `tojson` filter that is plain `json.dumps`
  (no HTML escaping, non-ASCII kept, `indent`, `separators` and `sort_keys` accepted), and `dict`
  and `namespace` that cannot reach Python internals;
- message keys whose value is None are dropped, and a message's reasoning is passed under both
  `reasoning_content` and `thinking` (gpt-oss reads the latter).

Pure text and jinja2: nothing here knows about llama.cpp, so templates are tested as data.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..errors import ChatTemplateError

REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")  # the first is the one templates read
RESERVED = ("messages", "tools", "documents", "add_generation_prompt")  # set by render() itself
RAW_HINT = "--raw feeds the prompt as is"


class _TemplateRaised(Exception):
    """raise_exception() was called: the template's own message, kept apart from Jinja's errors."""


class _GenerationBlock(jinja2.ext.Extension):
    """`{% generation %}…{% endgeneration %}` marks the assistant's text for training masks; for a
    prompt it renders its body unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


class _Namespace(jinja2.utils.Namespace):
    """Jinja's namespace(), refusing underscore names (the way out of a sandbox is through dunders)."""

    def __init__(*args, **kwargs):  # noqa: N805 - Namespace's own signature trick: `self` may be a keyword
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for name in attrs:
            _Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        _Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name):
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"a namespace attribute may not start with an underscore ({name!r})")


class _Dict:
    """`dict(...)` and `dict.fromkeys(...)` for templates, without handing them the type itself."""

    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)


def _raise_exception(message):
    raise _TemplateRaised(str(message))


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


@lru_cache(maxsize=16)
def _compile(source: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["dict"] = _Dict()
    env.globals["namespace"] = _Namespace
    return env.from_string(source)


def plain(value: Any) -> Any:
    """A deep copy made only of JSON types (str, int, float, bool, None, dict, list), so a template
    sees plain data whatever the caller passed (a str subclass, a tuple)."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    raise ChatTemplateError(
        f"a chat template cannot be given a {type(value).__name__}", "pass strings, numbers, lists and mappings"
    )


def prepare_messages(messages: Sequence[Mapping]) -> list[dict]:
    """Messages as transformers hands them to a template: keys whose value is None dropped, and any
    reasoning given under one of REASONING_FIELDS copied to `thinking` and `reasoning_content`."""
    prepared = []
    for message in messages:
        if not isinstance(message, Mapping):
            raise ChatTemplateError(
                f"a chat message must be a mapping, not {type(message).__name__}", "pass dicts with role and content"
            )
        kept = {key: value for key, value in plain(message).items() if value is not None}
        reasoning = next((kept[key] for key in REASONING_FIELDS if kept.get(key) is not None), None)
        if reasoning is not None:
            kept = {"thinking": reasoning, **kept, "reasoning_content": reasoning}
        prepared.append(kept)
    return prepared


class ChatTemplate:
    """One model's chat template, with the BOS and EOS texts of its vocabulary.

    `name` names the model in error messages; `now` is the clock behind strftime_now (a test
    pins it).
    """

    def __init__(
        self,
        source: str,
        *,
        bos_token: str = "",
        eos_token: str = "",
        name: str = "the model",
        now: Callable[[], datetime] = datetime.now,
    ):
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.name = name
        self.now = now

    def _template(self) -> jinja2.Template:
        try:
            return _compile(self.source)
        except jinja2.TemplateSyntaxError as error:
            raise ChatTemplateError(
                f"the chat template of {self.name} does not parse: {error.message} (line {error.lineno})", RAW_HINT
            ) from None

    def render(
        self,
        messages: Sequence[Mapping],
        *,
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping] | None = None,
        documents: Sequence[Mapping] | None = None,
        variables: Mapping[str, Any] | None = None,
    ) -> str:
        """The prompt text for `messages`; with `add_generation_prompt` it ends where the assistant's
        answer begins. `variables` reach the template as they are (e.g. {"enable_thinking": False})."""
        variables = dict(variables or {})
        reserved = sorted(set(variables) & set(RESERVED))
        if reserved:
            raise ChatTemplateError(
                f"a chat template variable may not be named {reserved[0]!r}", "it is set from the request itself"
            )
        template = self._template()
        context = {
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            "strftime_now": self._strftime_now,
            **plain(variables),
        }
        data = {
            "messages": prepare_messages(messages),
            "tools": plain(tools),
            "documents": plain(documents),
            "add_generation_prompt": add_generation_prompt,
        }
        try:
            return template.render(**context, **data)
        except _TemplateRaised as raised:
            raise ChatTemplateError(
                f"the chat template of {self.name} refused the conversation: {raised}", RAW_HINT
            ) from None
        except Exception as error:  # the template is a program from the model file: any error is its own
            raise self._failed(error) from None

    def _failed(self, error: Exception) -> ChatTemplateError:
        detail = getattr(error, "message", None) or str(error) or type(error).__name__
        return ChatTemplateError(f"the chat template of {self.name} failed: {detail}", RAW_HINT)

    def _strftime_now(self, format: str) -> str:  # noqa: A002 - the name templates call it with
        return self.now().strftime(format)
