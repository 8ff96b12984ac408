"""The real Qwen2.5-Coder pair: speculative greedy output equals plain output, through the library
and through `specrun run` with no model flags (the offline default pair); a chat answer equals
llama-server --jinja's."""

from __future__ import annotations

import json

import pytest
from cli_helpers import specrun
from paths import DATA

from specrun import generate
from specrun.engine.identity import check_output, logit_noise, tolerance_from_noise
from specrun.engine.sampling import SamplingParams
from specrun.engine.sequence import GenerationSettings
from specrun.runtime.pair import Pair, PairConfig

pytestmark = pytest.mark.real

JSON_PROMPT = "Convert to JSON: name Alice, age 30, city Paris; name Bob, age 25, city Berlin."


@pytest.fixture(scope="module")
def real_pair(real_pair_paths):
    target, draft = real_pair_paths
    pair = Pair(PairConfig(target, draft, ctx_size=1024))
    yield pair
    pair.close()


def greedy_outputs(pair: Pair, tokens: list[int], max_tokens: int = 48):
    settings = GenerationSettings(max_tokens=max_tokens, sampling=SamplingParams(temperature=0.0), draft_max=4)
    outputs, stats = {}, {}
    for mode in ("off", "draft"):
        generation = pair.generation(tokens, settings, mode=mode)
        outputs[mode] = [t for step in generation.run() for t in step.tokens]
        stats[mode] = generation.stats
    return outputs, stats


def judged(pair: Pair, tokens: list[int], output: list[int], tolerance: float):
    """Every token of `output` against the target's own logits (engine.identity)."""
    result = check_output(pair.session.target_ctx, tokens, output, tolerance)
    pair.session.target_ctx.clear()
    return result


def test_speculative_greedy_output_equals_plain(real_pair):
    tokens = real_pair.prompt_tokens("def fibonacci(n):\n", chat=False)
    outputs, stats = greedy_outputs(real_pair, tokens)
    assert outputs["draft"] == outputs["off"]
    assert stats["draft"].drafted > 0
    assert stats["draft"].acceptance_rate > 0.6  # code continuation: the 0.5B draft agrees most of the time


@pytest.mark.parametrize("prompt", [JSON_PROMPT, "Explain what a mutex is in two sentences."])
def test_every_greedy_token_is_the_targets_choice_or_a_measured_near_tie(real_pair, prompt):
    """A batch of K+1 tokens is computed with other kernels than one token, so the target's logits
    differ in the last bits and, where its top candidates are nearly tied, the argmax may flip.
    Each output, plain and speculative, is checked token by token against one batched pass of the
    target over prompt + output: every token is the argmax or within the measured noise of it."""
    tokens = real_pair.prompt_tokens(prompt)
    outputs, _ = greedy_outputs(real_pair, tokens, max_tokens=64)
    tolerance = tolerance_from_noise(logit_noise(real_pair.session.target_ctx, tokens))
    for mode, output in outputs.items():
        result = judged(real_pair, tokens, output, tolerance)
        assert result.checked == len(output) and not result.violations, (mode, result.to_dict())
        assert all(f.chosen.gap <= tolerance for f in result.ties)


def test_sampling_at_the_default_temperature_in_every_mode(real_pair):
    tokens = real_pair.prompt_tokens(JSON_PROMPT)
    n_vocab = real_pair.target_model.n_vocab
    for mode in ("draft", "hybrid", "auto"):
        settings = GenerationSettings(max_tokens=32, sampling=SamplingParams(temperature=0.8), seed=11)
        real_pair.session.reset()  # from an empty cache, as a fresh `specrun run --seed` starts
        generation = real_pair.generation(tokens, settings, mode=mode)
        steps = list(generation.run())
        output = [t for s in steps for t in s.tokens]
        assert output and all(0 <= t < n_vocab for t in output), mode
        assert "".join(s.text for s in steps).strip(), mode
        if mode == "draft":
            real_pair.session.reset()  # a kept cache would decode other batches, whose last bits differ
            again = [t for s in real_pair.generation(tokens, settings, mode=mode).run() for t in s.tokens]
            assert again == output  # a seed reproduces sampled text in the fixed modes
            assert generation.stats.drafted > 0 and generation.stats.accepted > 0


def test_run_with_no_model_flags_uses_the_default_pair():
    result = specrun("run", "Write a haiku about rust", "-n", "12", "--temp", "0", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["models"]["target"].endswith(".gguf") and doc["models"]["draft"].endswith(".gguf")
    assert doc["stats"]["generated_tokens"] >= 1 and doc["text"]


def test_a_chat_answer_is_the_one_llama_server_jinja_gives(real_pair):
    """The same request to llama-server --jinja on the same file (tests/data/llama_server, its
    /apply-template prompt and its greedy answer): the same prompt, token for token in number, and
    the same text. Its template's default system message makes this answer Chinese."""
    reference = json.loads((DATA / "llama_server" / "autumn_rain.json").read_text(encoding="utf-8"))
    question = reference["request"]["messages"][0]["content"]
    prompt = real_pair.chat_prompt(question)
    assert prompt.text == reference["prompt"] and len(prompt.tokens) == reference["prompt_tokens"]
    result = generate(real_pair, question, mode="off", max_tokens=reference["request"]["max_tokens"], temperature=0.0)
    assert result.stats.prompt_tokens == reference["prompt_tokens"]
    if result.text == reference["content"]:
        return
    # Another CPU's kernels may flip a nearly tied argmax: the answers part only where
    # llama-server's token is, on this machine, the target's choice or a measured near-tie.
    model = real_pair.session.target_ctx.model
    theirs = model.tokenize(reference["content"], add_special=False, parse_special=False)
    assert b"".join(model.piece(t) for t in theirs).decode() == reference["content"]
    part = next(
        (i for i, (a, b) in enumerate(zip(result.tokens, theirs)) if a != b), min(len(result.tokens), len(theirs) - 1)
    )
    tolerance = tolerance_from_noise(logit_noise(real_pair.session.target_ctx, prompt.tokens))
    verdict = judged(real_pair, prompt.tokens, theirs[: part + 1], tolerance)
    assert not verdict.violations, verdict.to_dict()
