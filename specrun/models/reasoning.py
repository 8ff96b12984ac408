"""A thinking model's answer, split into its reasoning and its content as the text streams.

Reasoning models (Qwen3, QwQ, DeepSeek-R1, ...) open their answer with their thinking between two
tags, `<think>…</think>`, then give the answer proper. llama-server (`--reasoning-format
deepseek`), vLLM and OpenAI-compatible clients keep the two apart: the thinking goes to
`reasoning_content`, the rest to `content`. The rules, the same streaming or not:

- the tags are the ones the model's chat template uses (defaults.REASONING_TAGS);
- reasoning is what stands between the opening tag (which may follow whitespace at the very start
  of the answer) and the closing tag, without the whitespace around it; an answer that never
  closes its reasoning (cut by max_tokens) is all reasoning;
- when the prompt itself ends with the opening tag (a template that starts the model thinking),
  the answer starts inside the reasoning;
- whitespace after the closing tag is dropped; an answer that does not start with the opening tag
  is all content, as it is.

The splitter labels every character it is fed (reasoning, content, or markup: the tags and the
dropped whitespace), holding back only what the next piece could still change (a partial tag,
trailing whitespace), so a display can follow it piece by piece and the pieces of one kind joined
are exactly what the whole answer splits into.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .. import defaults
from .held_text import partial_suffix

REASONING, CONTENT, MARKUP = "reasoning", "content", "markup"
_SPACE = " \t\n\r\f\v"  # ASCII whitespace, as llama.cpp trims it


@dataclass(frozen=True)
class ReasoningTags:
    """The texts that open and close a model's reasoning."""

    start: str
    end: str

    def opens(self, prompt: str) -> bool:
        """Whether a prompt leaves the model inside its reasoning (it ends with the opening tag)."""
        return prompt.rstrip(_SPACE).endswith(self.start)


def reasoning_tags(template: str | None) -> ReasoningTags | None:
    """The think tags a chat template uses: the first known pair whose two texts it contains."""
    if not template:
        return None
    for start, end in defaults.REASONING_TAGS:
        if start in template and end in template:
            return ReasoningTags(start, end)
    return None


class ReasoningSplitter:
    """Feeds an answer's text in, piece by piece; hands out labelled segments (kind, text)."""

    def __init__(self, tags: ReasoningTags, *, inside: bool = False):
        self.tags = tags
        self._inside = inside  # the prompt opened the reasoning
        self._state = "begin"  # begin → reasoning_lead → reasoning → content_lead → content
        self._held = ""

    def feed(self, text: str) -> list[tuple[str, str]]:
        """Add text; return the segments now final (possibly none)."""
        self._held += text
        out: list[tuple[str, str]] = []
        while self._step(out, final=False):
            pass
        return _merged(out)

    def finish(self) -> list[tuple[str, str]]:
        """The answer has ended: release what was held back."""
        out: list[tuple[str, str]] = []
        while self._step(out, final=True):
            pass
        held, self._held = self._held, ""
        if held:
            if self._state in ("reasoning_lead", "reasoning"):
                body = held.rstrip(_SPACE)
                out += [(REASONING, body), (MARKUP, held[len(body) :])]
            else:
                out.append((CONTENT if self._state != "content_lead" else MARKUP, held))
        return _merged(out)

    def _step(self, out: list, *, final: bool) -> bool:
        """Move on as far as the held text allows; True when the state changed (step again)."""
        held, start, end = self._held, self.tags.start, self.tags.end
        if self._state == "begin":
            lead = len(held) - len(held.lstrip(_SPACE))
            rest = held[lead:]
            if rest.startswith(start):
                out.append((MARKUP, held[: lead + len(start)]))
                self._held, self._state = held[lead + len(start) :], "reasoning_lead"
                return True
            if not final and start.startswith(rest):
                return False  # whitespace or a beginning of the tag so far: wait
            self._state = "reasoning_lead" if self._inside else "content"
            return True
        if self._state in ("reasoning_lead", "content_lead"):
            body = held.lstrip(_SPACE)
            out.append((MARKUP, held[: len(held) - len(body)]))
            self._held = body
            if body:
                self._state = "reasoning" if self._state == "reasoning_lead" else "content"
                return True
            return False
        if self._state == "reasoning":
            at = held.find(end)
            if at >= 0:
                body = held[:at].rstrip(_SPACE)
                out += [(REASONING, body), (MARKUP, held[len(body) : at + len(end)])]
                self._held, self._state = held[at + len(end) :], "content_lead"
                return True
            keep = partial_suffix(held, end)
            body = held[: len(held) - keep]
            ready = body.rstrip(_SPACE)
            out.append((REASONING, ready))
            self._held = held[len(ready) :]
            return False
        out.append((CONTENT, held))
        self._held = ""
        return False


def _merged(segments: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Empty segments dropped, neighbours of one kind joined."""
    out: list[tuple[str, str]] = []
    for kind, text in segments:
        if not text:
            continue
        if out and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1] + text)
        else:
            out.append((kind, text))
    return out


@dataclass
class Split:
    """An answer's reasoning (None when it had none) and its content."""

    reasoning: str | None
    content: str


def join(segments: Iterable[tuple[str, str]]) -> Split:
    """The reasoning and content that labelled segments add up to."""
    reasoning, content = [], []
    for kind, text in segments:
        (reasoning if kind == REASONING else content if kind == CONTENT else []).append(text)
    return Split("".join(reasoning) or None, "".join(content))


def split_reasoning(text: str, tags: ReasoningTags | None, *, inside: bool = False) -> Split:
    """A whole answer split (no tags: all content)."""
    if tags is None:
        return Split(None, text)
    splitter = ReasoningSplitter(tags, inside=inside)
    return join([*splitter.feed(text), *splitter.finish()])
