"""The model's tokenizer over HTTP, as llama-server and vLLM serve it, so that clients which count,
score or build prompts by tokens work against this server: `POST /tokenize` and `POST /detokenize`
(both APIs' fields, answered with both APIs' fields), `GET /tokenizer_info` (vLLM's: the special
tokens and the chat template, what lm-evaluation-harness's remote tokenizer reads) and
`POST /apply-template` (llama-server's: a chat body rendered as the model reads it).

Token ids outside the vocabulary are a 400 naming the first one. The work runs off the event
loop: a long text takes milliseconds to tokenize.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

from ..engine.model import Model
from .answers import ApiError
from .schemas import ChatRequest, unknown_fields
from .service import RequestError, Service
from .tokenizer_request import DetokenizeRequest, TokenizeRequest


def check_ids(model: Model, ids: list[int], field: str) -> None:
    """A 400 naming the first id that is no token of `model`'s vocabulary."""
    for i, token in enumerate(ids):
        if not 0 <= token < model.n_vocab:
            raise ApiError(
                400,
                f"{field}[{i}]: {token} is no token id of this model (0 to {model.n_vocab - 1})",
                "invalid_request_error",
                field,
            )


def piece(model: Model, token: int) -> str | list[int]:
    """A token's text, control tokens spelled out; its bytes as numbers where they are not whole
    UTF-8 (part of a character), as llama-server gives them."""
    raw = model.piece(token, special=True)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return list(raw)


def mixed_tokens(model: Model, content: str | list, add_special: bool, parse_special: bool) -> list[int]:
    """llama-server's `content`: a string, or strings and token ids in order (only the first item
    gets the vocabulary's BOS, and only when it is a string)."""
    if isinstance(content, str):
        return model.tokenize(content, add_special=add_special, parse_special=parse_special)
    check_ids(model, [item for item in content if isinstance(item, int)], "content")
    tokens: list[int] = []
    for i, item in enumerate(content):
        if isinstance(item, int):
            tokens.append(item)
        else:
            tokens += model.tokenize(item, add_special=add_special and i == 0, parse_special=parse_special)
    return tokens


def tokenize(service: Service, body: TokenizeRequest) -> list[int]:
    """The tokens a tokenize request asks for."""
    model = service.pair.target_model
    if body.messages is not None:
        chat = ChatRequest.model_validate(
            {"messages": body.messages, "chat_template_kwargs": body.chat_template_kwargs}, strict=False
        )
        try:
            return service.chat_prompt(chat, add_generation_prompt=body.add_generation_prompt).tokens
        except RequestError as error:
            raise ApiError(400, error.message, "invalid_request_error", "messages", error.code) from None
    if body.prompt is not None:
        return model.tokenize(body.prompt, add_special=body.special(), parse_special=body.parse_special)
    return mixed_tokens(model, body.content, body.special(), body.parse_special)


def detokenize(model: Model, ids: list[int]) -> str:
    """Token ids back to text, control tokens spelled out (both servers render them)."""
    check_ids(model, ids, "tokens")
    return b"".join(model.piece(token, special=True) for token in ids).decode("utf-8", "replace")


def tokenizer_info(service: Service) -> dict:
    """vLLM's GET /tokenizer_info: the special tokens by text and id (null where the vocabulary has
    none), the chat template, the context and vocabulary sizes."""
    model = service.pair.target_model

    def text(token: int) -> str | None:
        return model.token_text(token) if 0 <= token < model.n_vocab else None

    return {
        "tokenizer_class": "llama.cpp",
        "bos_token": text(model.bos),
        "bos_token_id": model.bos if model.bos >= 0 else None,
        "eos_token": text(model.eos),
        "eos_token_id": model.eos if model.eos >= 0 else None,
        "pad_token": text(model.pad),
        "pad_token_id": model.pad if model.pad >= 0 else None,
        "add_bos_token": model.add_bos,
        "chat_template": model.chat_template(),
        "model_max_length": service.pair.n_ctx,
        "vocab_size": model.n_vocab,
    }


def install(app: FastAPI, service: Service) -> None:
    """Add the tokenizer's routes to `app`."""

    @app.post("/tokenize")
    async def tokenize_route(body: TokenizeRequest):
        service.note_unknown(unknown_fields(body), "/tokenize")
        tokens = await run_in_threadpool(tokenize, service, body)
        model = service.pair.target_model
        listed = [{"id": t, "piece": piece(model, t)} for t in tokens] if body.with_pieces else tokens
        return {"tokens": listed, "count": len(tokens), "max_model_len": service.pair.n_ctx}

    @app.post("/detokenize")
    async def detokenize_route(body: DetokenizeRequest):
        service.note_unknown(unknown_fields(body), "/detokenize")
        text = await run_in_threadpool(detokenize, service.pair.target_model, body.tokens)
        return {"content": text, "prompt": text}

    @app.get("/tokenizer_info")
    async def tokenizer_info_route():
        return tokenizer_info(service)

    @app.post("/apply-template")
    async def apply_template(body: ChatRequest):
        service.note_unknown(unknown_fields(body), "/apply-template")
        try:
            prompt = await run_in_threadpool(service.chat_prompt, body)
        except RequestError as error:
            raise ApiError(400, error.message, "invalid_request_error", error.param, error.code) from None
        return {"prompt": prompt.text}
