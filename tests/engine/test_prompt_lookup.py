"""Prompt lookup, and hybrid drafting on it: which match is copied, how much, and what is learned."""

from __future__ import annotations

import random

import numpy as np
import pytest

from specrun.defaults import LOOKUP, MODEL
from specrun.engine.auto.plan import Candidate, Option, fixed
from specrun.engine.drafting.lookup import LookupDrafter
from specrun.engine.drafting.prompt_lookup import NgramIndex, PromptLookup
from specrun.engine.drafting.protocol import DraftRequest, DraftTuning
from specrun.engine.sampling import SamplingParams, make_rng


def test_no_match_gives_an_empty_deterministic_draft():
    drafter = PromptLookup()
    draft = drafter.propose([1, 2, 3, 4, 5], 8)
    assert draft.tokens == [] and draft.q is None
    assert drafter.name == "ngram"


def test_single_token_history_and_zero_k():
    drafter = PromptLookup()
    assert drafter.propose([7], 4).tokens == []
    assert drafter.propose([7, 1, 7], 0).tokens == []


def test_copies_what_followed_the_earlier_occurrence():
    draft = PromptLookup().propose([10, 11, 12, 13, 14, 99, 10, 11, 12], 8)
    # match of 3 tokens (10 11 12) earns up to 4 tokens: 13 14 99 10
    assert draft.tokens == [13, 14, 99, 10]
    assert draft.q is None
    assert len(draft.confidence) == len(draft.tokens)


def test_longest_match_wins_over_a_more_recent_shorter_one():
    # "1 2 3" was followed by 9 long ago; "2 3" alone was followed by 7 more recently
    history = [1, 2, 3, 9, 50, 2, 3, 7, 51, 1, 2, 3]
    assert PromptLookup().propose(history, 1).tokens == [9]


def test_most_recent_of_equally_long_matches_wins():
    history = [5, 6, 1, 40, 5, 6, 2, 41, 5, 6]
    assert PromptLookup().propose(history, 1).tokens == [2]


def test_draft_length_grows_with_match_length():
    drafter = PromptLookup(k_max=16)
    assert [drafter.draft_length(n) for n in range(1, 7)] == [1, 2, 4, 8, 16, 16]
    body = list(range(100, 140))
    for n, expected in ((1, 1), (2, 2), (3, 4), (4, 8), (5, 16)):
        history = body + [7] + body[:n]  # the suffix matches exactly n tokens of the body
        assert len(PromptLookup(k_max=16).propose(history, 32).tokens) == expected, n


def test_draft_is_capped_by_k_and_max_draft():
    body = list(range(100, 140))
    history = body + [7] + body[:8]
    assert PromptLookup().propose(history, 3).tokens == body[8:11]
    assert PromptLookup(k_max=5).propose(history, 32).tokens == body[8:13]


def test_ngram_min_ignores_short_matches():
    history = [1, 2, 3, 4, 9, 3, 8, 3]
    assert PromptLookup(ngram_min=1).propose(history, 1).tokens == [8]
    assert PromptLookup(ngram_min=2).propose(history, 1).tokens == []


def test_a_repeating_pattern_continues_past_the_end_of_the_history():
    history = [7, 8, 7, 8, 7, 8, 7, 8]
    assert PromptLookup().propose(history, 5).tokens == [7, 8, 7, 8, 7]


def test_accepts_tuples_and_numpy_arrays():
    history = [10, 11, 12, 13, 14, 99, 10, 11, 12]
    expected = PromptLookup().propose(history, 4).tokens
    assert PromptLookup().propose(tuple(history), 4).tokens == expected
    assert PromptLookup().propose(np.array(history), 4).tokens == expected


def test_rejects_an_empty_ngram_range():
    with pytest.raises(ValueError):
        NgramIndex(3, 2)
    with pytest.raises(ValueError):
        NgramIndex(0, 2)


def _fresh_index(tokens, n_min=1, n_max=4) -> NgramIndex:
    index = NgramIndex(n_min, n_max)
    index.sync(tokens)
    return index


def test_index_grows_incrementally_like_a_fresh_build():
    rng = random.Random(1)
    history = [rng.randrange(6) for _ in range(30)]
    index = NgramIndex(1, 4)
    assert index.sync(history) == 0
    for _ in range(20):
        history += [rng.randrange(6) for _ in range(rng.randrange(1, 4))]
        index.sync(history)
    assert index._ends == _fresh_index(history)._ends
    assert index.tokens == history


def test_index_follows_a_shortened_or_rewritten_history():
    rng = random.Random(2)
    index = NgramIndex(1, 4)
    history = [rng.randrange(5) for _ in range(60)]
    index.sync(history)
    shorter = history[:25]
    assert index.sync(shorter) == 25
    assert index._ends == _fresh_index(shorter)._ends
    rewritten = shorter[:10] + [9, 9, 9] + shorter[10:]
    assert index.sync(rewritten) == 10
    assert index._ends == _fresh_index(rewritten)._ends
    assert index.sync([]) == 0 and index._ends == {}


def test_match_drafts_equal_a_fresh_drafter_through_random_growth_and_rewinds():
    """Without copy following, a draft depends on the history alone, however it was reached."""
    rng = random.Random(3)
    drafter = PromptLookup(ngram_max=5, follow_copies=False)
    history = [rng.randrange(8) for _ in range(40)]
    for _ in range(200):
        op = rng.random()
        if op < 0.6:
            history = history + [rng.randrange(8) for _ in range(rng.randrange(1, 5))]
        elif op < 0.8:
            history = history[: rng.randrange(1, len(history) + 1)]
        else:
            cut = rng.randrange(len(history))
            history = history[:cut] + [rng.randrange(8)] + history[cut + 1 :]
        k = rng.randrange(0, 10)
        assert (
            drafter.propose(history, k).tokens
            == PromptLookup(ngram_max=5, follow_copies=False).propose(history, k).tokens
        )


def test_confidence_starts_from_match_length_and_learns_from_feedback():
    drafter = PromptLookup()
    assert drafter.confidence(1) == pytest.approx(1 / 3)  # in text written from scratch: n/(n+2)
    assert drafter.confidence(3) == pytest.approx(0.6)
    assert drafter.confidence(1, kind="match+") == pytest.approx(0.5)  # in an answer that copies: n/(n+1)
    assert drafter.confidence(3, kind="match+") == pytest.approx(0.75)
    assert drafter.confidence(32, kind="match+") == pytest.approx(0.93)  # never trusted blindly
    assert drafter.confidence(2, position=1) == pytest.approx(0.5)  # the first token: n/(n+2)
    history = [1, 2, 3, 4, 5, 6, 1, 2]  # match of 2
    before = drafter.propose(history, 2).confidence[0]
    for _ in range(10):
        drafter.propose(history, 2)
        drafter.feedback(2, 0)
    assert drafter.propose(history, 2).confidence[0] < before / 2
    for _ in range(40):
        drafter.propose(history, 2)
        drafter.feedback(2, 2)
    first, second = drafter.propose(history, 2).confidence
    assert first > 0.8 and second > 0.8
    # Another length keeps its prior when its kind did well (success elsewhere lends no trust);
    # the other kind of match is untouched.
    assert drafter.confidence(3) == pytest.approx(0.6)
    assert drafter.confidence(3, kind="match+") == pytest.approx(0.75)


def test_matches_failing_at_some_lengths_lower_the_start_of_the_next_length():
    """In a one-shot run evidence is thin and spread over match lengths: an answer that reformats
    its source (meeting notes into action items) has its matches fail at 3, 4 and 5 tokens, and a
    match of 6 should not be trusted as if nothing had been seen."""
    drafter = PromptLookup()
    for n in (3, 4, 5):
        drafter._learn(("match+", n), 0, failed=True)
    prior = 6 / 8
    assert drafter.confidence(6, position=1, kind="match+") < 0.75 * prior
    assert drafter.confidence(6, position=1, kind="match") == pytest.approx(prior)
    restored = PromptLookup()
    restored.restore(drafter.state(), cap=8)  # kept between runs with the rest of the estimates
    assert restored.confidence(6, position=1, kind="match+") == pytest.approx(
        drafter.confidence(6, position=1, kind="match+"), rel=1e-3
    )


def test_the_answer_under_way_outweighs_the_last_within_a_few_outcomes():
    """One lookup serves answer after answer: after an edit whose copies held forty times, a JSON
    conversion whose copies break at once must stop being trusted within a few of its own
    outcomes, not keep the last answer's trust for dozens of steps."""
    drafter = PromptLookup()
    history = [1, 2, 3, 4, 5, 6, 1, 2]
    for _ in range(40):
        drafter.propose(history, 2)
        drafter.feedback(2, 2)
    for _ in range(8):
        drafter.propose(history, 2)
        drafter.feedback(2, 0)
    assert drafter.propose(history, 2).confidence[0] < 0.5  # below the prior of a 2-token match


def test_matches_that_fail_at_once_or_copy_long_runs_are_not_averaged_into_one_rate():
    """Runs of 0, 0 and 30 accepted tokens: the first token is right a third of the time, but once
    it is, the copy goes on; one rate per token would call the first token 91% likely."""
    drafter = PromptLookup(prior_weight=1e-9, decay=1.0)
    history = [1, 2, 3, 4, 5, 6, 1, 2]
    for accepted in (0, 0, 30):
        drafter.propose(history, 2)
        drafter.feedback(31, accepted)
    assert drafter.confidence(2, position=1) == pytest.approx(1 / 3)
    assert drafter.confidence(2, position=2) == pytest.approx(29 / 30)


def test_an_unused_proposal_is_scored_against_the_tokens_that_followed():
    right, wrong = PromptLookup(), PromptLookup()
    history = [1, 2, 3, 4, 5, 6, 1, 2]
    for _ in range(10):
        proposal = right.propose(history, 2).tokens
        right.propose(history + proposal, 2)  # the target produced what was proposed
        wrong.propose(history, 2)
        wrong.propose(history + [40, 41], 2)
    assert right.confidence(2, position=1) > 0.8 and right.confidence(2, position=2) > 0.8
    assert wrong.confidence(2, position=1) < 0.3


def read_token_by_token(drafter: PromptLookup, prompt: list[int], answer: list[int], k: int = 16) -> None:
    """The prompt is read, then the answer one token a step (plain decoding), a proposal each step
    that nothing drafts."""
    for end in range(1, len(answer) + 1):
        drafter.propose(prompt + answer[:end], k)


def rest_outcomes(drafter: PromptLookup) -> tuple[float, float]:
    """Successes and trials of every token after a proposal's first."""
    rows = drafter.state()["rest"]
    return sum(row[2] for row in rows), sum(row[3] for row in rows)


def test_unused_proposals_that_keep_coming_true_are_judged_past_their_first_token():
    """Plain steps add one token each, which judges only a proposal's first; a copy that is never
    drafted must still earn trust in its later tokens, or it is never drafted."""
    source = list(range(100, 140))
    copying = PromptLookup(decay=1.0)
    read_token_by_token(copying, source, source[:30])
    successes, trials = rest_outcomes(copying)
    assert trials >= 10 and successes == trials
    breaking = PromptLookup(decay=1.0)
    read_token_by_token(breaking, source, source[:12] + [999, 998])
    successes, trials = rest_outcomes(breaking)
    assert 0 < successes < trials  # the proposal followed across the break learned where it broke


def test_a_followed_proposal_is_not_counted_twice_when_a_verified_draft_follows():
    source = list(range(100, 140))
    followed = PromptLookup(decay=1.0)
    read_token_by_token(followed, source, source[:6])
    assert followed._watched is not None
    start, _, _, learned = followed._watched
    seen = len(followed.index.tokens) - start
    before = rest_outcomes(followed)
    followed.feedback(4, 4)  # a draft of the latest proposal was verified
    after = rest_outcomes(followed)
    assert followed._watched is None
    # The followed proposal adds the positions it saw beyond those it had learned; the draft, its own.
    assert after[1] - before[1] == (seen - max(learned, 1)) + 3


def test_feedback_without_a_proposal_is_ignored():
    drafter = PromptLookup()
    drafter.feedback(3, 1)
    assert drafter.confidence(1) == pytest.approx(1 / 3)


def hybrid_choice(lookup: LookupDrafter, history: list[int], k: int) -> tuple[str, int]:
    """What the hybrid mode drafts with for one sequence: the lookup's proposal in hand, judged
    by its first token's confidence, else the draft model (engine.auto.plan.fixed)."""
    draft = lookup.propose([DraftRequest(0, history, k, SamplingParams(temperature=0), make_rng(0))]).drafts[0]
    options = ([Option(LOOKUP, draft.confidence)] if draft.tokens else []) + [Option(MODEL, [1.0] * k)]
    return fixed([Candidate(0, options, k)], (LOOKUP, MODEL), k, max_rows=64).drafts[0]


def test_hybrid_uses_a_confident_lookup_and_routes_feedback_to_it():
    lookup = LookupDrafter(DraftTuning(k_max=16, ngrams=(1, 8)))
    history = [10, 11, 12, 13, 14, 99, 10, 11, 12]  # match of 3: confidence 0.75
    assert hybrid_choice(lookup, history, 4) == (LOOKUP, 4)
    assert lookup.propose([DraftRequest(0, history, 4, SamplingParams(temperature=0), make_rng(0))]).drafts[
        0
    ].tokens == [13, 14, 99, 10]
    lookup.learn(0, 4, 4)
    assert lookup.state(0).confidence(3) > 0.75


def test_hybrid_falls_back_to_the_model_without_a_confident_match():
    lookup = LookupDrafter(DraftTuning(k_max=16, ngrams=(1, 8)))
    assert hybrid_choice(lookup, [1, 2, 3, 4], 3) == (MODEL, 3)  # no match at all
    assert hybrid_choice(lookup, [5, 1, 6, 1], 3) == (MODEL, 3)  # a one-token match: confidence 0.5


def test_a_match_in_an_answer_that_copies_is_estimated_apart_from_one_in_fresh_text():
    """Code written from scratch repeats stretches of earlier text by chance and breaks off at once;
    an answer that edits its source keeps copying. Outcomes in one do not move the other."""
    from specrun.engine.drafting.copy_cursor import SHARE_WINDOW

    source = list(range(100, 160))
    copying, fresh = PromptLookup(), PromptLookup()
    for drafter, answer in (
        (copying, source[:SHARE_WINDOW]),
        (fresh, list(range(500, 500 + SHARE_WINDOW)) + [100, 101]),
    ):
        drafter.propose(source + answer[:1], 4)  # the prompt is read, then the answer token by token
        for end in range(2, len(answer) + 1):
            drafter.propose(source + answer[:end], 4)
    assert copying.cursor.copy_share > 0.9  # the answer so far copies its prompt
    assert fresh.cursor.copy_share < 0.2
    assert copying._match_kind() == "match+" and fresh._match_kind() == "match"
    for _ in range(10):
        fresh._learn(("match", 2), 0, failed=True)
    assert fresh.confidence(2, position=1, kind="match") < 0.25
    assert fresh.confidence(2, position=1, kind="match+") == pytest.approx(0.5)


def test_a_prompt_indexed_at_once_is_indexed_as_token_by_token():
    from specrun.engine.drafting.ngram_index import BULK

    rng = random.Random(3)
    for n_min, n_max in ((1, 8), (2, 4), (3, 3)):
        tokens = [rng.randrange(12) for _ in range(4 * BULK)]
        whole, stepwise = NgramIndex(n_min, n_max), NgramIndex(n_min, n_max)
        whole.sync(tokens[: 3 * BULK])  # in bulk
        whole.sync(tokens)  # a long continuation, in bulk too
        for end in range(1, len(tokens) + 1):
            stepwise.sync(tokens[:end])
        assert whole._ends == stepwise._ends and whole.tokens == stepwise.tokens
        whole.sync(tokens[: BULK // 2])  # cut back, then grown again in bulk
        whole.sync(tokens)
        assert whole._ends == stepwise._ends
