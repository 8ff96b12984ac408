"""Log-probabilities read off rows of logits: each token's under its row, the likeliest
alternatives in order, rows normalised in blocks, and the prompt's tokens after the first."""

from __future__ import annotations

import numpy as np

from specrun.engine.logprobs import ROWS_AT_ONCE, committed, prompt_scores, token_logprobs


def reference(row) -> np.ndarray:
    values = np.asarray(row, dtype=np.float64)
    return values - values.max() - np.log(np.exp(values - values.max()).sum())


def test_each_token_gets_its_rows_log_softmax_and_the_likeliest_in_order():
    rng = np.random.default_rng(0)
    rows = (rng.standard_normal((ROWS_AT_ONCE * 2 + 3, 5000)) * 4).astype(np.float32)  # several blocks
    tokens = rng.integers(0, 5000, rows.shape[0]).tolist()
    for top in (0, 1, 5):
        found = token_logprobs(rows, tokens, top)
        assert [e.token for e in found] == tokens
        for entry, row in zip(found, rows):
            expected = reference(row)
            assert abs(entry.logprob - expected[entry.token]) < 1e-5
            best = np.argsort(-expected, kind="stable")[:top]
            assert [t for t, _ in entry.top] == best.tolist()
            assert all(abs(lp - expected[t]) < 1e-5 for t, lp in entry.top)
    argmax = token_logprobs(rows[:1], [int(rows[0].argmax())], 1)[0]
    assert argmax.top[0] == (argmax.token, argmax.logprob)  # the same number, as a harness compares them


def test_prompt_scores_cover_the_tokens_each_row_predicts():
    rng = np.random.default_rng(1)
    prompt = rng.integers(0, 100, 10).tolist()
    rows = rng.standard_normal((4, 100)).astype(np.float32)  # rows of prompt positions 6..9
    scores = prompt_scores(rows, prompt, 6, 0)
    assert [s.token for s in scores] == prompt[7:10]  # the last row predicts the answer, not the prompt
    assert abs(scores[0].logprob - reference(rows[0])[prompt[7]]) < 1e-5
    assert committed(None, rows, [1]) == [] and committed(2, rows[0], []) == []
