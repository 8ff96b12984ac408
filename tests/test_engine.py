"""The speculative loop on real llama.cpp with tiny generated models: lossless greedy output, KV
caches in step with the accepted text, and sampled output distributed as the target's."""

from __future__ import annotations

import numpy as np
import pytest

from specrun.engine.llama import Context, Model
from specrun.engine.loop import GenerationSettings
from specrun.engine.sampling import SamplingParams
from specrun.pair import Pair, PairConfig

GREEDY = SamplingParams(temperature=0.0)


def settings(**kw) -> GenerationSettings:
    base = dict(max_tokens=40, sampling=GREEDY, seed=1, draft_max=4, ignore_eos=True)
    base.update(kw)
    return GenerationSettings(**base)


def run(pair: Pair, prompt: str, use_draft: bool, mode: str = "draft", **kw):
    loop = pair.loop(settings(**kw), mode=mode if use_draft else "off")
    steps = list(loop.run(pair.prompt_tokens(prompt, chat=False)))
    tokens = [t for s in steps for t in s.tokens]
    return tokens, "".join(s.text for s in steps), loop.stats, steps


@pytest.fixture(scope="module")
def self_pair(tiny_target):
    pair = Pair(PairConfig(tiny_target, tiny_target, ctx_size=512, threads=1))
    yield pair
    pair.close()


@pytest.fixture(scope="module")
def draft_pair(tiny_target, tiny_draft):
    pair = Pair(PairConfig(tiny_target, tiny_draft, ctx_size=512, threads=1))
    yield pair
    pair.close()


def test_draft_equal_to_target_accepts_everything_and_matches_plain(self_pair):
    plain, plain_text, _, _ = run(self_pair, "hello there", use_draft=False)
    spec, spec_text, stats, _ = run(self_pair, "hello there", use_draft=True)
    assert spec == plain and spec_text == plain_text
    assert stats.drafted > 0 and stats.accepted == stats.drafted
    assert stats.mean_tokens_per_step > 4.0  # K=4 accepted plus the bonus token


def test_different_draft_gives_identical_greedy_output(draft_pair):
    plain, _, _, _ = run(draft_pair, "the answer is", use_draft=False, max_tokens=80)
    spec, _, stats, steps = run(draft_pair, "the answer is", use_draft=True, max_tokens=80)
    assert spec == plain
    assert 0 < stats.accepted < stats.drafted  # both partial and full acceptance happened
    assert any(s.accepted == s.drafted > 0 for s in steps) and any(s.accepted < s.drafted for s in steps)
    assert len(plain) == 80


def test_every_step_emits_at_least_one_token(draft_pair):
    _, _, stats, steps = run(draft_pair, "x", use_draft=True, max_tokens=30)
    assert all(len(s.tokens) >= 1 for s in steps)
    assert stats.generated_tokens == 30 and stats.stop_reason == "max_tokens"


def fresh_logits(model: Model, tokens: list[int]) -> np.ndarray:
    ctx = Context(model, n_ctx=512, n_threads=1)  # KV in f16: caches agree to ~1e-3, not bit for bit
    try:
        return ctx.decode(tokens, "last")
    finally:
        ctx.close()


def test_kv_caches_match_a_fresh_context_after_partial_and_full_acceptance(draft_pair):
    loop = draft_pair.loop(settings(max_tokens=60), mode="draft")
    prompt = draft_pair.prompt_tokens("kv check", chat=False)
    history = list(prompt)
    seen = set()
    for step in loop.run(prompt):
        history.extend(step.tokens)
        if not step.drafted:
            continue
        seen.add("full" if step.accepted == step.drafted else "partial")
        target = loop.target
        assert target.tokens == history[:-1]
        base = len(target.tokens)
        cached = target.decode([history[-1]], "last")
        target.trim(base)
        assert np.allclose(cached, fresh_logits(draft_pair.target_model, history), atol=2e-2)
        draft_ctx = loop.policy.drafter.ctx
        # The draft cache still holds every accepted token: at most the last drafted token (never
        # decoded) and the target's token are missing, so the next sync feeds at most two tokens.
        assert draft_ctx.common_prefix(history) >= len(history) - 2
        logits = loop.policy.drafter.sync(history)
        assert draft_ctx.tokens == history
        assert np.allclose(logits, fresh_logits(draft_pair.draft_model, history), atol=2e-2)
    assert seen == {"full", "partial"}


def test_stop_string_and_eog_end_generation(draft_pair):
    tokens, text, stats, _ = run(draft_pair, "abc", use_draft=True, max_tokens=60)
    stop = text[5:8]
    _, cut_text, cut_stats, _ = run(draft_pair, "abc", use_draft=True, max_tokens=60, stop=(stop,))
    assert cut_text == text[: text.index(stop)] and cut_stats.stop_reason == "stop"


def test_context_full_stops_with_reason(tiny_target, tiny_draft):
    pair = Pair(PairConfig(tiny_target, tiny_draft, ctx_size=64, threads=1))
    try:
        n_ctx = pair.target_ctx.n_ctx  # llama.cpp may round the size up
        tokens, _, stats, _ = run(pair, "hello", use_draft=True, max_tokens=n_ctx + 50)
        assert stats.stop_reason == "context"
        assert stats.prompt_tokens + len(tokens) == n_ctx + 1  # the last token is never fed back
    finally:
        pair.close()


def first_two_distribution(pair: Pair, prompt: list[int], sampling: SamplingParams) -> dict:
    """Exact joint distribution of the first two tokens under the target alone."""
    model = pair.target_model
    p1 = sampling.probs(fresh_logits(model, prompt))
    joint = {}
    for t1 in np.nonzero(p1)[0]:
        p2 = sampling.probs(fresh_logits(model, prompt + [int(t1)]))
        for t2 in np.nonzero(p2)[0]:
            joint[(int(t1), int(t2))] = p1[t1] * p2[t2]
    return joint


@pytest.mark.parametrize("mode", ["ngram", "auto"])
def test_the_lookup_matches_the_ngram_range_of_the_settings(close_pair, mode):
    settings = GenerationSettings(ngram_min=2, ngram_max=5)
    policy = close_pair.policy(mode, settings, np.random.default_rng(0))
    lookup = policy.drafter if mode == "ngram" else policy.lookup
    assert (lookup.index.n_min, lookup.index.n_max) == (2, 5)


@pytest.fixture(scope="module")
def close_pair(tiny_target, tiny_dir):
    """A draft whose distribution overlaps the target's but differs from it (noise 0.1), so both the
    acceptance test and the residual distribution are exercised."""
    from tiny_models import write_tiny_gguf

    draft = write_tiny_gguf(tiny_dir / "close-draft.gguf", seed=0, noise=0.1, name="tiny-close")
    pair = Pair(PairConfig(tiny_target, draft, ctx_size=512, threads=1))
    yield pair
    pair.close()


@pytest.mark.parametrize("use_draft", [False, True], ids=["plain", "speculative"])
def test_sampled_first_two_tokens_follow_the_target_distribution(close_pair, use_draft):
    draft_pair = close_pair
    sampling = SamplingParams(temperature=1.0, top_k=3, top_p=1.0, min_p=0.0)
    prompt = draft_pair.prompt_tokens("sampling", chat=False)
    exact = first_two_distribution(draft_pair, prompt, sampling)
    runs = 1500
    counts = dict.fromkeys(exact, 0)
    drafted = 0
    for seed in range(runs):
        loop = draft_pair.loop(settings(max_tokens=3, sampling=sampling, seed=seed, draft_max=2), mode="draft" if use_draft else "off")
        tokens = [t for s in loop.run(prompt) for t in s.tokens]
        counts[(tokens[0], tokens[1])] += 1
        drafted += loop.stats.drafted
    assert (drafted > 0) == use_draft
    # Pearson chi-square goodness of fit over at most 9 cells (8 degrees of freedom):
    # the 99.9% quantile is 26.12, so a correct sampler fails this one time in a thousand.
    chi2 = sum((counts[c] - runs * p) ** 2 / (runs * p) for c, p in exact.items())
    assert chi2 < 26.12, (chi2, counts, exact)


@pytest.mark.parametrize("mode", ["draft", "ngram", "hybrid", "auto"])
def test_every_mode_is_lossless_at_temperature_zero(draft_pair, mode):
    prompt = "one two three one two three one two three"
    plain, _, _, _ = run(draft_pair, prompt, use_draft=False, max_tokens=60)
    spec, _, stats, steps = run(draft_pair, prompt, use_draft=True, mode=mode, max_tokens=60, draft_max=6)
    assert spec == plain
    assert stats.steps == len(steps) - 1
    if mode != "auto":
        assert stats.drafted > 0


def test_auto_reports_its_choices(draft_pair):
    _, _, stats, steps = run(draft_pair, "abc abc abc", use_draft=True, mode="auto", max_tokens=40)
    assert stats.policy is not None and stats.policy["choices"]
    assert set(stats.by_drafter) <= {"plain", "ngram", "draft"}
    assert sum(c["steps"] for c in stats.by_drafter.values()) == stats.steps


def test_ngram_mode_needs_no_draft_model(tiny_target):
    pair = Pair(PairConfig(tiny_target, None, ctx_size=512, threads=1))
    try:
        prompt = "a b c d a b c d a b c d"
        plain, _, _, _ = run(pair, prompt, use_draft=False, max_tokens=40)
        spec, _, stats, _ = run(pair, prompt, use_draft=True, mode="ngram", max_tokens=40)
        assert spec == plain and stats.drafted > 0
        with pytest.raises(Exception, match="needs a draft model"):
            pair.loop(settings(), mode="draft")
    finally:
        pair.close()


def test_draft_p_min_stops_unsure_drafts(draft_pair):
    _, _, loose, _ = run(draft_pair, "the answer is", use_draft=True, max_tokens=60, draft_max=6)
    _, _, strict, _ = run(draft_pair, "the answer is", use_draft=True, max_tokens=60, draft_max=6, draft_p_min=0.99, draft_min=1)
    assert strict.drafted < loose.drafted
    assert all(n >= 1 for n in strict.drafted_by_position[:1])


def test_auto_estimates_carry_over_between_generations(draft_pair):
    first = draft_pair.loop(settings(max_tokens=20), mode="auto")
    list(first.run(draft_pair.prompt_tokens("carry", chat=False)))
    steps_after_first = first.policy.controller.steps
    second = draft_pair.loop(settings(max_tokens=20), mode="auto")
    assert second.policy.controller is first.policy.controller
    list(second.run(draft_pair.prompt_tokens("over", chat=False)))
    assert second.policy.controller.steps > steps_after_first > 0
