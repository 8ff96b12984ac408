"""Pairs whose vocabularies differ in size, as Qwen2.5 7B–32B targets (152064 tokens) against the
0.5B draft (151936) do: the draft never proposes an id the target lacks, is never fed an id it
lacks, and every mode stays exactly the target's output, greedy or sampled, both ways round."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_helpers import specrun
from test_engine import CHI2_999, GPU_LIKE, run, sampled_fit
from test_engine import settings as greedy_settings

from specrun.engine.sampling import SamplingParams
from specrun.runtime.pair import Pair, PairConfig

SMALL_VOCAB = 267  # the unpadded tiny vocabulary; the padded one has 100 more ids


@pytest.fixture(scope="module", params=["target-larger", "draft-larger"])
def padded_pair(request, padded_large, padded_small):
    target, draft = (padded_large, padded_small) if request.param == "target-larger" else (padded_small, padded_large)
    pair = Pair(PairConfig(target, draft, ctx_size=512, threads=1))
    pair.session.costs = GPU_LIKE  # a batch costs about one token, so auto drafts here
    yield pair
    pair.close()


@pytest.mark.parametrize(
    "direction",
    [("padded_large", "padded_small"), ("padded_small", "padded_large")],
    ids=["target-larger", "draft-larger"],
)
@pytest.mark.parametrize("mode", ["draft", "ngram", "hybrid", "auto"])
@pytest.mark.slow
def test_cli_runs_every_mode_at_both_temperatures_and_greedy_equals_plain(request, direction, mode):
    target, draft = (request.getfixturevalue(name) for name in direction)
    common = ["run", "--raw", "--target", target, "-n", "32", "--ignore-eos", "--json", "hello there"]
    plain = specrun(*common, "--draft", "none", "--temp", "0")
    assert plain.returncode == 0, plain.stderr
    for temperature in ("0", "0.8"):
        result = specrun(*common, "--draft", draft, "--spec", mode, "--temp", temperature, "--seed", "5")
        assert result.returncode == 0, (mode, temperature, result.stderr)
        doc = json.loads(result.stdout)
        assert doc["stats"]["generated_tokens"] == 32
        if temperature == "0":
            assert doc["text"] == json.loads(plain.stdout)["text"]


@pytest.mark.parametrize("mode", ["draft", "ngram", "hybrid", "auto"])
def test_greedy_speculation_equals_plain_and_really_drafts(padded_pair, mode):
    prompt = "one two three one two three one two three"
    plain, _, _, _ = run(padded_pair, prompt, use_draft=False, max_tokens=80)
    spec, _, stats, _ = run(padded_pair, prompt, use_draft=True, mode=mode, max_tokens=80, draft_max=6)
    assert spec == plain and stats.drafted > 0
    if padded_pair.target_model.n_vocab > SMALL_VOCAB:
        assert any(t >= SMALL_VOCAB for t in plain)  # the target did produce ids the draft lacks


def test_draft_proposals_stay_in_the_target_vocabulary_and_the_draft_reads_only_its_own(padded_pair):
    target_size = padded_pair.target_model.n_vocab
    draft_size = padded_pair.draft_model.n_vocab
    generation = padded_pair.generation(
        padded_pair.prompt_tokens("pad", chat=False),
        greedy_settings(max_tokens=60, sampling=SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0), seed=3),
        mode="draft",
    )
    proposals = []
    drafter = generation.engine.drafters["draft"]
    original = drafter.propose

    def spy(requests):
        made = original(requests)
        proposals.extend(made.drafts.values())
        return made

    drafter.propose = spy
    try:
        tokens = [t for step in generation.run() for t in step.tokens]
    finally:
        del drafter.propose
    assert proposals and all(t < target_size for d in proposals for t in d.tokens)
    assert all(max(q.ids) < min(target_size, draft_size) for d in proposals for q in d.q)  # q only on ids both have
    assert all(t < draft_size for t in padded_pair.session.draft_ctx.tokens[0])
    assert all(t < target_size for t in tokens)


def test_sampled_output_follows_the_target_distribution(padded_pair):
    """Chi-square goodness of fit of the first two tokens against the target alone (see
    test_engine.test_sampled_first_two_tokens_follow_the_target_distribution)."""
    chi2, drafted, detail = sampled_fit(padded_pair, padded_pair.prompt_tokens("sampling", chat=False), "draft")
    assert drafted > 0
    assert chi2 < CHI2_999, detail


def test_the_padded_target_puts_mass_on_ids_the_draft_lacks(padded_large):
    """The fixture is what the tests above rely on: real probability on the padding ids."""
    pair = Pair(PairConfig(padded_large, None, ctx_size=256, threads=1))
    try:
        logits = pair.session.target_ctx.feed(0, pair.prompt_tokens("pad", chat=False), "last")
        probs = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0).probs(logits)
        assert probs[SMALL_VOCAB:].sum() > 0.05
        assert np.isclose(probs.sum(), 1.0)
    finally:
        pair.close()
