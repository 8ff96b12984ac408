"""The speculative loop on real llama.cpp with tiny generated models: lossless greedy output, KV
caches in step with the accepted text, and sampled output distributed as the target's."""

from __future__ import annotations

import random

import numpy as np
import pytest

from specrun.engine.auto.costs import DecodeCosts
from specrun.engine.llama import Context, common_prefix
from specrun.engine.model import Model
from specrun.engine.sampling import SamplingParams
from specrun.engine.sequence import GenerationSettings
from specrun.runtime.pair import Pair, PairConfig

GREEDY = SamplingParams(temperature=0.0)


def settings(**kw) -> GenerationSettings:
    base = dict(max_tokens=40, sampling=GREEDY, seed=1, draft_max=4, ignore_eos=True)
    base.update(kw)
    return GenerationSettings(**base)


def run(pair: Pair, prompt: str, use_draft: bool, mode: str = "draft", **kw):
    generation = pair.generation(
        pair.prompt_tokens(prompt, chat=False), settings(**kw), mode=mode if use_draft else "off"
    )
    steps = list(generation.run())
    tokens = [t for s in steps for t in s.tokens]
    return tokens, "".join(s.text for s in steps), generation.stats, steps


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


def fresh_logits(model: Model, tokens: list[int], like: Context) -> np.ndarray:
    """The last row of `tokens` read afresh, attention computed as in `like`."""
    ctx = Context(model, n_ctx=512, n_threads=1, fused_attention=like.fused_attention)  # KV in f16: ~1e-3 apart
    try:
        return ctx.feed(0, tokens, "last")
    finally:
        ctx.close()


def test_kv_caches_match_a_fresh_context_after_partial_and_full_acceptance(draft_pair):
    prompt = draft_pair.prompt_tokens("kv check", chat=False)
    generation = draft_pair.generation(prompt, settings(max_tokens=60), mode="draft")
    history = list(prompt)
    seen = set()
    for step in generation.run():
        history.extend(step.tokens)
        if not step.drafted:
            continue
        seen.add("full" if step.accepted == step.drafted else "partial")
        target = generation.engine.target
        assert target.tokens[0] == history[:-1]
        base = len(target.tokens[0])
        cut = target.shortlisted(0)
        target.shortlist(0, 0)  # whole rows, to compare with a fresh context's
        cached = target.feed(0, [history[-1]], "last")
        target.trim(0, base)
        target.shortlist(0, cut)
        assert np.allclose(cached, fresh_logits(draft_pair.target_model, history, target), atol=2e-2)
        draft_ctx = generation.engine.drafters["draft"].ctx
        # The draft cache still holds every accepted token: at most the last drafted token (never
        # decoded) and the target's token are missing, so the next proposal feeds at most two tokens.
        assert draft_ctx.common_prefix(0, history) >= len(history) - 2
        draft_ctx.trim(0, draft_ctx.common_prefix(0, history))
        cut = draft_ctx.shortlisted(0)
        draft_ctx.shortlist(0, 0)
        logits = draft_ctx.feed(0, history[len(draft_ctx.tokens[0]) :], "last")
        draft_ctx.shortlist(0, cut)
        assert draft_ctx.tokens[0] == history
        assert np.allclose(logits, fresh_logits(draft_pair.draft_model, history, draft_ctx), atol=2e-2)
        draft_ctx.trim(0, len(history) - 1)
    assert seen == {"full", "partial"}


def test_stop_string_ends_generation(draft_pair):
    tokens, text, stats, _ = run(draft_pair, "abc", use_draft=True, max_tokens=60)
    stop = text[5:8]
    _, cut_text, cut_stats, _ = run(draft_pair, "abc", use_draft=True, max_tokens=60, stop=(stop,))
    assert cut_text == text[: text.index(stop)] and cut_stats.stop_reason == "stop"


def test_context_full_stops_with_reason(tiny_target, tiny_draft):
    pair = Pair(PairConfig(tiny_target, tiny_draft, ctx_size=64, threads=1))
    try:
        n_ctx = pair.session.n_ctx  # llama.cpp may round the size up
        tokens, _, stats, _ = run(pair, "hello", use_draft=True, max_tokens=n_ctx + 50)
        assert stats.stop_reason == "context"
        assert stats.prompt_tokens + len(tokens) == n_ctx + 1  # the last token is never fed back
    finally:
        pair.close()


def first_two_distribution(pair: Pair, prompt: list[int], sampling: SamplingParams) -> dict:
    """Exact joint distribution of the first two tokens under the target alone.

    A verification batch computes logits with other kernels than a single decode; where the k-th
    and (k+1)-th logits are nearly tied, top-k keeps a different set and no sampler could match.
    The prompt must not sit on such a tie, which is checked here rather than left to fail."""
    model = pair.target_model

    def probs(tokens: list[int]) -> np.ndarray:
        logits = fresh_logits(model, tokens, pair.session.target_ctx)
        if sampling.top_k:
            ranked = np.sort(logits)[::-1]
            assert ranked[sampling.top_k - 1] - ranked[sampling.top_k] > 0.1, "the prompt sits on a top-k near-tie"
        return sampling.probs(logits)

    p1 = probs(prompt)
    joint = {}
    for t1 in np.nonzero(p1)[0]:
        p2 = probs(prompt + [int(t1)])
        for t2 in np.nonzero(p2)[0]:
            joint[(int(t1), int(t2))] = p1[t1] * p2[t2]
    return joint


@pytest.mark.parametrize("mode", ["ngram", "auto"])
def test_the_lookup_matches_the_ngram_range_of_the_settings(close_pair, mode):
    settings = GenerationSettings(ngram_min=2, ngram_max=5)
    policy, persistent = close_pair.session.policy(mode, settings)
    close_pair.session.engine.configure(policy)
    lookup = persistent if mode == "auto" else close_pair.session.engine.drafters["ngram"].state(0)
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
    chi2, drafted, detail = sampled_fit(
        close_pair, close_pair.prompt_tokens("sampling", chat=False), "draft" if use_draft else "off"
    )
    assert (drafted > 0) == use_draft
    assert chi2 < CHI2_999, detail


SAMPLING = SamplingParams(temperature=1.0, top_k=3, top_p=1.0, min_p=0.0)
RUNS = 1500
CHI2_999 = 26.12  # 99.9% quantile at 8 degrees of freedom: a correct sampler fails one time in a thousand


def sampled_fit(
    pair: Pair, prompt: list[int], mode: str, before_run=None, sampling: SamplingParams = SAMPLING
) -> tuple[float, int, tuple]:
    """Pearson chi-square of the first two sampled tokens over RUNS seeds against the target's
    exact distribution (at most 9 cells with top-k 3), the tokens drafted in all, and the counts."""
    exact = first_two_distribution(pair, prompt, sampling)
    counts = dict.fromkeys(exact, 0)
    drafted = 0
    for seed in range(RUNS):
        if before_run is not None:
            before_run()
        generation = pair.generation(
            prompt, settings(max_tokens=3, sampling=sampling, seed=seed, draft_max=2), mode=mode
        )
        tokens = [t for s in generation.run() for t in s.tokens]
        counts[(tokens[0], tokens[1])] += 1
        drafted += generation.stats.drafted
    chi2 = sum((counts[c] - RUNS * p) ** 2 / (RUNS * p) for c, p in exact.items())
    return chi2, drafted, (chi2, counts, exact)


GPU_LIKE = DecodeCosts({n: 0.010 + 0.0001 * n for n in (1, 2, 4, 8, 16, 32)}, 0.001)  # a batch costs about one token


@pytest.fixture
def gpu_like(draft_pair):
    """Costs as on a GPU, where a verify batch costs about one token, so auto drafts (as the tiny
    models on a CPU might not); the controller then learns from the steps it times."""
    session = draft_pair.session
    saved = session.costs, session._auto
    session.costs, session._auto = GPU_LIKE, None
    yield draft_pair
    session.costs, session._auto = saved


@pytest.mark.parametrize("mode", ["draft", "ngram", "hybrid", "auto"])
def test_every_mode_is_lossless_at_temperature_zero(gpu_like, mode):
    prompt = "one two three one two three one two three"
    plain, _, _, _ = run(gpu_like, prompt, use_draft=False, max_tokens=60)
    spec, _, stats, steps = run(gpu_like, prompt, use_draft=True, mode=mode, max_tokens=60, draft_max=6)
    assert spec == plain
    assert stats.steps == len(steps) - 1
    assert stats.drafted > 0 and max(s.drafted for s in steps) <= 6


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
            pair.generation([1], settings(), mode="draft")
    finally:
        pair.close()


def test_draft_p_min_stops_unsure_drafts_but_never_below_draft_min(draft_pair):
    _, _, loose, loose_steps = run(draft_pair, "the answer is", use_draft=True, max_tokens=60, draft_max=6)
    _, _, strict, strict_steps = run(
        draft_pair, "the answer is", use_draft=True, max_tokens=60, draft_max=6, draft_p_min=0.99
    )
    _, _, floor, floor_steps = run(
        draft_pair, "the answer is", use_draft=True, max_tokens=60, draft_max=6, draft_p_min=0.99, draft_min=2
    )
    assert strict.drafted < loose.drafted
    assert any(s.drafted < 2 for s in strict_steps[1:])  # p_min alone cuts drafts short
    # draft_min: every step with room for two draft tokens drafts at least two.
    assert all(s.drafted >= 2 for s in floor_steps[1:-1]) and floor.drafted > strict.drafted


def test_auto_estimates_carry_over_between_generations(draft_pair):
    first = draft_pair.generation(draft_pair.prompt_tokens("carry", chat=False), settings(max_tokens=20), mode="auto")
    list(first.run())
    controller = first.policy.controller
    steps_after_first = controller.steps
    second = draft_pair.generation(draft_pair.prompt_tokens("over", chat=False), settings(max_tokens=20), mode="auto")
    assert second.policy.controller is controller
    list(second.run())
    assert controller.steps > steps_after_first > 0


@pytest.mark.parametrize("mode", ["ngram", "hybrid", "auto"])
@pytest.mark.slow
def test_sampled_first_two_tokens_follow_the_target_distribution_in_every_mode(close_pair, mode):
    """The chi-square test above, for the drafters other than the draft model: prompt lookup's
    proposals are deterministic (q a point mass), hybrid mixes both, and auto picks per step. The
    prompt holds every printable character, so the first token is usually found in it and the
    lookup drafts the token that followed it."""
    prompt = close_pair.prompt_tokens("".join(chr(c) for c in range(33, 127)), chat=False)
    session = close_pair.session
    saved = session.costs, session._auto

    def afresh() -> None:  # auto starts afresh from GPU-like costs every run: it drafts, then learns
        session.costs, session._auto = GPU_LIKE, None

    try:
        chi2, drafted, detail = sampled_fit(close_pair, prompt, mode, afresh)
    finally:
        session.costs, session._auto = saved
    assert drafted > RUNS // 10  # the drafter really proposed, in many runs
    assert chi2 < CHI2_999, detail


@pytest.fixture(scope="module")
def eos_pair(tiny_dir):
    """Target and draft whose `<|endoftext|>` comes where a known token would (conftest.family_pair):
    greedy answers end with it after a few tokens."""
    from conftest import FAMILY_PROMPT, family_pair

    found = family_pair(tiny_dir, "gpt2", "<|endoftext|>")
    pair = Pair(PairConfig(found.target, found.draft, ctx_size=512, threads=1))
    pair.session.costs = GPU_LIKE
    yield pair, FAMILY_PROMPT
    pair.close()


@pytest.mark.parametrize("mode", ["off", "draft", "ngram", "hybrid", "auto"])
def test_generation_stops_at_the_end_of_generation_token(eos_pair, mode):
    pair, prompt = eos_pair
    eos = pair.target_model.tokenize("<|endoftext|>", add_special=False, parse_special=True)[0]
    full, _, _, _ = run(pair, prompt, use_draft=True, mode="off", max_tokens=40)  # ignore_eos: runs past it
    end = full.index(eos)
    generation = pair.generation(
        pair.prompt_tokens(prompt, chat=False), settings(max_tokens=40, ignore_eos=False, draft_max=6), mode=mode
    )
    steps = list(generation.run())
    tokens = [t for s in steps for t in s.tokens]
    assert generation.stats.stop_reason == "eog" and steps[-1].finished == "eog"
    assert tokens == full[: end + 1]  # everything up to and including the end token, nothing after
    assert "<|endoftext|>" not in "".join(s.text for s in steps)  # the control token prints nothing


def test_an_empty_prompt_is_refused_and_leaves_the_caches_as_they_were(draft_pair):
    from specrun.errors import InputError

    before, _, _, _ = run(draft_pair, "steady", use_draft=True, max_tokens=20)
    cached = list(draft_pair.session.target_ctx.tokens[0])
    generation = draft_pair.generation([], settings(max_tokens=5), mode="draft")
    with pytest.raises(InputError, match="empty"):
        list(generation.run())
    assert draft_pair.session.target_ctx.tokens[0] == cached
    after, _, _, _ = run(draft_pair, "steady", use_draft=True, max_tokens=20)
    assert after == before


def test_the_cache_cannot_be_trimmed_below_zero_or_lose_step_with_its_mirror(tiny_target):
    model = Model(tiny_target)
    ctx = Context(model, n_ctx=128, n_threads=1)
    try:
        ctx.feed(0, [1, 2, 3], "none")
        with pytest.raises(ValueError):
            ctx.trim(0, -1)
        assert ctx.tokens[0] == [1, 2, 3]
        with pytest.raises(Exception, match="llama_decode failed"):
            ctx.feed(0, [4, model.n_vocab + 5], "last")  # an id the model lacks: llama.cpp refuses the batch
        assert ctx.tokens[0] == [1, 2, 3]
        assert np.allclose(ctx.feed(0, [4], "last"), fresh_logits(model, [1, 2, 3, 4], ctx), atol=2e-2)
        ctx.clear()
        assert ctx.tokens[0] == []
        assert np.allclose(ctx.feed(0, [1, 2, 3, 4], "last"), fresh_logits(model, [1, 2, 3, 4], ctx), atol=2e-2)
    finally:
        ctx.close()
        model.close()


def test_all_logits_span_several_batches(tiny_target):
    model = Model(tiny_target)
    ctx = Context(model, n_ctx=256, n_threads=1, n_batch=32)
    try:
        tokens = [(7 * i) % 250 + 1 for i in range(80)]
        rows = ctx.feed(0, tokens, "all")
        assert rows.shape == (80, model.n_vocab) and ctx.tokens[0] == tokens
        # Chunked or not, each row is that position's logits (to f16 KV-cache rounding).
        assert np.allclose(rows[-1], fresh_logits(model, tokens, ctx), atol=5e-2)
        assert np.allclose(rows[40], fresh_logits(model, tokens[:41], ctx), atol=5e-2)
        assert not np.allclose(rows[40], rows[41], atol=0.5)
    finally:
        ctx.close()
        model.close()


@pytest.mark.parametrize("cap", [2, 5])
def test_draft_max_caps_auto_like_every_other_mode(gpu_like, cap):
    prompt = "abc abc abc abc abc abc abc abc abc abc"
    _, _, stats, steps = run(gpu_like, prompt, use_draft=True, mode="auto", max_tokens=60, draft_max=cap)
    assert stats.drafted > 0 and max(s.drafted for s in steps) <= cap
    assert gpu_like.session.engine.policy.controller.k_max == cap
    assert stats.policy["drafters"]["ngram"]["acceptance_by_position"].__len__() == cap


def test_auto_caps_at_its_own_default_without_draft_max(gpu_like):
    from specrun import defaults

    auto = gpu_like.generation([1], GenerationSettings(max_tokens=10, sampling=GREEDY, seed=1), mode="auto")
    assert auto.policy.controller.k_max == defaults.AUTO_K_MAX
    fixed = gpu_like.generation([1], GenerationSettings(max_tokens=10, sampling=GREEDY, seed=1), mode="draft")
    assert fixed.policy.k_max == defaults.DRAFT_MAX


def test_auto_never_reads_the_prompt_into_the_draft_model_at_prefill(gpu_like):
    """Time to first token is plain decoding's under auto: the draft model catches up only when
    picked. The fixed draft mode reads the prompt into it alongside the target's prefill."""
    prompt = gpu_like.prompt_tokens("the answer is", chat=False)
    draft_ctx = gpu_like.session.draft_ctx
    for mode, read_at_prefill in (("auto", False), ("draft", True)):
        gpu_like.session.reset()
        generation = gpu_like.generation(prompt, settings(max_tokens=40), mode=mode)
        run = generation.run()
        next(run)  # the prefill and the first token
        assert (draft_ctx.tokens[0] == prompt) == read_at_prefill
        steps = list(run)
        if mode == "auto":
            assert any(s.drafter == "draft" for s in steps)  # picked later, and caught up then
            assert draft_ctx.common_prefix(0, prompt) == len(prompt)


def test_common_prefix_finds_the_first_difference_wherever_it_lies():
    """Lists are compared in slices; the answer is the item-by-item one for every position of the
    first difference (none, in the last 64 items, before them), lengths and sequence types."""
    rng = random.Random(5)
    for _ in range(400):
        a = [rng.randrange(50) for _ in range(rng.randrange(0, 300))]
        b = list(a) + [rng.randrange(50) for _ in range(rng.randrange(0, 5))]
        if a and rng.random() < 0.7:
            i = rng.randrange(len(a))
            b[i] = a[i] + 1
        expected = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        assert common_prefix(a, b) == common_prefix(b, a) == expected
        assert common_prefix(tuple(a), b) == common_prefix(a, tuple(b)) == expected
