"""Log-probabilities on the real Qwen2.5-Coder pair: in every speculation mode, greedy and sampled,
each answer token's reported log-probability is the target's own, as a plain single-token pass
over the same answer reads it, within the measured noise of batched against single-token kernels."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
from serve_helpers import FLAT_COSTS, WAIT, served

from specrun.engine.identity import output_noise
from specrun.engine.llama import Context
from specrun.runtime.pair import Pair, PairConfig

pytestmark = [pytest.mark.real, pytest.mark.slow]

PROMPT = "def fibonacci(n):\n    "
TOKENS = 24
CHEAP_DRAFTS = {n: 0.001 for n in FLAT_COSTS}  # under auto, drafting pays


def plain_logprobs(pair: Pair, prompt: list[int], answer: list[int]) -> tuple[np.ndarray, float]:
    """Each answer token's log-probability read one token at a time, and the kernels' noise on it."""
    ctx = Context(pair.target_model, n_ctx=512, n_threads=pair.config.threads)
    try:
        row = ctx.feed(0, prompt, "last")
        out = []
        for token in answer:
            values = np.asarray(row, dtype=np.float64)
            out.append(values[token] - values.max() - np.log(np.exp(values - values.max()).sum()))
            row = ctx.feed(0, [token], "last")
        ctx.clear(0)
        return np.array(out), output_noise(ctx, prompt, answer)
    finally:
        ctx.close()


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_every_mode_reports_the_targets_log_probabilities(real_pair_paths, temperature):
    pair = Pair(PairConfig(*real_pair_paths, ctx_size=1024))
    prompt = pair.target_model.tokenize(PROMPT, add_special=True, parse_special=True)
    drafted = 0
    try:
        for mode in ("off", "ngram", "draft", "auto"):
            with served(pair, costs=FLAT_COSTS, draft_costs=CHEAP_DRAFTS, mode=mode, draft_max=4) as running:
                body = {"prompt": PROMPT, "max_tokens": TOKENS, "temperature": temperature, "seed": 3}
                body |= {"logprobs": 2, "return_tokens": True}
                answer = httpx.post(running.url + "/v1/completions", json=body, timeout=WAIT * 10).json()
            choice = answer["choices"][0]
            reported = np.array(choice["logprobs"]["token_logprobs"])
            expected, noise = plain_logprobs(pair, prompt, choice["tokens"])
            assert np.max(np.abs(reported - expected)) <= max(2 * noise, 1e-3), (mode, reported - expected)
            drafted += answer["timings"].get("draft_n", 0)
    finally:
        pair.close()
    assert drafted > 0  # the speculating modes' numbers came from verify passes
