"""`specrun serve` on the real Qwen2.5-Coder pair through the openai client: a greedy chat answer is
`specrun run`'s for the same message, or differs from it only at a measured near-tie."""

from __future__ import annotations

import json

import openai
import pytest
from cli_helpers import specrun
from serve_helpers import WAIT, served

from specrun.engine.identity import check_output, logit_noise, tolerance_from_noise
from specrun.runtime.pair import Pair, PairConfig

pytestmark = pytest.mark.real

MESSAGE = "Write a Python function that returns the n-th Fibonacci number, with a docstring."
CTX = 1024
TOKENS = 48


def test_a_greedy_chat_answer_through_the_openai_client_equals_specrun_runs(real_pair_paths):
    target, draft = real_pair_paths
    pair = Pair(PairConfig(target, draft, ctx_size=CTX), contexts=False)
    try:
        with served(pair, parallel=2) as running:
            api = openai.OpenAI(base_url=running.url + "/v1", api_key="none", max_retries=0, timeout=WAIT * 10)
            answer = api.chat.completions.create(model="qwen", messages=[{"role": "user", "content": MESSAGE}], max_tokens=TOKENS,
                                                 temperature=0, extra_body={"return_tokens": True})
            streamed = "".join(c.choices[0].delta.content or "" for c in api.chat.completions.create(
                model="qwen", messages=[{"role": "user", "content": MESSAGE}], max_tokens=TOKENS, temperature=0, stream=True) if c.choices)
    finally:
        pair.close()
    text = answer.choices[0].message.content
    timings = answer.model_extra["timings"]
    assert text and {"draft_n", "draft_n_accepted"} <= set(timings)
    result = specrun("run", MESSAGE, "-n", str(TOKENS), "--temp", "0", "-c", str(CTX), "--json", timeout=600)
    assert result.returncode == 0, result.stderr
    expected = json.loads(result.stdout)["text"]
    if text != expected or streamed != text:
        # Batches of other sizes may flip the argmax where the target's top two logits nearly tie:
        # then every token of the server's answer must still be the target's choice or such a tie.
        checker = Pair(PairConfig(target, None, ctx_size=CTX))
        try:
            prompt = checker.prompt_tokens(MESSAGE)
            tolerance = tolerance_from_noise(logit_noise(checker.target_ctx, prompt))
            verdict = check_output(checker.target_ctx, prompt, answer.choices[0].model_extra["tokens"], tolerance)
        finally:
            checker.close()
        assert not verdict.violations and verdict.ties, (text, expected, verdict.to_dict())
