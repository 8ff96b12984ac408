"""Drafting through text with a model of another vocabulary (engine.drafting.text), on tiny models:
the boundary between committed text and a draft, drafts cut mid-character, and output exactly the
target's at temperature 0 and in distribution at 0.8."""

from __future__ import annotations

import time

import numpy as np
import pytest
from test_engine import CHI2_999, sampled_fit, settings
from tiny_models import write_tiny_gguf

from specrun.engine.drafting.protocol import DraftRequest
from specrun.engine.drafting.text import GREEDY, TextDrafter, complete_utf8
from specrun.engine.llama import Context
from specrun.engine.model import LoadOptions, Model
from specrun.engine.sampling import SamplingParams
from specrun.models.compat import check_pair
from specrun.runtime.pair import Pair, PairConfig


@pytest.fixture(scope="module")
def text_pair(tiny_dir):
    """A byte-level BPE target and a SentencePiece draft (BOS added, byte fallback): no token
    means the same in both."""
    target = write_tiny_gguf(tiny_dir / "text-target.gguf", vocab="gpt2", seed=0, name="tiny-bpe")
    draft = write_tiny_gguf(tiny_dir / "text-draft.gguf", vocab="spm", seed=3, name="tiny-spm")
    return target, draft


@pytest.fixture(scope="module")
def drafter(text_pair):
    target_path, draft_path = text_pair
    target, draft = (
        Model(target_path, LoadOptions(use_extra_bufts=False)),
        Model(draft_path, LoadOptions(use_extra_bufts=False)),
    )
    ctx = Context(draft, n_ctx=256, n_threads=1)
    yield TextDrafter(ctx, target)
    ctx.close()


def text_of(model: Model, tokens) -> bytes:
    return b"".join(model.piece(t, special=True) for t in tokens)


def test_a_utf8_sequence_cut_short_is_held_back():
    assert complete_utf8("café".encode()) == "café".encode()
    assert complete_utf8("café".encode()[:-1]) == b"caf"  # the first byte of é alone
    assert complete_utf8("a🙂".encode()[:-2]) == b"a"
    assert complete_utf8(b"") == b""


def test_the_pair_cannot_share_tokens_but_can_share_text(text_pair):
    report = check_pair(*text_pair)
    assert not report.compatible and report.text_drafting and report.drafting == "text"
    assert report.to_dict()["drafting"] == "text"


def test_a_draft_becomes_the_targets_tokens_for_exactly_its_text(drafter):
    target, draft = drafter.target, drafter.draft
    history = target.tokenize("the quick brown", add_special=True, parse_special=True)
    for text in (" fox jumps", "ox", "s over the lazy dog.", "\n\n  indented"):
        draft_tokens = draft.tokenize(text, add_special=False, parse_special=False)
        proposal = drafter.to_target(draft_tokens, history)
        assert text_of(target, proposal) == text_of(draft, draft_tokens).lstrip(b" ") or text_of(
            target, proposal
        ) == text_of(draft, draft_tokens), text


def test_a_draft_that_merges_with_the_committed_text_is_still_its_text(drafter):
    """The target committed "hel" as it chose to; a draft "lo" would merge into "hello" if
    tokenized with it, so it is tokenized on its own: the proposal is the draft's text."""
    target, draft = drafter.target, drafter.draft
    history = target.tokenize("say hel", add_special=False, parse_special=False)
    draft_tokens = draft.tokenize("lo there", add_special=False, parse_special=False)
    proposal = drafter.to_target(draft_tokens, history)
    assert proposal and text_of(target, proposal).strip() == b"lo there"


def test_a_draft_that_ends_inside_a_character_proposes_only_whole_ones(drafter):
    target, draft = drafter.target, drafter.draft
    byte = [3 + 0xC3]  # the byte-fallback token <0xC3>: é's first byte (tiny_models' SentencePiece layout)
    assert draft.piece(byte[0]) == b"\xc3"
    head = draft.tokenize(" caf", add_special=False, parse_special=False)
    history = target.tokenize("a", add_special=False, parse_special=False)
    proposal = drafter.to_target(head + byte, history)
    assert text_of(target, proposal) == text_of(draft, head)
    assert complete_utf8(text_of(target, proposal)) == text_of(target, proposal)


def test_the_history_is_read_incrementally_as_the_same_text(drafter):
    target, draft = drafter.target, drafter.draft
    history = target.tokenize("one two three four", add_special=True, parse_special=True)
    whole = drafter.draft_ids(0, history)
    drafter.forget(0)
    for end in range(1, len(history) + 1):
        grown = drafter.draft_ids(0, history[:end])
    assert (
        grown
        == whole
        == draft.tokenize(
            text_of(target, history[1:] if history[0] == target.bos else history), add_special=True, parse_special=True
        )
    )
    drafter.forget(0)


@pytest.fixture(scope="module")
def text_loaded(text_pair):
    pair = Pair(PairConfig(*text_pair, ctx_size=512, threads=1))
    yield pair
    pair.close()


def test_greedy_text_drafting_is_plain_decoding(text_loaded):
    prompt = text_loaded.prompt_tokens("one two three one two three", chat=False)
    assert text_loaded.drafting == "text" and text_loaded.bridge is None
    plain = [t for s in text_loaded.generation(prompt, settings(max_tokens=60), mode="off").run() for t in s.tokens]
    generation = text_loaded.generation(prompt, settings(max_tokens=60, draft_max=6), mode="text")
    spec = [t for s in generation.run() for t in s.tokens]
    assert spec == plain
    assert generation.stats.drafted > 0 and set(generation.stats.by_drafter) <= {"text", "plain"}


def test_sampled_text_drafting_follows_the_target_distribution(text_loaded):
    chi2, drafted, detail = sampled_fit(text_loaded, text_loaded.prompt_tokens("sampling", chat=False), "text")
    assert drafted > 0
    assert chi2 < CHI2_999, detail


def test_the_draft_mode_of_a_text_pair_drafts_through_text(text_loaded):
    prompt = text_loaded.prompt_tokens("abc abc abc", chat=False)
    generation = text_loaded.generation(prompt, settings(max_tokens=20), mode="draft")
    list(generation.run())
    assert generation.stats.drafted > 0 and "text" in generation.stats.by_drafter


def test_the_draft_reads_the_targets_chat_text_after_its_own_bos(text_loaded, drafter):
    """The target's chat-formatted prompt (ChatML control tokens) reaches the draft as that text,
    tokenized the draft's way with its BOS once in front; the target's own BOS, if any, is not text."""
    target, draft = drafter.target, drafter.draft
    prompt = text_loaded.prompt_tokens("say hello", chat=True)
    assert any(target.piece(t, special=True) == b"<|im_start|>" for t in prompt)
    ids = drafter.draft_ids(0, prompt)
    assert ids[0] == draft.bos and draft.bos not in ids[1:]
    rendered = b"".join(target.piece(t, special=True) for t in prompt if t != target.bos)
    assert rendered.startswith(b"<|im_start|>user\nsay hello")
    assert ids == draft.tokenize(rendered, add_special=True, parse_special=True)
    assert text_of(draft, ids[1:]).lstrip(b" ") == rendered  # SentencePiece may add a leading space
    drafter.forget(0)


# -- a target whose vocabulary merges further: words are single tokens the draft spells out ---------

EXTRA_MERGES = [
    "he l",
    "l o",
    "hel lo",
    "Ġ hello",
    "o r",
    "Ġ w",
    "Ġw or",
    "l d",
    "Ġwor ld",
]  # in BPE rank order after "h e"


@pytest.fixture(scope="module")
def merged_pair(tiny_dir):
    target = write_tiny_gguf(
        tiny_dir / "merged-target.gguf", vocab="gpt2", seed=5, name="tiny-merged", extra_merges=EXTRA_MERGES
    )
    draft = write_tiny_gguf(tiny_dir / "merged-draft.gguf", vocab="spm", seed=3, name="tiny-spm")
    return target, draft


@pytest.fixture(scope="module")
def merged_drafter(merged_pair):
    target, draft = (Model(p, LoadOptions(use_extra_bufts=False)) for p in merged_pair)
    ctx = Context(draft, n_ctx=256, n_threads=1)
    yield TextDrafter(ctx, target)
    ctx.close()


def ids_of(model: Model, *texts: str) -> list[int]:
    """The token of each text (each must be one token of `model`)."""
    out = []
    for text in texts:
        ids = model.tokenize(text.encode(), add_special=False, parse_special=False)
        assert len(ids) == 1, (text, ids)
        out += ids
    return out


def spelled(draft: Model, text: bytes) -> list[int]:
    """The draft's tokens for exactly `text` as it would generate them mid-text: its tokenizer puts
    a space in front of what it tokenizes, so a leading space is that one, and a text starting with
    a letter starts with that letter's piece."""
    if text.startswith(b" "):
        ids = draft.tokenize(text[1:], add_special=False, parse_special=False)
    else:
        first = next(t for t in range(draft.n_vocab) if draft.piece(t) == text[:1])
        rest = text[1:]
        assert rest.startswith(b" ")
        ids = [first] + draft.tokenize(rest[1:], add_special=False, parse_special=False)
    assert text_of(draft, ids) == text
    return ids


def test_the_extra_merges_make_words_single_tokens(merged_drafter):
    target = merged_drafter.target
    assert check_pair(*[target.path, merged_drafter.draft.path]).drafting == "text"
    assert len(ids_of(target, " hello", " world", "hello")) == 3


def test_a_draft_is_proposed_in_the_targets_own_merges(merged_drafter):
    """The draft writes " hello world" in its pieces; the target gets its own two tokens for it."""
    target, draft = merged_drafter.target, merged_drafter.draft
    history = target.tokenize(b"say", add_special=False, parse_special=False)
    draft_tokens = spelled(draft, b" hello world")
    assert merged_drafter.to_target(draft_tokens, history) == ids_of(target, " hello", " world")


def test_a_draft_that_stops_inside_a_target_token_proposes_its_text(merged_drafter):
    """The draft stopped at " hel" where the target has " hello": the proposal is " hel" in the
    target's tokens (verification decides whether the target wants more), never text beyond it."""
    target, draft = merged_drafter.target, merged_drafter.draft
    history = target.tokenize(b"say", add_special=False, parse_special=False)
    draft_tokens = spelled(draft, b" hel")
    proposal = merged_drafter.to_target(draft_tokens, history)
    assert text_of(target, proposal) == b" hel"
    assert proposal == target.tokenize(b" hel", add_special=False, parse_special=False)


def test_a_correction_that_would_merge_with_the_next_draft_keeps_the_committed_tokens(merged_drafter):
    """Accepted draft tokens " he" "l" then the target's correction "l": the committed tokens are no
    tokenization the target would choose for " hell", and the next draft "o world" would merge
    with them into " hello". The proposal continues the committed text exactly, as new tokens."""
    target, draft = merged_drafter.target, merged_drafter.draft
    committed = target.tokenize(b"say", add_special=False, parse_special=False) + ids_of(target, " ", "he", "l", "l")
    assert target.tokenize(text_of(target, committed), add_special=False, parse_special=False) != committed
    draft_tokens = spelled(draft, b"o world")
    proposal = merged_drafter.to_target(draft_tokens, committed)
    assert text_of(target, committed + proposal) == b"say hello world"
    assert proposal[-1:] == ids_of(target, " world")


@pytest.fixture(scope="module")
def merged_loaded(merged_pair):
    pair = Pair(PairConfig(*merged_pair, ctx_size=512, threads=1))
    yield pair
    pair.close()


@pytest.mark.parametrize("prompt", ["hello world hello", "say hel", "the quick brown fox"])
def test_greedy_text_drafting_on_the_merged_target_is_plain_decoding(merged_loaded, prompt):
    tokens = merged_loaded.prompt_tokens(prompt, chat=False)
    plain = [t for s in merged_loaded.generation(tokens, settings(max_tokens=48), mode="off").run() for t in s.tokens]
    generation = merged_loaded.generation(tokens, settings(max_tokens=48, draft_max=5), mode="text")
    assert [t for s in generation.run() for t in s.tokens] == plain
    assert generation.stats.drafted > 0


def test_sampled_text_drafting_at_0_8_follows_the_target_distribution(merged_loaded):
    chi2, drafted, detail = sampled_fit(
        merged_loaded,
        merged_loaded.prompt_tokens("one two", chat=False),
        "text",
        sampling=SamplingParams(temperature=0.8, top_k=3, top_p=1.0, min_p=0.0),
    )
    assert drafted > 0
    assert chi2 < CHI2_999, detail


def test_a_text_drafts_passes_cost_its_host_work_too(text_loaded, monkeypatch):
    """Rendering the history and re-tokenizing the draft happen on the host, outside the draft
    model's passes; the passes a text drafter reports include that time, so auto, the statistics
    and the bench weigh it at its real cost."""
    drafter = text_loaded.session.model_drafter
    assert isinstance(drafter, TextDrafter)
    slow = 0.05
    tokenize = drafter.target.tokenize

    def slow_tokenize(*args, **kw):
        time.sleep(slow)
        return tokenize(*args, **kw)

    monkeypatch.setattr(drafter.target, "tokenize", slow_tokenize)
    history = text_loaded.prompt_tokens("one two three", chat=False)
    made = drafter.propose([DraftRequest(0, history, 3, GREEDY, np.random.default_rng(0))])
    drafter.forget(0)
    assert made.passes and made.drafts[0].tokens
    assert made.seconds >= slow  # the re-tokenization's sleep is in the passes' seconds


def test_auto_weighs_the_text_drafter_by_its_measured_costs(text_loaded):
    """Under auto the text drafter is one of the controller's drafters, seeded with the measured
    cost of a draft pass, and it learns from its steps like any other."""
    session = text_loaded.session
    controller = session.controller(8)
    assert "text" in controller.tracks and controller.passes.get("text")
    assert controller.draft_seconds("text", 2) > 0
