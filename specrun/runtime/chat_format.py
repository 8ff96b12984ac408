"""How a pair turns a conversation into prompt tokens: the target's own chat template, rendered as
transformers renders it, tokenized with BOS once; and how its answer splits into reasoning and
content.

One object per loaded pair, so run, chat, bench, the library and the server all send the model
the same prompt for the same conversation. A GGUF without a template falls back to llama.cpp's
built-in ChatML (llama-server does the same), said once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..engine.model import Model
from ..models.chat_template import ChatTemplate
from ..models.reasoning import ReasoningSplitter, ReasoningTags, reasoning_tags


@dataclass(frozen=True)
class ChatPrompt:
    """A rendered conversation: its text, its tokens, and whether it leaves the model thinking."""

    text: str
    tokens: list[int]
    tags: ReasoningTags | None  # the template's think tags (None: the answer is all content)
    inside_reasoning: bool  # the prompt ends with the opening tag

    def splitter(self) -> ReasoningSplitter | None:
        """A fresh splitter for the answer to this prompt (None when the template has no think tags)."""
        return ReasoningSplitter(self.tags, inside=self.inside_reasoning) if self.tags else None


def thinking_variables(think: bool | None) -> dict:
    """--think / --no-think as the template variable reasoning templates read (none: their default)."""
    return {} if think is None else {"enable_thinking": think}


class ChatFormat:
    """The target model's chat template, as the pair uses it."""

    def __init__(self, model: Model, warn: Callable[[str], None]):
        self.model = model
        self.warn = warn
        source = model.chat_template()
        self.template = (
            ChatTemplate(
                source,
                bos_token=model.token_text(model.bos),
                eos_token=model.token_text(model.eos),
                name=model.path.name,
            )
            if source
            else None
        )
        self.tags = reasoning_tags(source)
        self._fallback_said = False

    def render(
        self,
        messages: Sequence[Mapping],
        *,
        add_generation_prompt: bool = True,
        variables: Mapping | None = None,
        tools: Sequence[Mapping] | None = None,
    ) -> str:
        """The conversation as prompt text (ChatTemplateError when the template refuses it)."""
        if self.template is not None:
            return self.template.render(
                messages, add_generation_prompt=add_generation_prompt, tools=tools, variables=variables
            )
        if not self._fallback_said:
            self.warn(
                f"specrun: note: {self.model.path.name} has no chat template in its metadata; "
                "formatting the conversation as ChatML, llama.cpp's default"
            )
            self._fallback_said = True
        return self.model.builtin_chat_format([dict(m) for m in messages], add_generation_prompt)

    def tokenize(self, text: str) -> list[int]:
        """Prompt text → tokens with one BOS: the vocabulary's is added unless the text already begins
        with it (templates that write `bos_token` would otherwise get two, as llama.cpp warns)."""
        model = self.model
        bos = model.token_text(model.bos) if model.add_bos else ""
        if bos and text.startswith(bos):
            text = text[len(bos) :]
        return model.tokenize(text, add_special=True, parse_special=True)

    def prompt_splitter(self, text: str) -> ReasoningSplitter | None:
        """A splitter for the answer to prompt `text` (None when the template has no think tags)."""
        return ReasoningSplitter(self.tags, inside=self.tags.opens(text)) if self.tags else None

    def prompt(
        self,
        messages: Sequence[Mapping],
        *,
        variables: Mapping | None = None,
        tools: Sequence[Mapping] | None = None,
        add_generation_prompt: bool = True,
    ) -> ChatPrompt:
        """The conversation rendered with the assistant's turn opened (unless told not to), and tokenized."""
        text = self.render(messages, add_generation_prompt=add_generation_prompt, variables=variables, tools=tools)
        return ChatPrompt(text, self.tokenize(text), self.tags, bool(self.tags and self.tags.opens(text)))

    def boundaries(
        self, messages: Sequence[Mapping], tokens: Sequence[int], *, variables: Mapping | None = None
    ) -> list[int]:
        """Where in `tokens` (the conversation's prompt) a later prompt is likely to part from it:
        after the first message (a system prompt other conversations share) and before the last (a
        regenerated or edited last message). A boundary whose rendering does not tokenize to a
        prefix of `tokens`, or that the template will not render, is left out."""
        found = []
        for n in sorted({1, len(messages) - 1}):
            if not 0 < n < len(messages):
                continue
            try:
                head = self.tokenize(self.render(messages[:n], add_generation_prompt=False, variables=variables))
            except Exception:  # noqa: BLE001 - a template may refuse a partial conversation: no boundary there
                continue
            if 0 < len(head) < len(tokens) and list(tokens[: len(head)]) == head:
                found.append(len(head))
        return found
