"""The library API as docs/library.md shows it: load_pair, generate, stream; bad input refused without
touching the pair's state."""

from __future__ import annotations

import pytest

import specrun
from specrun.errors import InputError


@pytest.fixture(scope="module")
def pair(tiny_target, tiny_draft):
    loaded = specrun.load_pair(tiny_target, tiny_draft, ctx_size=512, threads=1)
    yield loaded
    loaded.close()


def test_generate_returns_text_tokens_and_statistics(pair):
    result = specrun.generate(pair, "Write a haiku", max_tokens=16, temperature=0, ignore_eos=True, mode="draft")
    assert len(result.tokens) == 16 and result.text
    assert result.stats.generated_tokens == 16 and result.stats.drafted > 0
    assert 0 <= result.stats.acceptance_rate <= 1
    assert result.text == "".join(pair.target_model.piece(t).decode("utf-8", "replace") for t in result.tokens)


def test_stream_yields_the_same_text_step_by_step(pair):
    options = dict(max_tokens=24, temperature=0, ignore_eos=True, chat=False)
    steps = list(specrun.stream(pair, "Count to ten", mode="draft", **options))
    assert steps[-1].finished == "max_tokens" and all(s.tokens for s in steps)
    plain = specrun.generate(pair, "Count to ten", mode="off", **options)
    assert "".join(s.text for s in steps) == plain.text
    assert [t for s in steps for t in s.tokens] == plain.tokens


def test_every_mode_and_the_default_agree_at_temperature_zero(pair):
    texts = {
        mode: specrun.generate(pair, "abc abc abc", mode=mode, max_tokens=20, temperature=0, ignore_eos=True).text
        for mode in ("off", "draft", "ngram", "hybrid", "auto", None)
    }
    assert len(set(texts.values())) == 1


def test_a_seed_reproduces_sampled_text_and_another_seed_changes_it(pair):
    def sample(seed: int) -> str:
        return specrun.generate(
            pair, "once upon", mode="draft", max_tokens=24, temperature=1.0, seed=seed, ignore_eos=True
        ).text

    assert sample(3) == sample(3)
    assert len({sample(s) for s in range(4)}) > 1


def test_an_empty_prompt_is_refused_and_the_next_generation_is_unchanged(pair):
    before = specrun.generate(pair, "steady", mode="draft", max_tokens=12, temperature=0, ignore_eos=True, chat=False)
    for bad in ("", None):
        with pytest.raises(InputError, match="empty"):
            specrun.generate(pair, bad, max_tokens=4)
        with pytest.raises(InputError, match="empty"):
            specrun.stream(pair, bad, max_tokens=4)
    after = specrun.generate(pair, "steady", mode="draft", max_tokens=12, temperature=0, ignore_eos=True, chat=False)
    assert after.tokens == before.tokens


def test_an_unknown_mode_is_an_input_error(pair):
    with pytest.raises(InputError, match="unknown speculation mode"):
        specrun.generate(pair, "x", mode="sideways", max_tokens=2)


def test_generate_takes_a_schema_a_regex_or_a_grammar(pair):
    import json
    import re

    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    result = specrun.generate(pair, "answer", schema=schema, max_tokens=32, temperature=0, mode="ngram")
    assert isinstance(json.loads(result.text)["ok"], bool) and result.stats.stop_reason == "stop"
    assert re.fullmatch("[0-9]{3}", specrun.generate(pair, "x", regex="[0-9]{3}", max_tokens=8, temperature=0).text)
    assert specrun.generate(pair, "x", grammar='root ::= "yes" | "no"', max_tokens=8, temperature=0).text in (
        "yes",
        "no",
    )
    with pytest.raises(specrun.ConstraintError, match="given together"):
        specrun.generate(pair, "x", schema=schema, regex="a", max_tokens=4)
    with pytest.raises(specrun.ConstraintError, match="strin"):
        specrun.generate(pair, "x", schema={"type": "strin"}, max_tokens=4)
