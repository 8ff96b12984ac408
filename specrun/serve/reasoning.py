"""A chat answer's text as OpenAI's chat API carries it: a thinking model's reasoning in
`reasoning_content`, apart from `content`, in whole answers and in streamed deltas (as llama-server
gives them with `--reasoning-format deepseek`). The split itself is models.reasoning's."""

from __future__ import annotations

from ..models.reasoning import CONTENT, REASONING, ReasoningSplitter, split_reasoning
from .requests import Job


class ChatText:
    """One request's answer, piece by piece or whole."""

    def __init__(self, job: Job):
        self.job = job
        self.splitter = ReasoningSplitter(job.reasoning, inside=job.inside_reasoning) if job.reasoning else None

    def delta(self, text: str, *, final: bool = False) -> dict:
        """The delta fields for the next piece of text (empty: nothing to send yet)."""
        if self.splitter is None:
            return {"content": text} if text else {}
        parts = self.splitter.feed(text) + (self.splitter.finish() if final else [])
        delta: dict[str, str] = {}
        for kind, piece in parts:
            key = "reasoning_content" if kind == REASONING else "content" if kind == CONTENT else None
            if key:
                delta[key] = delta.get(key, "") + piece
        return delta

    def whole(self, text: str) -> tuple[str, str | None]:
        """The whole answer's content and reasoning (None: it had none)."""
        split = split_reasoning(text, self.job.reasoning, inside=self.job.inside_reasoning)
        return split.content, split.reasoning
