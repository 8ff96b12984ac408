"""Model families beyond the byte-level ChatML default, on tiny generated GGUFs: a SentencePiece
vocabulary that adds BOS (Llama 2 style), a Llama 3 vocabulary with two end-of-generation tokens,
and vocabularies padded at the end (as converted Qwen models are).

The family fixtures make the end-of-turn token come where a known ordinary token would have been
generated, so greedy answers end with stop reason "eog" at a predictable place without
--ignore-eos; `greedy_tokens` (straight llama.cpp calls, no specrun code) says where.
"""

from __future__ import annotations

import json
import re
from contextlib import closing

import pytest
from cli_helpers import run_json, specrun
from conftest import FAMILY_MESSAGE, FAMILY_PROMPT
from tiny_models import family_vocabulary, greedy_tokens

from specrun.engine.sampling import SamplingParams
from specrun.engine.sequence import GenerationSettings
from specrun.runtime.pair import Pair, PairConfig

MAX_TOKENS = 32  # the fixtures' answers end sooner (within 20 tokens); a missed end-of-turn shows as max_tokens
FAMILIES = {  # fixture -> (vocabulary, BOS text, end-of-turn text)
    "spm_pair": ("spm", "<s>", "</s>"),
    "llama3_pair": ("llama3", "<|begin_of_text|>", "<|eot_id|>"),
    "llama3_end_of_text_pair": ("llama3", "<|begin_of_text|>", "<|end_of_text|>"),
}


def token_id(vocab: str, text: str) -> int:
    return family_vocabulary(vocab).tokens.index(text)


@pytest.fixture(params=list(FAMILIES), ids=lambda name: name.removesuffix("_pair"))
def family(request):
    """(FamilyPair, vocabulary, BOS id, end-of-turn id) for each family pair."""
    vocab, bos, eot = FAMILIES[request.param]
    return request.getfixturevalue(request.param), vocab, token_id(vocab, bos), token_id(vocab, eot)


def load(pair) -> closing[Pair]:
    """Target and draft loaded in-process (closed when the `with` block ends)."""
    return closing(Pair(PairConfig(pair.target, pair.draft, ctx_size=512, threads=1)))


def run_family(pair, *args: str) -> dict:
    common = ("--raw", "--temp", "0", "--target", pair.target, "--draft", pair.draft, "-t", "1", "-n", str(MAX_TOKENS))
    return run_json(FAMILY_PROMPT, *common, *args)


# -- compatibility --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fixture,vocab_type", [("spm_pair", "SPM (1)"), ("llama3_pair", "BPE (2)")], ids=["spm", "llama3"]
)
def test_check_accepts_a_family_pair(request, fixture, vocab_type):
    pair = request.getfixturevalue(fixture)
    vocab, bos, eos = FAMILIES[fixture][0], FAMILIES[fixture][1], "</s>" if fixture == "spm_pair" else "<|end_of_text|>"
    result = specrun("check", pair.target, pair.draft, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    rules = {r["rule"]: r for r in report["rules"]}
    assert report["compatible"] and report["first_failure"] is None
    assert rules["vocab type"]["target"] == vocab_type
    assert rules["add BOS"]["target"] is True and rules["add EOS"]["target"] is False
    assert (rules["BOS id"]["target"], rules["EOS id"]["target"]) == (token_id(vocab, bos), token_id(vocab, eos))


@pytest.mark.parametrize("order", ["large-target", "small-target"])
def test_check_accepts_padded_pairs_both_ways(padded_large, padded_small, order):
    target, draft = (padded_large, padded_small) if order == "large-target" else (padded_small, padded_large)
    result = specrun("check", target, draft, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    rules = {r["rule"]: r for r in report["rules"]}
    assert report["compatible"]
    assert {rules["vocab size"]["target"], rules["vocab size"]["draft"]} == {267, 367}
    assert rules["vocab size"]["detail"] == "difference 100, at most 128 allowed"
    assert rules["token text"]["detail"] == "ids 5..266 identical (262 tokens)"


def test_padding_tokens_get_generated(padded_large):
    """The point of the padded fixture: the larger model can produce ids the smaller one lacks."""
    generated = greedy_tokens(padded_large, [FAMILY_PROMPT], 24)[0]
    assert any(t >= 267 for t in generated), generated


# -- generation -----------------------------------------------------------------------------------


def test_llama3_has_both_end_of_generation_tokens(llama3_pair):
    with load(llama3_pair) as loaded:
        eog = [t for t in range(loaded.target_model.n_vocab) if loaded.target_model.is_eog(t)]
    assert eog == sorted([token_id("llama3", "<|end_of_text|>"), token_id("llama3", "<|eot_id|>")])


@pytest.mark.slow
def test_raw_greedy_answer_ends_at_the_end_of_turn_token_with_or_without_drafts(family):
    pair, _, _, _ = family
    expected = greedy_tokens(pair.target, [FAMILY_PROMPT], MAX_TOKENS)[0]
    assert len(expected) < MAX_TOKENS  # the fixture does end its answer
    spec, plain = run_family(pair, "--spec", "draft"), run_family(pair, "--spec", "off")
    assert spec["text"] == plain["text"]
    assert spec["stats"]["stop_reason"] == plain["stats"]["stop_reason"] == "eog"
    assert spec["stats"]["generated_tokens"] == plain["stats"]["generated_tokens"] == len(expected)
    assert spec["stats"]["drafted"] > 0


def test_the_end_of_turn_token_itself_ends_the_answer(family):
    pair, _, _, eot = family
    with load(pair) as loaded:
        settings = GenerationSettings(
            max_tokens=MAX_TOKENS, sampling=SamplingParams(temperature=0.0), seed=1, draft_max=4
        )
        generation = loaded.generation(loaded.prompt_tokens(FAMILY_PROMPT, chat=False), settings, mode="draft")
        steps = list(generation.run())
    tokens = [t for s in steps for t in s.tokens]
    assert tokens[-1] == eot and eot not in tokens[:-1]
    assert generation.stats.stop_reason == "eog"


def test_bos_comes_once_first_for_target_and_draft(family):
    pair, vocab, bos, _ = family
    with load(pair) as loaded:
        raw = loaded.target_model.tokenize(FAMILY_PROMPT, add_special=True, parse_special=False)
        bare = loaded.target_model.tokenize(FAMILY_PROMPT, add_special=False, parse_special=False)
        assert raw == [bos] + bare and bos not in bare
        for chat in (False, True):
            prompt = loaded.prompt_tokens(FAMILY_MESSAGE if chat else FAMILY_PROMPT, chat=chat)
            assert prompt[0] == bos and prompt.count(bos) == 1, (chat, prompt)
            settings = GenerationSettings(
                max_tokens=MAX_TOKENS, sampling=SamplingParams(temperature=0.0), seed=1, draft_max=4
            )
            generation = loaded.generation(prompt, settings, mode="draft")
            list(generation.run())
            assert generation.stats.drafted > 0
            for ctx in (loaded.session.target_ctx, loaded.session.draft_ctx):
                assert ctx.tokens[0][: len(prompt)] == prompt, (chat, ctx.tokens[0][:8])
    if vocab == "spm":
        assert bos == 1


def test_chat_answer_ends_with_the_end_of_turn_token(family):
    pair, _, _, _ = family
    expected = greedy_tokens(pair.target, (), MAX_TOKENS, chat_prompts=[FAMILY_MESSAGE])[0]
    assert len(expected) < MAX_TOKENS
    result = specrun(
        "chat",
        "--target",
        pair.target,
        "--draft",
        pair.draft,
        "--temp",
        "0",
        "--spec",
        "draft",
        "-t",
        "1",
        "-n",
        str(MAX_TOKENS),
        stdin=FAMILY_MESSAGE + "\n",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()
    summaries = [line for line in result.stderr.splitlines() if re.match(r"\d+ tok · ", line)]
    assert len(summaries) == 1, result.stderr  # one answer, one summary line
    assert "max tokens reached" not in summaries[0] and "context full" not in summaries[0]
    assert summaries[0].startswith(f"{len(expected)} tok · "), summaries[0]
