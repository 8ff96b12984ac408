"""Bodies of the tokenizer endpoints (tokenizer_routes.py), as llama-server and vLLM clients send
them: `content` (a string, or strings and token ids mixed) or `prompt` or `messages` to tokenize,
token ids to turn back into text. Token ids are checked against the vocabulary when the request is
answered (the model is not known here)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from .schemas import Int, JsonObject, Message, Strict, Text

MAX_TOKEN_IDS = 262_144  # ids a request may carry: more than any context read at once


class TokenizeRequest(Strict):
    """POST /tokenize: llama-server's `content` (with `add_special`, default false; `parse_special`,
    default true; `with_pieces`), or vLLM's `prompt` (with `add_special_tokens`, default true) or
    `messages` (rendered by the chat template as the engine reads them)."""

    content: Text | Annotated[list[Text | Int], Field(max_length=MAX_TOKEN_IDS)] | None = None
    prompt: Text | None = None
    messages: Annotated[list[Message], Field(min_length=1)] | None = None
    add_special: bool | None = None
    add_special_tokens: bool | None = None
    parse_special: bool = True
    with_pieces: bool = False
    add_generation_prompt: bool = True
    chat_template_kwargs: JsonObject | None = None
    model: Text | None = None

    @model_validator(mode="after")
    def _one_input(self) -> TokenizeRequest:
        given = [name for name in ("content", "prompt", "messages") if getattr(self, name) is not None]
        if len(given) != 1:
            said = {"said": ", ".join(given) or "none"}
            raise PydanticCustomError("one_input", "send one of content, prompt and messages (got {said})", said)
        return self

    def special(self) -> bool:
        """Whether the vocabulary's BOS (and EOS, where it adds one) is added: as asked, else as
        the API the request speaks adds it (llama-server: no; vLLM: yes for a prompt)."""
        if self.add_special is not None:
            return self.add_special
        if self.add_special_tokens is not None:
            return self.add_special_tokens
        return self.prompt is not None


class DetokenizeRequest(Strict):
    """POST /detokenize: token ids, as both llama-server and vLLM send them."""

    tokens: Annotated[list[Int], Field(max_length=MAX_TOKEN_IDS)]
    model: Text | None = None
