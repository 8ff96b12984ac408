"""The reasoning splitter: tags read from templates, whole answers, and streams cut anywhere."""

from __future__ import annotations

import random

import pytest
from paths import DATA

from specrun.models.reasoning import (
    CONTENT,
    MARKUP,
    REASONING,
    ReasoningSplitter,
    ReasoningTags,
    join,
    reasoning_tags,
    split_reasoning,
)

THINK = ReasoningTags("<think>", "</think>")
TEMPLATES = DATA / "chat_templates" / "templates"


def template(name: str) -> str:
    return (TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "name,tags",
    [
        ("Qwen-Qwen3-0.6B", ("<think>", "</think>")),
        ("Qwen-QwQ-32B", ("<think>", "</think>")),
        ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", ("<think>", "</think>")),
        ("HuggingFaceTB-SmolLM3-3B", ("<think>", "</think>")),
        ("ByteDance-Seed-OSS", ("<seed:think>", "</seed:think>")),
        ("CohereForAI-c4ai-command-r7b-12-2024-tool_use", ("<|START_THINKING|>", "<|END_THINKING|>")),
        ("mistralai-Ministral-3-14B-Reasoning-2512", ("[THINK]", "[/THINK]")),
        ("Qwen-Qwen2.5-7B-Instruct", None),
        ("Qwen-Qwen2.5-Coder-1.5B-Instruct-GGUF", None),
        ("meta-llama-Llama-3.1-8B-Instruct", None),
    ],
)
def test_tags_are_read_from_the_template(name, tags):
    found = reasoning_tags(template(name))
    assert (found and (found.start, found.end)) == tags or (found is None and tags is None)


def test_a_prompt_ending_with_the_opening_tag_starts_inside():
    assert THINK.opens("<|im_start|>assistant\n<think>\n")
    assert not THINK.opens("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert not THINK.opens("<|im_start|>assistant\n")


@pytest.mark.parametrize(
    "answer,inside,reasoning,content",
    [
        ("<think>\nLet me see.\n</think>\n\nThe answer is 4.", False, "Let me see.", "The answer is 4."),
        ("  <think>a b</think>c", False, "a b", "c"),
        ("<think>\n\n</think>\n\nHello", False, None, "Hello"),
        ("No thinking here.", False, None, "No thinking here."),
        ("  leading space kept\n", False, None, "  leading space kept\n"),
        ("Text then <think>x</think>", False, None, "Text then <think>x</think>"),
        ("<think>cut off mid-thought  ", False, "cut off mid-thought", ""),
        ("<think>cut at a partial tag </thi", False, "cut at a partial tag </thi", ""),
        ("Okay, so 2+2.\n</think>\n\n4", True, "Okay, so 2+2.", "4"),
        ("<think>repeated tag</think>4", True, "repeated tag", "4"),
        ("thinking that never ends", True, "thinking that never ends", ""),
        ("<thin", False, None, "<thin"),
        ("", False, None, ""),
        ("<think>a</think>b</think>c", False, "a", "b</think>c"),
        ("<think>x < y and </t> is not a tag</think> ok", False, "x < y and </t> is not a tag", "ok"),
    ],
)
def test_whole_answers(answer, inside, reasoning, content):
    split = split_reasoning(answer, THINK, inside=inside)
    assert (split.reasoning, split.content) == (reasoning, content)


def test_no_tags_means_all_content():
    assert (
        split_reasoning("<think>x</think>y", None).reasoning,
        split_reasoning("<think>x</think>y", None).content,
    ) == (None, "<think>x</think>y")


ANSWERS = [
    "<think>\nStep one.\n\nStep two: 3 < 4.\n</think>\n\nThe result is </think-ish> fine.\n",
    "\n<think> </think>  Hello",
    "plain answer with <think> inside",
    "<think>never closed </th",
    "reasoning first\n</think>\ncontent",
]


@pytest.mark.parametrize("answer", ANSWERS)
@pytest.mark.parametrize("inside", [False, True])
def test_any_cut_of_the_stream_gives_the_whole_split(answer, inside):
    """Pieces as tokens would come, cut at every place and at random: the labelled segments always
    add up to the text fed, and joined by kind to what the whole answer splits into."""
    whole = split_reasoning(answer, THINK, inside=inside)
    rng = random.Random(0)
    cuts = [[answer[:i], answer[i:]] for i in range(len(answer) + 1)] + [list(answer)]
    for _ in range(50):
        points = sorted(rng.sample(range(len(answer) + 1), k=min(len(answer), rng.randint(1, 8))))
        cuts.append([answer[a:b] for a, b in zip([0, *points], [*points, len(answer)])])
    for pieces in cuts:
        splitter = ReasoningSplitter(THINK, inside=inside)
        segments = [s for piece in pieces for s in splitter.feed(piece)] + splitter.finish()
        assert "".join(text for _, text in segments) == answer
        assert {kind for kind, _ in segments} <= {REASONING, CONTENT, MARKUP}
        got = join(segments)
        assert (got.reasoning, got.content) == (whole.reasoning, whole.content), pieces


def test_reasoning_streams_before_the_answer_ends():
    splitter = ReasoningSplitter(THINK)
    assert splitter.feed("<thi") == []
    assert splitter.feed("nk>\nFirst") == [(MARKUP, "<think>\n"), (REASONING, "First")]
    assert splitter.feed(" thought\n") == [(REASONING, " thought")]  # the newline could be the last before the tag
    assert splitter.feed("more</th") == [(REASONING, "\nmore")]
    assert splitter.feed("ink>\n\nDone") == [(MARKUP, "</think>\n\n"), (CONTENT, "Done")]
    assert splitter.feed(" now") == [(CONTENT, " now")]
    assert splitter.finish() == []
