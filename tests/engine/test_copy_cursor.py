"""Following a copy through edits: resynchronising after a change, and learning replacements."""

from __future__ import annotations

import random

from specrun.engine.drafting.prompt_lookup import PromptLookup

# A source with a "variable" (50) used twice, inside a prompt; answers edit it. The answer copies
# 9 tokens before the first change: long enough to count as an edit of the source, not a chance repeat.
SOURCE = [1, 2, 3, 4, 5, 6, 7, 8, 9, 50, 10, 11, 12, 13, 50, 14, 15, 16, 17, 18, 19, 20, 21]
PROMPT = [100, 101] + SOURCE + [102]
RENAMED = [60 if t == 50 else t for t in SOURCE]
X = SOURCE.index(50)  # 9: the first change


def _follow(drafter, answer, ends):
    for end in ends:
        drafter.propose(PROMPT + answer[:end], 4)


def test_a_copy_of_the_prompt_drafts_the_rest_of_it():
    drafter = PromptLookup()
    draft = drafter.propose(PROMPT + SOURCE[:3], 8)
    assert draft.tokens == SOURCE[3:7]  # found by 3 tokens, as a match of 3: up to 4 tokens
    assert drafter.cursor.synced
    draft = drafter.propose(PROMPT + SOURCE[:7], 8)  # followed 4 more
    assert draft.tokens == SOURCE[7:15]


def test_a_short_copy_that_breaks_is_found_again_only_as_a_match():
    """Generated code repeats short stretches by chance: a copy that ran 3 tokens and broke is not
    trusted as an edit when it is found again."""
    source = [1, 2, 3, 4, 50, 5, 6, 7, 8, 9, 10, 11, 12]
    prompt = [100] + source + [101]
    answer = [1, 2, 3, 4, 60, 5, 6]
    drafter = PromptLookup()
    for end in (3, 5, 7):
        drafter.propose(prompt + answer[:end], 4)
    assert drafter.cursor.synced and not drafter.cursor.found_near
    assert len(drafter.propose(prompt + answer, 16).tokens) == 2  # a match of 2 tokens


def test_right_after_a_change_nothing_is_drafted_from_the_copy():
    drafter = PromptLookup()
    _follow(drafter, RENAMED, (3, 7))
    draft = drafter.propose(PROMPT + RENAMED[: X + 1], 9)
    assert not drafter.cursor.synced and draft.tokens == []


def test_a_replacement_seen_once_is_learned_as_a_rule():
    drafter = PromptLookup()
    _follow(drafter, RENAMED, (3, 7, X + 1))
    draft = drafter.propose(PROMPT + RENAMED[: X + 3], 6)  # 10 and 11 found the copy again past 50
    assert drafter.cursor.synced and drafter.cursor.found_near
    assert drafter.cursor.rules == {(50,): (60,)}
    assert draft.tokens == RENAMED[X + 3 : X + 9]


def test_a_rule_the_answer_contradicts_is_dropped():
    drafter = PromptLookup()
    _follow(drafter, RENAMED, (3, 7, X + 1, X + 3))
    assert (50,) in drafter.cursor.rules
    second = SOURCE.index(50, X + 1)
    mixed = RENAMED[:second] + [50, 14, 15]  # the second 50 was kept after all
    drafter.propose(PROMPT + mixed, 4)
    assert (50,) not in drafter.cursor.rules
    assert drafter.propose(PROMPT + mixed, 3).tokens == SOURCE[second + 3 : second + 6]


def test_after_a_change_the_copy_is_found_again_nearest_ahead_not_most_recently():
    """7 occurs twice in the source; after the change the copy continues at the 7 just ahead of the
    break, not at the later 7 that a plain lookup of the most recent occurrence would pick."""
    source = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 77, 11, 12, 20, 21, 22, 23, 11, 30, 31]
    prompt = [100] + source + [101]
    history = prompt + source[:10] + [55, 11]
    drafter = PromptLookup()
    drafter.propose(prompt + source[:3], 4)
    drafter.propose(prompt + source[:10] + [55], 4)
    assert drafter.propose(history, 3).tokens == [12, 20, 21]
    assert PromptLookup(follow_copies=False).propose(history, 2).tokens == [30]


def test_a_new_prompt_forgets_the_rules_and_the_place():
    drafter = PromptLookup()
    _follow(drafter, RENAMED, (3, 7, X + 1, X + 3))
    assert drafter.cursor.rules
    draft = drafter.propose(PROMPT + SOURCE[:3], 8)
    assert drafter.cursor.rules == {}
    assert draft.tokens == SOURCE[3:7]


def test_a_chat_that_goes_on_keeps_the_rules():
    drafter = PromptLookup()
    _follow(drafter, RENAMED, (3, 7, X + 1, X + 3))
    drafter.propose(PROMPT + RENAMED + [103, 104], 4)  # the next turn extends the history
    assert drafter.cursor.rules == {(50,): (60,)}


def test_after_any_rewrite_the_draft_equals_a_fresh_drafters():
    rng = random.Random(5)
    drafter = PromptLookup(ngram_max=5)
    history = [rng.randrange(8) for _ in range(40)]
    for _ in range(300):
        if rng.random() < 0.7:
            history = history + [rng.randrange(8) for _ in range(rng.randrange(1, 5))]
            drafter.propose(history, rng.randrange(0, 10))
            continue
        cut = rng.randrange(1, len(history))
        history = history[:cut] + [rng.randrange(8)]
        k = rng.randrange(0, 10)
        assert drafter.propose(history, k).tokens == PromptLookup(ngram_max=5).propose(history, k).tokens


def test_copy_confidence_grows_with_the_run_and_is_learned_per_run_length():
    drafter = PromptLookup()
    assert drafter.confidence(2, kind="edit") < drafter.confidence(16, kind="edit")
    _follow(drafter, RENAMED, (3, 7, X + 1))
    history = PROMPT + RENAMED[: X + 3]
    draft = drafter.propose(history, 4)  # an edit copy that has run 2 tokens since the change
    run = drafter.cursor.run
    assert draft.confidence == [drafter.confidence(run, j, "edit") for j in (1, 2, 3, 4)]
    assert draft.confidence[1] < draft.confidence[3]  # a later token belongs to a longer run
    before = drafter.confidence(run, 2, "edit")
    for _ in range(20):
        drafter.propose(history, 4)
        drafter.feedback(4, 4)
    assert drafter.confidence(run, 2, "edit") > max(before, 0.9)


def test_one_matching_token_far_from_the_break_does_not_resume_the_copy():
    source = list(range(1, 12)) + [90] + list(range(200, 240)) + [300, 301, 302]
    prompt = [100] + source + [101]
    answer = source[:11] + [55, 300]  # 300 occurs only 41 tokens past the break
    drafter = PromptLookup()
    _ = [drafter.propose(prompt + answer[:end], 4) for end in (3, 11, 12, 13)]
    assert not drafter.cursor.synced
    near = source[:11] + [55, 200]  # 200 follows the break at once
    drafter = PromptLookup()
    _ = [drafter.propose(prompt + near[:end], 4) for end in (3, 11, 12, 13)]
    assert drafter.cursor.synced and drafter.propose(prompt + near, 2).tokens == [201, 202]


def test_an_insertion_resumes_the_copy_where_it_broke_without_a_rule():
    source = list(range(1, 31))
    prompt = [100] + source + [101]
    answer = source[:9] + [70, 71] + source[9:12]
    drafter = PromptLookup()
    _ = [drafter.propose(prompt + answer[:end], 4) for end in (3, 8, 10, 11, 12)]
    assert drafter.propose(prompt + answer, 4).tokens == source[12:16]
    assert drafter.cursor.rules == {}


def test_an_insertion_before_a_replaced_token_keeps_the_rule():
    """`low` became `low_stock` just before `d`, which had become `inventory` before: the answer
    departed before the rule's replacement began, which neither contradicts nor replaces it."""
    second = SOURCE.index(50, X + 1)
    drafter = PromptLookup()
    _follow(drafter, RENAMED, (3, 7, X + 1, X + 3))
    answer = RENAMED[:second] + [77, 60, 14, 15]  # a token inserted before the renamed 50
    for end in range(second, len(answer) + 1):
        drafter.propose(PROMPT + answer[:end], 4)
    assert drafter.cursor.rules == {(50,): (60,)}
    assert drafter.cursor.synced and drafter.propose(PROMPT + answer, 3).tokens == [16, 17, 18]
