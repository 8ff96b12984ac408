"""engine.identity's verdicts: a finding beyond the prompt's noise is judged again at the noise
measured along the output, and stays a violation beyond that too."""

from __future__ import annotations

import numpy as np

from specrun.engine.identity import judge_rows


def rows_with_gap(gap: float) -> np.ndarray:
    rows = np.zeros((3, 6), dtype=np.float32)
    rows[:, 1] = 10.0
    rows[1, 4] = 10.0 - gap
    return rows


def test_a_violation_at_the_prompts_tolerance_becomes_a_tie_within_the_noise_along_the_output():
    result = judge_rows(rows_with_gap(0.5), [1, 4, 1], 0.2, lambda: 0.3)
    assert not result.violations and [f.position for f in result.ties] == [1]
    assert result.tolerance == 0.6


def test_a_token_beyond_both_noises_stays_a_violation():
    result = judge_rows(rows_with_gap(0.5), [1, 4, 1], 0.2, lambda: 0.1)
    assert [f.position for f in result.violations] == [1] and result.tolerance == 0.2
    result = judge_rows(rows_with_gap(2.0), [1, 4, 1], 0.2, lambda: 0.3)
    assert [f.position for f in result.violations] == [1] and result.tolerance == 0.6


def test_the_noise_along_the_output_is_measured_only_for_a_violation():
    def never() -> float:
        raise AssertionError("measured without a violation")

    assert judge_rows(rows_with_gap(0.15), [1, 4, 1], 0.2, never).ties
    assert judge_rows(rows_with_gap(0.5), [1, 1, 1], 0.2, never).ok
