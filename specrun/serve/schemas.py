"""Request bodies of the OpenAI-compatible endpoints, validated strictly, and the response shapes.

Strict types, as OpenAI's API has them: a temperature sent as the string "0.5" or a max_tokens of
`true` is a 400, not silently converted. A field this server cannot honour is refused by name unless
its value is the neutral one (an empty `logit_bias`, zero penalties, no tools...), because a client
that asked for it would otherwise get an answer that is not what it asked for; a field the server
does not know at all is refused too, as OpenAI's API refuses unknown parameters. Fields that cannot
change the answer (`user`, `metadata`, `store`, `service_tier`...) are accepted; a `prediction` is
drafted from, which never changes the answer. Every number is bounded and every string must be text
UTF-8 can encode (a lone surrogate is a 400 naming its field, not a failure deep in the tokenizer).
`top_k`, `min_p`, `return_tokens`, `cache_prompt` and `chat_template_kwargs` are accepted as
llama.cpp's server accepts them, and so are its `grammar` and `json_schema`, which constrain the
answer as `response_format` does (service.py compiles them).

The JSON schema of each refused-unless-neutral field lists the values accepted, so the OpenAPI
document (/openapi.json) says exactly what the server takes.
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

MAX_STOPS = 128  # stop strings a request may give (lm-eval and editors send long lists; llama-server sets no bound)
MAX_STOP_CHARS = 16_384  # their characters together: each step holds back as many as the longest
MAX_TOOLS = 128  # tools a request may declare, and calls an assistant message may carry, as OpenAI allows
MAX_PROMPTS = 256  # prompts one completion request may carry (an evaluation harness batches them)
MAX_PROMPT_IDS = 1 << 20  # token ids one prompt may be given as (the context refuses more long before)
MAX_TOP_LOGPROBS = 20  # alternatives a request may ask for beside each token, as OpenAI allows
MAX_INT32 = 2**31 - 1  # llama.cpp's int fields (top_k); larger means nothing more


def _encodable(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise PydanticCustomError(
            "unencodable_text",
            "text that UTF-8 cannot encode (a lone surrogate at character {at}); send valid Unicode",
            {"at": error.start},
        ) from None
    return value


def _encodable_json(value: Any) -> Any:
    """Every string inside a JSON value, keys included, must be encodable."""
    if isinstance(value, str):
        _encodable(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            _encodable_json(key)
            _encodable_json(item)
    elif isinstance(value, list):
        for item in value:
            _encodable_json(item)
    return value


def _integral(value: Any) -> Any:
    """An integer written with a fraction of zero (`5.0`) is an integer, as JSON Schema has it."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def integer(**bounds: int) -> Any:
    """An int within `bounds` (ge, le) that may be written `5.0`; the bounds come first so that
    the JSON schema states them."""
    return Annotated[int, Field(**bounds), BeforeValidator(_integral)]


Text = Annotated[str, AfterValidator(_encodable)]
Int = integer()
JsonObject = Annotated[dict[str, Any], AfterValidator(_encodable_json)]


def _refused(message: str, said: str) -> PydanticCustomError:
    return PydanticCustomError("unsupported_parameter", message + ": only {said} is accepted", {"said": said})


def _neutral(base: Any, accepted: tuple, said: str, schema: dict) -> Any:
    """A field this server cannot honour: its value must be None or one of `accepted` (the neutral
    ones, `said` in words); the JSON schema lists exactly those."""

    def check(value):
        if value is not None and not any(_same(value, a) for a in accepted):
            raise _refused("not supported by this server", said)
        return value

    return Annotated[base | None, AfterValidator(check), WithJsonSchema({"anyOf": [schema, {"type": "null"}]})]


def _same(value, accepted) -> bool:
    """Equal and of the same kind (0 is not False, 1 is not True; 0.0 is 0)."""
    if isinstance(value, float) and type(accepted) is int:
        return value == accepted
    return type(value) is type(accepted) and value == accepted


def _no_bias(value):
    if value is not None and any(bias != 0 for bias in value.values()):
        raise _refused("not supported by this server", "{} (or biases of 0)")
    return value


Penalty = _neutral(float, (0,), "0 (no penalty)", {"const": 0})
LogitBias = Annotated[
    dict[Text, float] | None,
    AfterValidator(_no_bias),
    WithJsonSchema({"anyOf": [{"type": "object", "additionalProperties": {"const": 0}}, {"type": "null"}]}),
]
NoTools = _neutral(list[JsonObject], ([],), "[] (no tools)", {"type": "array", "maxItems": 0})
NoToolChoice = _neutral(
    Text | JsonObject, ("none", "auto"), '"none" (or "auto", with no tools)', {"enum": ["none", "auto"]}
)
NoObject = _neutral(JsonObject, (), "null", {"not": {}})
NotTrue = _neutral(bool, (False,), "false", {"const": False})
TextOnly = _neutral(
    list[Literal["text", "audio"]],
    ([], ["text"]),
    '["text"]',
    {"type": "array", "items": {"const": "text"}, "maxItems": 1},
)
NoReasoning = _neutral(Text, (), "null (no reasoning effort can be asked of the models served here)", {"not": {}})
MediumVerbosity = _neutral(Text, ("medium",), '"medium"', {"const": "medium"})
BestOfOne = _neutral(Int, (1,), "1", {"const": 1})


class Strict(BaseModel):
    """Known fields keep their strict types; a field this server does not know is kept aside and
    ignored (clients send fields of newer API versions and of their own: refusing them would lock
    the client out), and `unknown_fields` names it for the log."""

    model_config = ConfigDict(strict=True, extra="allow")

    def left_out(self) -> bool:
        """Whether the whole object is left out (a hosted tool, an item of one): its other fields
        are then no unknown fields to name."""
        return False


def unknown_fields(model: BaseModel, at: str = "") -> list[str]:
    """The paths of the fields `model` (and the models inside it) did not know, e.g.
    `messages.2.cache_control`."""
    if isinstance(model, Strict) and model.left_out():
        return []
    found = [f"{at}{name}" for name in (model.model_extra or {})]
    for name in type(model).model_fields:
        found += _unknown_inside(getattr(model, name), f"{at}{name}.")
    return found


def _unknown_inside(value: Any, at: str) -> list[str]:
    if isinstance(value, BaseModel):
        return unknown_fields(value, at)
    if isinstance(value, (list, tuple)):
        return [path for i, item in enumerate(value) for path in _unknown_inside(item, f"{at}{i}.")]
    return []


class TextPart(Strict):
    type: Literal["text"]
    text: Text


class FunctionCall(Strict):
    name: Text
    arguments: Text  # a JSON object, as text, as OpenAI sends it


class MessageToolCall(Strict):
    """A call an earlier assistant turn made (sent back with the conversation)."""

    id: Text
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    tool_calls: Annotated[list[MessageToolCall], Field(max_length=MAX_TOOLS)] | None = None  # assistant turns
    tool_call_id: Text | None = None  # a tool's answer: the call it answers
    name: Text | None = None
    # An assistant turn's reasoning, as thinking models' clients send it back: the chat template
    # renders it or drops it, as the model's own template does.
    reasoning_content: Text | None = None
    reasoning: Text | None = None
    # None: an assistant turn that only called tools (checked after the fields above, so an error names content)
    content: Annotated[Text | list[TextPart] | None, Field(validate_default=True)] = None

    @field_validator("content", mode="after")
    @classmethod
    def _content(cls, content, info: ValidationInfo):
        if content is None and not (info.data.get("role") == "assistant" and info.data.get("tool_calls")):
            raise PydanticCustomError(
                "missing", "Field required (only an assistant turn with tool_calls may leave out its content)"
            )
        return content

    @model_validator(mode="after")
    def _shaped(self) -> Message:
        if self.tool_calls is not None and self.role != "assistant":
            raise PydanticCustomError("unexpected_tool_calls", "only an assistant message carries tool_calls")
        if self.role == "tool" and not self.tool_call_id:
            raise PydanticCustomError(
                "missing_tool_call_id", "a tool message needs the tool_call_id of the call it answers"
            )
        return self

    def text(self) -> str:
        if self.content is None:
            return ""
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class FunctionSpec(Strict):
    name: Annotated[str, Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")]  # as OpenAI names functions
    description: Text | None = None
    parameters: JsonObject | None = None  # a JSON schema of the arguments (none: no arguments)
    strict: bool | None = None  # arguments always follow the schema when a call is required


class Tool(Strict):
    type: Literal["function"]
    function: FunctionSpec


class NamedFunction(Strict):
    name: Text


class NamedToolChoice(Strict):
    type: Literal["function"]
    function: NamedFunction


class Prediction(Strict):
    """OpenAI's predicted output: text the answer is expected to repeat (the file before an edit)."""

    type: Literal["content"]
    content: Text | list[TextPart]

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class StreamOptions(Strict):
    include_usage: bool = False
    include_obfuscation: bool | None = None  # OpenAI's padding of streamed chunks; nothing to pad here


class TextFormat(Strict):
    """Free text: no constraint."""

    type: Literal["text"]


class JsonObjectFormat(Strict):
    """Any JSON object."""

    type: Literal["json_object"]


class JsonSchemaSpec(Strict):
    """OpenAI's structured output: JSON that `schema` validates (without one, any JSON object)."""

    name: Annotated[str, Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")]  # as OpenAI names it (so always encodable)
    description: Text | None = None
    schema_: JsonObject | None = Field(default=None, alias="schema")
    strict: bool | None = None  # the answer always follows the schema, strict or not


class JsonSchemaFormat(Strict):
    """JSON that a schema validates."""

    type: Literal["json_schema"]
    json_schema: JsonSchemaSpec


FORMATS = ("text", "json_object", "json_schema")


def _format_tag(value: Any) -> str | None:
    """The union member a response_format names by its `type`; its tag holds a `=` so that an
    error's loc, as app.py reads it, names the field path without it."""
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return f"type={kind}" if isinstance(kind, str) and kind in FORMATS else None


ResponseFormat = Annotated[
    Annotated[TextFormat, Tag("type=text")]
    | Annotated[JsonObjectFormat, Tag("type=json_object")]
    | Annotated[JsonSchemaFormat, Tag("type=json_schema")],
    Discriminator(
        _format_tag,
        custom_error_type="invalid_response_format",
        custom_error_message="must be an object whose type is 'text', 'json_object' or 'json_schema'",
    ),
]


def _stops_bounded(stops: list[str]) -> list[str]:
    if sum(len(s) for s in stops) > MAX_STOP_CHARS:
        raise PydanticCustomError(
            "too_long", "the stop strings hold more than {limit} characters together", {"limit": MAX_STOP_CHARS}
        )
    return stops


StopList = Annotated[list[Text], Field(max_length=MAX_STOPS), AfterValidator(_stops_bounded)]


class Sampling(Strict):
    """The fields both endpoints share."""

    model: Text | None = None
    max_tokens: integer(ge=1) | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    top_k: integer(ge=0, le=MAX_INT32) | None = None
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    stop: Annotated[Text, Field(max_length=MAX_STOP_CHARS)] | StopList | None = None
    seed: Int | None = None  # any integer, as OpenAI's API takes it (used modulo 2**64)
    n: integer(ge=1, le=1) | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    return_tokens: bool = False  # as llama.cpp's server: the answer's token ids with its text
    cache_prompt: bool | None = None  # llama.cpp's server; caches are always reused here, which changes no answer
    prediction: Prediction | None = None  # drafted from; it never changes the answer
    lookup_pool: bool | None = None  # false: prompt lookup drafts from this request's own text only

    # What the answer must look like (at most one of them; service.py compiles it before the request queues).
    response_format: ResponseFormat | None = None
    grammar: Text | None = None  # llama-server's: GBNF or Lark; "" is none, as there
    json_schema: JsonObject | None = None  # llama-server's: JSON that this schema validates

    # Refused unless neutral: they change the answer, and this server does not implement them.
    logit_bias: LogitBias = None
    presence_penalty: Penalty = None
    frequency_penalty: Penalty = None

    # Accepted: they do not change the answer.
    user: Text | None = None
    metadata: dict[Text, Text] | None = None
    store: bool | None = None
    service_tier: Text | None = None
    prompt_cache_key: Text | None = None
    safety_identifier: Text | None = None

    def stops(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    def logprob_count(self) -> int | None:
        """Alternatives to report beside each token's log-probability (None: no log-probabilities)."""
        return None

    def scores_prompt(self) -> bool:
        """Whether the prompt's own tokens get log-probabilities too."""
        return False


class ChatRequest(Sampling):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: integer(ge=1) | None = None
    chat_template_kwargs: JsonObject | None = None  # as llama-server and vLLM: variables for the chat template

    logprobs: bool | None = None  # each answer token's log-probability (the target's, engine/logprobs.py)
    top_logprobs: integer(ge=0, le=MAX_TOP_LOGPROBS) | None = None  # and this many likeliest alternatives'

    # Refused unless neutral.
    tools: Annotated[list[Tool], Field(max_length=MAX_TOOLS)] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    functions: NoTools = None
    function_call: NoToolChoice = None
    audio: NoObject = None
    modalities: TextOnly = None
    reasoning_effort: NoReasoning = None
    verbosity: MediumVerbosity = None
    web_search_options: NoObject = None

    parallel_tool_calls: bool | None = None  # false: at most one call (true, the default: one or more)

    def answer_limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    @model_validator(mode="after")
    def _top_needs_logprobs(self) -> ChatRequest:
        if self.top_logprobs and not self.logprobs:
            raise PydanticCustomError("logprobs_required", "top_logprobs needs logprobs: true, as OpenAI's API has it")
        return self

    def logprob_count(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None


TokenIds = Annotated[list[integer(ge=0, le=MAX_INT32)], Field(min_length=1, max_length=MAX_PROMPT_IDS)]


class CompletionRequest(Sampling):
    """A completion of one prompt or several (each its own choice, in order): a string, a list of
    strings, a list of token ids, or a list of such lists, as OpenAI's API takes them."""

    prompt: (
        Annotated[Text, Field(min_length=1)]
        | Annotated[list[Annotated[Text, Field(min_length=1)]], Field(min_length=1, max_length=MAX_PROMPTS)]
        | TokenIds
        | Annotated[list[TokenIds], Field(min_length=1, max_length=MAX_PROMPTS)]
    )
    max_tokens: integer(ge=0) | None = None  # 0: the prompt is only read (with echo and logprobs: scored)
    echo: bool = False  # the prompt comes back before the answer (with logprobs: its tokens' too)
    suffix: Text | None = None  # the text after the insertion: the prompt and it make a FIM prompt (service.py)
    logprobs: integer(ge=0, le=MAX_TOP_LOGPROBS) | None = None  # each token's log-probability, and N alternatives'

    # Refused unless neutral.
    best_of: BestOfOne = None

    def prompts(self) -> list[str | list[int]]:
        """The prompts, each a string or token ids."""
        if isinstance(self.prompt, str) or (self.prompt and isinstance(self.prompt[0], int)):
            return [self.prompt]
        return list(self.prompt)

    def text(self) -> str:
        """The first prompt, when it is text ("" for token ids)."""
        first = self.prompts()[0]
        return first if isinstance(first, str) else ""

    def answer_limit(self) -> int | None:
        return self.max_tokens

    def logprob_count(self) -> int | None:
        return self.logprobs

    def scores_prompt(self) -> bool:
        return self.echo and self.logprobs is not None


def error_body(message: str, kind: str, param: str | None = None, code: str | None = None) -> dict:
    """OpenAI's error envelope."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


def chat_response(
    rid: str,
    model: str,
    text: str | None,
    finish_reason: str,
    report: dict,
    reasoning: str | None = None,
    tool_calls: list[dict] | None = None,
) -> dict:
    """A whole chat answer; a thinking model's reasoning apart from its content, as llama-server
    gives it; the tools it called, as OpenAI gives them (content null when it said nothing else)."""
    message = {"role": "assistant", "content": text, **({"reasoning_content": reasoning} if reasoning else {})}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": rid,
        "object": "chat.completion",
        "created": now(),
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}],
        **report,
    }


def chat_chunk(rid: str, model: str, delta: dict, finish_reason: str | None = None, report: dict | None = None) -> dict:
    return {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": now(),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        **(report or {}),
    }


def completion_response(rid: str, model: str, text: str, finish_reason: str | None, report: dict | None = None) -> dict:
    """A whole completion, or (chunk) one streamed piece of it: OpenAI uses the same object for both."""
    return {
        "id": rid,
        "object": "text_completion",
        "created": now(),
        "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}],
        **(report or {}),
    }


def with_tokens(payload: dict, tokens: list[int], body: Sampling) -> dict:
    """With `return_tokens`, the token ids behind the choice's text (the answer's, or this chunk's)."""
    if body.return_tokens:
        payload["choices"][0]["tokens"] = list(tokens)
    return payload
