"""Request bodies of the OpenAI-compatible endpoints, validated strictly, and the response shapes.

Strict types, as OpenAI's API has them: a temperature sent as the string "0.5" or a max_tokens of
`true` is a 400, not silently converted. Fields this server does not implement are ignored, except
those whose absence would change the answer's meaning (n other than 1, logprobs, echo, suffix,
tools), which are refused by name. `top_k`, `min_p` and `return_tokens` are accepted as llama.cpp's
server accepts them.
"""

from __future__ import annotations

import time
import uuid
from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_STOPS = 4  # as OpenAI allows


class Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class TextPart(Strict):
    type: Literal["text"]
    text: str


class Message(Strict):
    role: Literal["system", "developer", "user", "assistant"]
    content: Union[str, list[TextPart]]

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class StreamOptions(Strict):
    include_usage: bool = False


class Sampling(Strict):
    """The fields both endpoints share."""

    model: Optional[str] = None
    max_tokens: Optional[int] = Field(default=None, ge=1)
    temperature: Optional[float] = Field(default=None, ge=0.0, le=2.0)
    top_p: Optional[float] = Field(default=None, ge=0.0, le=1.0)
    top_k: Optional[int] = Field(default=None, ge=0)
    min_p: Optional[float] = Field(default=None, ge=0.0, le=1.0)
    stop: Optional[Union[str, list[str]]] = None
    seed: Optional[int] = None
    n: Optional[int] = Field(default=None, ge=1, le=1)
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    return_tokens: bool = False  # as llama.cpp's server: the answer's token ids with its text

    @field_validator("stop")
    @classmethod
    def _few_stops(cls, value):
        if isinstance(value, list) and len(value) > MAX_STOPS:
            raise ValueError(f"at most {MAX_STOPS} stop sequences")
        return value

    def stops(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


def _unsupported(value, info):
    """A feature this server does not implement, asked for: refused rather than ignored."""
    if value not in (None, False, [], ""):
        raise ValueError(f"{info.field_name} is not supported by this server")
    return value


class ChatRequest(Sampling):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: Optional[int] = Field(default=None, ge=1)
    logprobs: Optional[object] = None
    tools: Optional[object] = None

    _refuse = field_validator("logprobs", "tools")(_unsupported)

    def answer_limit(self) -> Optional[int]:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


class CompletionRequest(Sampling):
    prompt: Union[str, list[str]]
    echo: Optional[object] = None
    logprobs: Optional[object] = None
    suffix: Optional[object] = None

    _refuse = field_validator("echo", "logprobs", "suffix")(_unsupported)

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, value):
        if isinstance(value, list) and len(value) != 1:
            raise ValueError("exactly one prompt per request (n = 1)")
        return value

    def text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]

    def answer_limit(self) -> Optional[int]:
        return self.max_tokens


def error_body(message: str, kind: str, param: str | None = None, code: str | None = None) -> dict:
    """OpenAI's error envelope."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


def chat_response(rid: str, model: str, text: str, finish_reason: str, report: dict) -> dict:
    return {"id": rid, "object": "chat.completion", "created": now(), "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                         "finish_reason": finish_reason}], **report}


def chat_chunk(rid: str, model: str, delta: dict, finish_reason: str | None = None, report: dict | None = None) -> dict:
    return {"id": rid, "object": "chat.completion.chunk", "created": now(), "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}], **(report or {})}


def completion_response(rid: str, model: str, text: str, finish_reason: str | None, report: dict | None = None) -> dict:
    """A whole completion, or (chunk) one streamed piece of it: OpenAI uses the same object for both."""
    return {"id": rid, "object": "text_completion", "created": now(), "model": model,
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}], **(report or {})}
