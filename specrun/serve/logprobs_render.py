"""Log-probabilities in OpenAI's shapes: chat's `logprobs.content` (each token's text, bytes,
log-probability and `top_logprobs`) and completions' `tokens`, `token_logprobs`, `top_logprobs`
and `text_offset`. The numbers are the target's (engine/logprobs.py). A token that is part of a
character has, in chat, its text with U+FFFD and its exact `bytes`; in completions, its bytes
escaped after "bytes:" (OpenAI's spelling)."""

from __future__ import annotations

import codecs
from collections.abc import Sequence

from ..engine.logprobs import TokenLogprob
from ..engine.model import Model


def _token(model: Model, token: int) -> tuple[str, list[int]]:
    raw = model.piece(token, special=True)
    return raw.decode("utf-8", "replace"), list(raw)


def _completion_token(model: Model, token: int) -> str:
    """A token's text as completions list it: a token that is not whole UTF-8 (part of a
    character) as "bytes:" and its bytes escaped, as OpenAI writes it, so no two tokens share a key."""
    raw = model.piece(token, special=True)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + "".join(f"\\x{b:02x}" for b in raw)


def _chat_one(model: Model, token: int, logprob: float) -> dict:
    text, raw = _token(model, token)
    return {"token": text, "logprob": logprob, "bytes": raw}


def chat_logprobs(model: Model, entries: Sequence[TokenLogprob]) -> dict:
    """A chat choice's (or chunk's) `logprobs`: every answer token, reasoning and tool calls included."""
    content = [
        {**_chat_one(model, e.token, e.logprob), "top_logprobs": [_chat_one(model, t, lp) for t, lp in e.top]}
        for e in entries
    ]
    return {"content": content, "refusal": None}


class TextOffsets:
    """Where each token starts in the answer's text, in characters, as completions' `text_offset`
    counts them; kept across the chunks of a stream."""

    def __init__(self, start: int = 0):
        self.at = start
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def next(self, model: Model, token: int) -> int:
        start = self.at
        self.at += len(self._decoder.decode(model.piece(token)))  # as the text has it: control tokens write nothing
        return start


def prompt_logprobs(prompt: Sequence[int], scores: Sequence[TokenLogprob]) -> list[TokenLogprob | int]:
    """An echoed prompt's entries: its first token (an id: nothing predicts it, so its numbers are
    null), then the scored tokens after it."""
    return [prompt[0], *scores] if prompt else []


def completion_logprobs(model: Model, entries: Sequence[TokenLogprob | int], offsets: TextOffsets) -> dict:
    """A completion choice's (or chunk's) `logprobs`; an entry that is a bare id (an echoed
    prompt's first token) has null numbers."""
    scored = [e if isinstance(e, TokenLogprob) else None for e in entries]
    ids = [e.token if isinstance(e, TokenLogprob) else e for e in entries]
    tops = [{_completion_token(model, t): lp for t, lp in e.top} if e is not None else None for e in scored]
    return {
        "tokens": [_completion_token(model, t) for t in ids],
        "token_logprobs": [e.logprob if e is not None else None for e in scored],
        "top_logprobs": tops,
        "text_offset": [offsets.next(model, t) for t in ids],
    }


def _llama_one(model: Model, token: int, logprob: float) -> dict:
    raw = model.piece(token, special=True)
    return {"id": token, "token": raw.decode("utf-8", "ignore"), "bytes": list(raw), "logprob": logprob}


def llama_probabilities(model: Model, entries: Sequence[TokenLogprob]) -> list[dict]:
    """llama-server's `completion_probabilities` (its `n_probs`): each token's id, text (whole
    characters only), bytes and log-probability, and its `top_logprobs` alike."""
    return [
        {**_llama_one(model, e.token, e.logprob), "top_logprobs": [_llama_one(model, t, lp) for t, lp in e.top]}
        for e in entries
    ]
