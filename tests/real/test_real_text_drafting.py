"""Drafts of another vocabulary on the real Qwen2.5-Coder 1.5B target: SmolLM2 135M (byte-level BPE
of its own) and Gemma 3 270M (SentencePiece, BOS added, byte fallback) draft through text.
`specrun run --spec text` at temperature 0 gives plain decoding's text for every built-in bench
prompt, and reports what was drafted and accepted.

Where a text differs, the generation is repeated in this process and every token of it judged
against the target's own logits: batched verification and single-token passes differ in the last
bits, so where the target's top candidates are nearly tied the argmax may flip (as with a draft of
the same family, test_real_pair). A token further below the top than that noise is a bug."""

from __future__ import annotations

import json
from functools import cache

import pytest
from cli_helpers import run_json, specrun
from conftest import real_model

from specrun.bench.prompts import builtin
from specrun.engine.identity import check_output, logit_noise, tolerance_from_noise
from specrun.engine.sampling import SamplingParams
from specrun.engine.sequence import GenerationSettings
from specrun.runtime.pair import Pair, PairConfig

pytestmark = pytest.mark.real

TOKENS = 128
PROMPTS = {p.id: p for p in builtin()}
DRAFTS = ("smollm2-135m", "gemma3-270m")
# One prompt a category proves what the test proves; the rest of the prompts run in the sweep lane.
FIRST_OF_CATEGORY = {
    min(i for i in PROMPTS if PROMPTS[i].category == c) for c in {p.category for p in PROMPTS.values()}
}
PROMPT_IDS = [pytest.param(i, marks=() if i in FIRST_OF_CATEGORY else pytest.mark.sweep) for i in sorted(PROMPTS)]


@cache
def target_path() -> str:
    return str(real_model("qwen2.5-coder-1.5b"))


def run_prompt(prompt_id: str, *model_args: str) -> dict:
    prompt = PROMPTS[prompt_id]
    system = ("--system", prompt.system) if prompt.system else ()
    args = ("--target", target_path(), *model_args, "--temp", "0", "-n", str(TOKENS), *system, prompt.prompt)
    return run_json(*args, timeout=900)


@cache
def plain_text(prompt_id: str) -> str:
    return run_prompt(prompt_id, "--draft", "none")["text"]


def judge_divergence(draft_path: str, prompt_id: str, cli_text: str) -> None:
    """Both outputs again, in process, every token against the target's logits: no violation in
    either, and the first token where they part is a near-tie in one of them."""
    prompt = PROMPTS[prompt_id]
    pair = Pair(PairConfig(target_path(), draft_path, ctx_size=4096))
    try:
        tokens = pair.prompt_tokens(prompt.prompt, system=prompt.system)
        settings = GenerationSettings(max_tokens=TOKENS, sampling=SamplingParams(temperature=0.0), draft_max=4)
        outputs = {}
        for mode in ("off", "text"):
            pair.session.reset()  # each run from an empty cache, as the command's: a kept cache changes the batches
            steps = list(pair.generation(tokens, settings, mode=mode).run())
            outputs[mode] = [t for s in steps for t in s.tokens]
            if mode == "text":
                assert "".join(s.text for s in steps) == cli_text  # the same run as the command's
        plain, text = outputs["off"], outputs["text"]
        parted = next(i for i, (a, b) in enumerate(zip([*plain, None], [*text, None])) if a != b)
        ctx = pair.session.target_ctx
        tolerance = tolerance_from_noise(logit_noise(ctx, tokens))
        ties = set()
        for mode, output in outputs.items():
            ctx.clear()
            result = check_output(ctx, tokens, output, tolerance)
            assert result.checked == len(output) and not result.violations, (mode, result.to_dict())
            ties |= {f.position for f in result.ties}
        assert parted in ties, f"the outputs part at token {parted}, which is no near-tie in either"
    finally:
        pair.close()


@pytest.mark.parametrize("draft", DRAFTS)
@pytest.mark.parametrize("prompt_id", PROMPT_IDS)
def test_text_drafting_gives_plain_decodings_text(draft, prompt_id):
    draft_path = str(real_model(draft))
    doc = run_prompt(prompt_id, "--draft", draft_path, "--spec", "text")
    stats = doc["stats"]
    assert doc["settings"]["mode"] == "text" and set(stats["by_drafter"]) <= {"text", "plain"}
    assert stats["drafted"] > 0 and stats["accepted"] == stats["by_drafter"]["text"]["accepted"]
    assert 0 <= stats["accepted"] <= stats["drafted"]
    if doc["text"] != plain_text(prompt_id):
        judge_divergence(draft_path, prompt_id, doc["text"])


def test_gemma_drafts_for_qwen_through_text_only():
    result = specrun("check", target_path(), str(real_model("gemma3-270m")), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert not report["compatible"] and report["drafting"] == "text"
