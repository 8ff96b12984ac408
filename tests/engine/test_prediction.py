"""Predicted outputs: the prediction is followed like a copy (through insertions and deletions),
drafts through the one drafter interface, and never changes an answer (greedy: the same tokens;
sampled: the target's distribution)."""

from __future__ import annotations

import pytest
from serve_helpers import FLAT_COSTS, costs_of
from test_engine import CHI2_999, RUNS, first_two_distribution

from specrun import defaults
from specrun.engine.drafting.prediction import (
    SEPARATOR,
    Predicted,
    Prediction,
    PredictionDrafter,
    beside_lookup,
    kept_tokens,
)
from specrun.engine.drafting.protocol import Draft, DraftRequest, DraftTuning
from specrun.engine.sampling import SamplingParams
from specrun.engine.sequence import GenerationSettings
from specrun.engine.step import _defer
from specrun.errors import ContextOverflowError
from specrun.runtime.pair import Pair, PairConfig

PROMPT = [900, 901, 902]
PREDICTED = list(range(10, 70))
TUNING = DraftTuning(k_max=8)


def proposal(answer: list[int], k: int = 8) -> list[int]:
    state = Prediction(PREDICTED, len(PROMPT), TUNING)
    return state.propose(PROMPT + answer, k).tokens


def test_the_prediction_is_drafted_from_its_first_token():
    assert proposal([10]) == list(range(11, 19))
    assert proposal(list(range(10, 40))) == list(range(40, 48))


def test_an_insertion_or_a_deletion_is_followed_past():
    assert proposal([10, 11, 12, 77, 13]) == list(range(14, 22))  # 77 inserted
    assert proposal([10, 11, 12, 15]) == list(range(16, 24))  # 13 and 14 deleted
    assert proposal([10, 11, 12, 88, 14]) == list(range(15, 23))  # 13 replaced by 88


def test_an_answer_that_opens_with_other_text_is_trusted_once_it_writes_the_predictions_first_token():
    assert proposal([5, 6, 7, 10]) == list(range(11, 19))  # a fence, then the prediction's start
    assert proposal([5, 6, 7, *range(10, 20)]) == list(range(20, 28))


def test_the_opening_is_judged_step_by_step_as_an_answer_is_written():
    state = Prediction(PREDICTED, len(PROMPT), TUNING)
    answer = []
    for token in (5, 6, 7, 10):  # one token a step, as plain decoding writes them
        answer.append(token)
        drafted = state.propose(PROMPT + answer, 8)
    assert drafted.tokens == list(range(11, 19)) and drafted.confidence[0] >= 0.7


def test_replacements_learned_from_the_opening_are_forgotten_when_the_copy_starts():
    state = Prediction(PREDICTED, len(PROMPT), TUNING)
    state.propose(PROMPT + [5], 8)
    state.propose(PROMPT + [5, 12], 8)  # the opening's 12 also occurs in the prediction: (10, 11) looks replaced by 5
    assert state.lookup.cursor.rules
    state.propose(PROMPT + [5, 12, 10], 8)  # the copy starts
    assert state.lookup.cursor.rules == {}


def test_a_copy_begun_inside_the_prediction_is_still_trusted_only_as_far_as_it_has_run():
    opened = proposal([5, 6, 7, 30, 31])
    assert opened and opened == list(range(32, 32 + len(opened))) and len(opened) < 8


def test_no_draft_runs_past_the_prediction():
    tokens = proposal(list(range(10, 66)))
    assert tokens == [66, 67, 68, 69] and SEPARATOR not in tokens
    assert proposal(PREDICTED) == []


def test_a_sequence_without_a_prediction_gets_an_empty_proposal():
    drafter = PredictionDrafter(TUNING)
    drafter.begin(0, PROMPT, Predicted(tuple(PREDICTED)))
    drafter.begin(1, PROMPT, None)
    sampling = SamplingParams(temperature=0.0)
    made = drafter.propose([DraftRequest(s, PROMPT + [10], 4, sampling, None) for s in (0, 1)])
    assert made.drafts[0].tokens == [11, 12, 13, 14] and made.drafts[1].tokens == []
    drafter.finish(0, PROMPT + [10])
    assert drafter.propose([DraftRequest(0, PROMPT + [10], 4, sampling, None)]).drafts[0].tokens == []


def test_the_tokens_an_answer_kept_of_its_prediction_are_counted_through_edits():
    fence = [900, 901]
    assert kept_tokens(PREDICTED, PREDICTED) == 60
    assert kept_tokens(PREDICTED, PREDICTED[:25]) == 25  # an answer cut short kept what it wrote
    assert kept_tokens(PREDICTED, fence + PREDICTED + fence) >= 59  # an opening and a closing fence
    renamed = [999 if t in (20, 40) else t for t in PREDICTED]
    assert 54 <= kept_tokens(PREDICTED, renamed) <= 58  # each change loses itself and a token or so to find the copy
    assert 57 <= kept_tokens(PREDICTED, PREDICTED[:30] + [999, 998] + PREDICTED[30:]) <= 60  # an insertion
    assert kept_tokens(PREDICTED, PREDICTED + PREDICTED) == 60  # a part repeated is kept once
    assert kept_tokens(PREDICTED, list(range(500, 560))) == 0
    assert kept_tokens([], PREDICTED) == 0 and kept_tokens(PREDICTED, []) == 0


def test_tokens_the_prediction_shares_with_lookups_draft_are_judged_as_lookup_judges_them():
    lookup = Draft([1, 2, 3], None, [0.5, 0.6, 0.7])
    assert beside_lookup(Draft([1, 2, 3], None, [0.9, 0.9, 0.9]), lookup).tokens == []  # nothing added
    assert beside_lookup(Draft([1, 2], None, [0.9, 0.9]), lookup).tokens == []
    longer = beside_lookup(Draft([1, 2, 3, 4, 5], None, [0.9] * 5), lookup)
    assert longer.tokens == [1, 2, 3, 4, 5] and longer.confidence == [0.5, 0.6, 0.7, 0.9, 0.9]
    parted = beside_lookup(Draft([1, 2, 8, 9], None, [0.9] * 4), lookup)
    assert parted.tokens == [1, 2, 8, 9] and parted.confidence == [0.5, 0.6, 0.9, 0.9]
    other = Draft([7, 8], None, [0.9, 0.9])
    assert beside_lookup(other, lookup) is other  # another first token: another option
    assert beside_lookup(other, Draft()) is other and beside_lookup(other, None) is other


def test_the_step_offers_each_sequences_prediction_beside_its_lookup_proposal():
    drafter = PredictionDrafter(TUNING)
    proposals = {
        defaults.LOOKUP: {0: Draft([1, 2, 3], None, [0.5] * 3)},
        defaults.PREDICTION: {0: Draft([1, 2, 3], None, [0.9] * 3), 1: Draft([4, 5], None, [0.9] * 2)},
    }
    _defer(proposals, [drafter])
    assert proposals[defaults.PREDICTION][0].tokens == []  # the same copy as lookup's: no option of its own
    assert proposals[defaults.PREDICTION][1].tokens == [4, 5]  # lookup had none for sequence 1


# -- through the engine ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pair(tiny_target):
    loaded = Pair(PairConfig(tiny_target, None, ctx_size=512, threads=1))
    loaded.session.costs = costs_of(FLAT_COSTS)  # auto's choices from seeded costs, not this machine's clock
    yield loaded
    loaded.close()


def answer(pair: Pair, prompt: list[int], mode: str, prediction=None, **kw):
    settings = GenerationSettings(
        **{"max_tokens": 40, "sampling": SamplingParams(temperature=0.0), "ignore_eos": True, "draft_max": 8, **kw}
    )
    generation = pair.generation(prompt, settings, mode=mode, prediction=prediction)
    tokens = [t for step in generation.run() for t in step.tokens]
    return tokens, generation.stats


@pytest.mark.parametrize("mode", ["ngram", "auto"])
def test_greedy_answers_are_the_same_with_a_prediction(pair, mode):
    prompt = pair.prompt_tokens("predict me", chat=False)
    plain, _ = answer(pair, prompt, "off")
    exact, stats = answer(pair, prompt, mode, prediction=plain)
    assert exact == plain
    assert stats.by_drafter[defaults.PREDICTION]["accepted"] >= 20  # the right prediction drafts the answer
    edited = plain[:10] + [plain[3]] + plain[10:25] + plain[28:]  # an insertion and a deletion
    guessed, stats = answer(pair, prompt, mode, prediction=edited)
    assert guessed == plain and stats.by_drafter[defaults.PREDICTION]["accepted"] > 0


def test_the_engine_offers_the_prediction_beside_lookups_proposal(pair, monkeypatch):
    seen = []
    real = PredictionDrafter.beside

    def beside(self, own, lookup):
        seen.append((list(own.tokens), list(lookup.tokens) if lookup is not None else None))
        return real(self, own, lookup)

    monkeypatch.setattr(PredictionDrafter, "beside", beside)
    prompt = pair.prompt_tokens("predict me", chat=False)
    plain, _ = answer(pair, prompt, "off")
    answer(pair, prompt, "auto", prediction=plain)
    assert any(lookup for _, lookup in seen)  # lookup's proposal for the same sequence and step


def test_a_prediction_longer_than_the_context_is_refused(pair):
    with pytest.raises(ContextOverflowError, match="prediction"):
        pair.prediction_tokens("word " * 600)


@pytest.mark.slow
def test_sampled_answers_keep_the_targets_distribution_with_a_prediction(pair):
    sampling = SamplingParams(temperature=0.8, top_k=3, top_p=1.0, min_p=0.0)
    prompt = pair.prompt_tokens("sampling", chat=False)
    exact = first_two_distribution(pair, prompt, sampling)
    likely = max(exact, key=exact.get)
    counts, drafted = dict.fromkeys(exact, 0), 0
    for seed in range(RUNS):
        settings = GenerationSettings(max_tokens=3, sampling=sampling, seed=seed, draft_max=2, ignore_eos=True)
        generation = pair.generation(prompt, settings, mode="ngram", prediction=[*likely, likely[1]])
        tokens = [t for step in generation.run() for t in step.tokens]
        counts[(tokens[0], tokens[1])] += 1
        drafted += generation.stats.by_drafter.get(defaults.PREDICTION, {}).get("drafted", 0)
    chi2 = sum((counts[c] - RUNS * p) ** 2 / (RUNS * p) for c, p in exact.items())
    assert drafted > RUNS // 4  # the prediction drafted in many runs
    assert chi2 < CHI2_999, (chi2, counts, exact)
