"""The body of llama-server's `POST /infill` (infill.py answers it): llama-server's fields, strictly
typed, with the chunks of other files bounded in number (and, with every other part, in bytes by
service.py before they are tokenized)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from .. import defaults
from .schemas import MAX_INT32, MAX_TOP_LOGPROBS, NotTrue, Sampling, Strict, Text, integer

MAX_CHUNKS = 1024  # chunks of other files a request may send (llama.vim sends at most 64)


class ExtraChunk(Strict):
    """A chunk of another file: its text and name (`time`, when the editor read it, changes nothing)."""

    text: Text
    filename: Text = "tmp"
    time: Any = None


class InfillRequest(Sampling):
    input_prefix: Text
    input_suffix: Text
    prompt: Text = ""
    input_extra: Annotated[list[ExtraChunk], Field(max_length=MAX_CHUNKS)] = []
    n_predict: integer(ge=-1, le=MAX_INT32) | None = None  # -1: until the end; 0: only read the prompt
    n_indent: integer(ge=0, le=MAX_INT32) = 0
    t_max_predict_ms: integer(ge=0, le=MAX_INT32) = 0
    response_fields: Annotated[list[Text], Field(max_length=256)] | None = None
    n_probs: integer(ge=0, le=MAX_TOP_LOGPROBS) = 0  # each token's log-probability and this many alternatives'
    post_sampling_probs: NotTrue = None  # the numbers are the target's own, before sampling (engine/logprobs.py)

    # Accepted: llama-server's, and they change nothing here.
    t_max_prompt_ms: integer(ge=0, le=MAX_INT32) | None = None
    samplers: list[Text] | None = None
    id_slot: integer(ge=-1, le=MAX_INT32) | None = None

    def logprob_count(self) -> int | None:
        return self.n_probs or None

    def answer_limit(self) -> int | None:
        """The most tokens to write (None: until the end of the answer or of the context; neither
        `n_predict` nor `max_tokens`: INFILL_MAX_TOKENS)."""
        if self.n_predict is not None:
            return None if self.n_predict < 0 else self.n_predict
        return self.max_tokens if self.max_tokens is not None else defaults.INFILL_MAX_TOKENS


def end_line(suffix: str) -> str:
    """The first line after the cursor's that holds something: an answer that writes it again has
    reached the suffix."""
    for line in suffix.split("\n")[1:]:
        if line.strip():
            return line
    return ""
