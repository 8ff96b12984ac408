"""lm-evaluation-harness, as installed from PyPI, against `specrun serve`: its `local-completions`
model with the remote tokenizer runs a multiple-choice log-likelihood task and a generate-until
task (tests/data/lm_eval, no downloads), and scores the same with speculation as without it."""

from __future__ import annotations

import pytest
from lm_eval_helpers import run_modes
from serve_helpers import load_pair

pytest.importorskip("lm_eval", reason="lm-eval is a test dependency (pip install -e '.[test]')")

pytestmark = pytest.mark.slow


def test_lm_eval_scores_the_same_with_and_without_speculation(tiny_target, tiny_draft, monkeypatch):
    pair = load_pair(tiny_target, tiny_draft)
    try:
        plain, auto, again = run_modes(pair, "tiny", ("off", "auto", "off"), monkeypatch)
    finally:
        pair.close()
    assert auto == plain == again  # the same with speculation, and stable across runs
    assert all(0.0 <= value <= 1.0 for value in plain.values())
