"""OpenAI's server-sent events: each chunk as a `data:` line, then `[DONE]`; an error met on the
way is sent in OpenAI's envelope and ends the stream; a closed connection cancels the request."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable

from fastapi.responses import StreamingResponse

from .answers import ApiError


def sse(payload) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


def openai_stream(chunks: AsyncIterator[dict], cancel: Callable[[], None]) -> StreamingResponse:
    """Server-sent events as OpenAI streams them: the chunks, then [DONE]; an error met on the way
    is sent in OpenAI's envelope and ends the stream. A closed connection cancels the request."""

    async def body() -> AsyncIterator[str]:
        try:
            async for chunk in chunks:
                yield sse(chunk)
            yield "data: [DONE]\n\n"
        except ApiError as error:
            yield sse(error.body)
            yield "data: [DONE]\n\n"
        finally:
            cancel()

    return StreamingResponse(body(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
