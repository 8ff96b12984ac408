"""lm-evaluation-harness on the real Qwen2.5-Coder pair: the multiple-choice and generate-until
tasks of tests/data/lm_eval score the same with speculation (auto) as without it (off)."""

from __future__ import annotations

import pytest
from lm_eval_helpers import run_modes

from specrun.runtime.pair import Pair, PairConfig

pytestmark = [pytest.mark.real, pytest.mark.slow]


def test_lm_eval_scores_the_real_pair_alike_in_every_run(real_pair_paths, monkeypatch):
    pair = Pair(PairConfig(*real_pair_paths, ctx_size=2048))
    try:
        plain, auto = run_modes(pair, "qwen2.5-coder-1.5b", ("off", "auto"), monkeypatch)
    finally:
        pair.close()
    assert auto == plain
    assert plain["mc"] >= 0.5  # a 1.5B coder model knows most of these
