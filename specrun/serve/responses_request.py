"""The Responses API's request bodies (POST /v1/responses, /v1/responses/input_tokens), validated
as strictly as chat's (schemas.Strict: strict types; fields this server does not know are kept
aside and ignored). responses.py turns them into chat requests."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Discriminator, Field, Tag

from .schemas import MAX_INT32, MAX_TOOLS, JsonObject, JsonObjectFormat, Strict, Text, TextFormat, integer

MAX_ITEMS = 8192  # input items of one request (a long agent session stays far below)
MAX_PARTS = 1024  # content parts of one item
MAX_INCLUDE = 32
TEXT_PARTS = ("input_text", "output_text", "text")


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

    def left_out(self) -> bool:
        return True


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

    def left_out(self) -> bool:
        return True


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

    def left_out(self) -> bool:
        return True


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

    model_config = ConfigDict(json_schema_extra={"examples": [{"input": "Say hello.", "max_output_tokens": 8}]})

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
