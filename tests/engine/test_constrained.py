"""Constrained answers: every answer meets its constraint in every mode, greedy answers equal
constrained plain decoding's, sampled ones follow the constrained target distribution, and forced
tokens lead the drafts."""

from __future__ import annotations

import json
import re

import jsonschema
import numpy as np
import pytest
from test_engine import CHI2_999, GPU_LIKE, RUNS, fresh_logits

from specrun.engine import constraint
from specrun.engine.constrained import verify_constrained
from specrun.engine.constraint import ConstraintError
from specrun.engine.matcher import Matcher
from specrun.engine.sampling import Dist, SamplingParams, make_rng
from specrun.engine.sequence import GenerationSettings
from specrun.runtime.pair import Pair, PairConfig

MODES = ["off", "ngram", "draft", "hybrid", "auto"]
CHI2_999_11 = 31.26  # 99.9% quantile at 11 degrees of freedom


# -- verification against a stand-in matcher -------------------------------------------------------


class StandIn:
    """A matcher over a tiny vocabulary whose allowed tokens depend on how many were consumed."""

    def __init__(self, allowed_at: list[set[int]], n_vocab: int = 6, stop_after: int | None = None):
        self.allowed_at, self.n_vocab, self.stop_after = allowed_at, n_vocab, stop_after
        self.consumed: list[int] = []
        self.masked_rows = 0

    def _now(self) -> set[int]:
        return self.allowed_at[min(len(self.consumed), len(self.allowed_at) - 1)]

    @property
    def stopped(self) -> bool:
        return self.stop_after is not None and len(self.consumed) >= self.stop_after

    def allows(self, token: int) -> bool:
        return token in self._now()

    def allowed(self) -> np.ndarray:
        mask = np.zeros(self.n_vocab, dtype=bool)
        mask[list(self._now())] = True
        return mask

    def consume(self, tokens) -> None:
        for token in tokens:
            assert token in self._now(), (token, self._now())
            self.consumed.append(token)


def rows(*values) -> np.ndarray:
    return np.array(values, dtype=np.float32)


GREEDY = SamplingParams(temperature=0.0)


def test_greedy_takes_the_best_allowed_token_where_the_best_is_refused():
    matcher = StandIn([{1, 2}, {3, 4}])
    block = rows([0, 1, 5, 0, 0, 9], [0, 0, 0, 2, 1, 0])  # token 5 is best, refused; 2 is the best allowed
    verdict = verify_constrained([2], None, block, GREEDY, make_rng(0), matcher)
    assert verdict.accepted == 1 and verdict.tokens == [2, 3]
    assert matcher.consumed == [2, 3] and matcher.masked_rows == 1


def test_a_draft_token_the_target_prefers_but_the_constraint_refuses_is_rejected():
    matcher = StandIn([{1, 2}])
    verdict = verify_constrained([5], None, rows([0, 1, 2, 0, 0, 9], [0] * 6), GREEDY, make_rng(0), matcher)
    assert verdict.tokens == [2] and verdict.accepted == 0


def test_forced_tokens_are_kept_without_their_rows():
    matcher = StandIn([{4}, {1}, {1, 2}])
    after = rows([0, 0, 3, 0, 0, 0])  # only the row after the forced tokens: theirs are never read
    verdict = verify_constrained([4, 1], None, after, GREEDY, make_rng(0), matcher, forced=2)
    assert verdict.tokens == [4, 1, 2] and verdict.accepted == 2
    matcher = StandIn([{4}, {1, 3}, {5}])
    verdict = verify_constrained(
        [4, 3], None, rows([0, 9, 0, 1, 0, 0], [0] * 6), GREEDY, make_rng(0), matcher, forced=1
    )
    assert verdict.tokens == [4, 1] and verdict.accepted == 1  # 3 was drafted after the forced 4, and refused


def test_the_answer_ends_at_the_token_that_completes_the_constraint():
    matcher = StandIn([{1}, {2}, {0}], stop_after=2)
    block = rows([0, 5, 0, 0, 0, 0], [0, 0, 5, 0, 0, 0], [5, 0, 0, 0, 0, 0], [5, 0, 0, 0, 0, 0])
    verdict = verify_constrained([1, 2, 0], None, block, GREEDY, make_rng(0), matcher)
    assert verdict.tokens == [1, 2] and verdict.accepted == 1  # 2 comes as the target's own token


SAMPLING = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
ROW = [0.3, 1.0, 0.2, -0.4, 0.8, 0.5]
ALLOWED = {1, 2, 3}
Q = Dist.of(np.arange(6), np.array([0.05, 0.1, 0.35, 0.2, 0.2, 0.1]))  # mass on refused tokens too


def first_token_counts(q_in_rule: Dist) -> tuple[dict, dict]:
    """First tokens of RUNS constrained verifications of one token drawn from Q (the drafter's
    distribution), with `q_in_rule` as the q the accept rule and residual use."""
    exact_row = np.where(np.isin(np.arange(6), list(ALLOWED)), np.array(ROW), -np.inf)
    weights = np.exp(exact_row - exact_row.max())
    exact = {t: float(weights[t] / weights.sum()) for t in ALLOWED}
    counts = dict.fromkeys(ALLOWED, 0)
    draw = make_rng(7)
    for seed in range(RUNS * 2):
        rng = make_rng(seed)
        token = Q.sample(draw)
        verdict = verify_constrained(
            [token], [q_in_rule], rows(ROW, ROW), SAMPLING, rng, StandIn([ALLOWED, ALLOWED], n_vocab=6)
        )
        counts[verdict.tokens[0]] += 1
    return counts, exact


def chi2(counts: dict, exact: dict) -> float:
    n = sum(counts.values())
    return sum((counts[t] - n * p) ** 2 / (n * p) for t, p in exact.items())


def test_sampled_drafts_keep_the_constrained_distribution():
    counts, exact = first_token_counts(Q)
    assert chi2(counts, exact) < CHI2_999, (counts, exact)


def test_the_chi_square_catches_a_q_that_is_not_what_the_draft_was_drawn_from():
    restricted = Dist.of(np.array(sorted(ALLOWED)), np.array([Q.prob(t) for t in sorted(ALLOWED)]))
    counts, exact = first_token_counts(restricted)
    assert chi2(counts, exact) > CHI2_999, (counts, exact)


# -- bad constraints -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, fragment",
    [
        (lambda: constraint.json_schema({"type": "strin"}), "strin"),
        (lambda: constraint.json_schema("{"), "not valid JSON"),
        (lambda: constraint.json_schema([1]), "must be a JSON object"),
        (lambda: constraint.json_schema(nested(40)), "nests deeper"),
        (lambda: constraint.json_schema({"description": "x" * 200_000}), "characters"),
        (lambda: constraint.regex("("), "regex"),
        (lambda: constraint.grammar("root ::= ("), "GBNF"),
        (lambda: constraint.grammar("start: missing_rule"), "grammar"),
    ],
)
def test_a_bad_constraint_is_one_line_naming_the_problem(make, fragment):
    with pytest.raises(ConstraintError) as caught:
        make()
    line = caught.value.one_line()
    assert fragment in line and "\n" not in line


def nested(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


# -- through the engine ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pair(tiny_target, tiny_dir):
    from tiny_models import write_tiny_gguf

    draft = write_tiny_gguf(tiny_dir / "constrained-draft.gguf", seed=0, noise=0.1, name="tiny-close")
    loaded = Pair(PairConfig(tiny_target, draft, ctx_size=512, threads=1))
    loaded.session.costs = GPU_LIKE  # auto drafts as it would where a batch costs about one token
    yield loaded
    loaded.close()


def answer(pair: Pair, prompt: str, mode: str, made, **kw) -> tuple[str, list[int], object]:
    settings = GenerationSettings(
        **{"max_tokens": 120, "sampling": GREEDY, "draft_max": 6, "constraint": made, "seed": 1, **kw}
    )
    generation = pair.generation(pair.prompt_tokens(prompt, chat=False), settings, mode=mode)
    steps = list(generation.run())
    return "".join(s.text for s in steps), [t for s in steps for t in s.tokens], generation.stats


SCHEMAS = {
    "nested": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 6},
            "size": {"type": "integer", "minimum": 0, "maximum": 999},
            "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3},
            "owner": {
                "type": "object",
                "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 99}, "ok": {"type": "boolean"}},
                "required": ["id", "ok"],
                "additionalProperties": False,
            },
        },
        "required": ["name", "size", "tags", "owner"],
        "additionalProperties": False,
    },
    "optional": {
        "type": "object",
        "properties": {
            "kind": {"enum": ["alpha", "beta", "gamma"]},
            "score": {"type": "number", "minimum": 0, "maximum": 1},
            "note": {"type": "string", "maxLength": 5},
        },
        "required": ["kind"],
        "additionalProperties": False,
    },
    "list": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "minItems": 1, "maxItems": 4},
}


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [0.0, 0.8])
@pytest.mark.parametrize("name", list(SCHEMAS))
def test_every_answer_validates_against_its_schema_in_every_mode(pair, name, temperature):
    schema = SCHEMAS[name]
    made = constraint.json_schema(schema)
    answers = {}
    for mode in MODES:
        text, tokens, stats = answer(pair, "the record: ", mode, made, sampling=SamplingParams(temperature=temperature))
        assert stats.stop_reason in ("stop", "eog"), (mode, text)
        jsonschema.validate(json.loads(text), schema)
        answers[mode] = tokens
    if temperature == 0.0:
        assert all(tokens == answers["off"] for tokens in answers.values()), answers


@pytest.mark.parametrize("mode", MODES)
def test_greedy_constrained_answers_equal_constrained_plain_decoding(pair, mode):
    made = constraint.regex(r"[a-e]{2,6}( [a-e]{2,6}){3,8}\.")
    plain, plain_tokens, _ = answer(pair, "abc abd abe", "off", made)
    text, tokens, stats = answer(pair, "abc abd abe", mode, made)
    assert re.fullmatch(r"[a-e]{2,6}( [a-e]{2,6}){3,8}\.", text), text
    assert tokens == plain_tokens and text == plain


def test_forced_tokens_lead_the_drafts_and_are_counted(pair):
    made = constraint.json_schema(SCHEMAS["nested"])
    plain, plain_tokens, plain_stats = answer(pair, "record", "off", made)
    text, tokens, stats = answer(pair, "record", "ngram", made)
    assert tokens == plain_tokens
    assert plain_stats.forced_tokens == 0  # plain decoding reads every token from its own row
    assert stats.forced_tokens >= 8  # the keys and the punctuation around them
    assert stats.steps < plain_stats.steps


def test_a_matcher_refusing_the_grammar_against_the_vocabulary_is_a_constraint_error(pair):
    made = constraint.grammar('start: "a" start | "b"')
    matcher = Matcher(made, pair.target_model)  # a grammar that compiles is matched
    assert matcher.allows(pair.target_model.tokenize("a", add_special=False, parse_special=False)[0])


def exact_first_two(pair: Pair, prompt: list[int], sampling: SamplingParams, made) -> dict:
    """The constrained target's exact joint distribution of the first two tokens."""
    model = pair.target_model
    matcher = Matcher(made, model)

    def probs(tokens: list[int], mask: np.ndarray) -> np.ndarray:
        logits = np.where(mask, fresh_logits(model, tokens, pair.session.target_ctx), -np.inf)
        return sampling.probs(logits)

    p1 = probs(prompt, matcher.allowed())
    joint = {}
    for t1 in np.nonzero(p1)[0]:
        second = Matcher(made, model)
        second.consume([int(t1)])
        p2 = probs(prompt + [int(t1)], second.allowed())
        for t2 in np.nonzero(p2)[0]:
            joint[(int(t1), int(t2))] = p1[t1] * p2[t2]
    return joint


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["draft", "ngram"])
def test_constrained_sampling_follows_the_constrained_target_distribution(pair, mode):
    """The draft model's drafts are drawn from its own distribution restricted to what the
    constraint allows, and come with that q; prompt lookup's are deterministic: both keep the
    constrained target's distribution of the first two tokens (12 cells: 3 letters, then 4)."""
    sampling = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    made = constraint.regex(r"[a-c][a-d][a-z]*")
    prompt = pair.prompt_tokens("abacadbabbbcbdcacbcccdabacbd", chat=False)
    exact = exact_first_two(pair, prompt, sampling, made)
    counts, drafted = dict.fromkeys(exact, 0), 0
    for seed in range(RUNS):
        settings = GenerationSettings(max_tokens=3, sampling=sampling, seed=seed, draft_max=2, constraint=made)
        generation = pair.generation(prompt, settings, mode=mode)
        tokens = [t for step in generation.run() for t in step.tokens]
        counts[(tokens[0], tokens[1])] += 1
        drafted += generation.stats.drafted
    statistic = sum((counts[c] - RUNS * p) ** 2 / (RUNS * p) for c, p in exact.items())
    assert len(exact) == 12 and drafted > RUNS // 10
    assert statistic < CHI2_999_11, (statistic, counts, exact)


# -- the other drafters: MTP heads and drafts through text -------------------------------------------


def constrained_answers(pair: Pair, modes: list[str], temperature: float) -> dict[str, list[int]]:
    """Each mode's answer under the nested schema, checked to validate; the speculative modes must
    really have drafted."""
    made = constraint.json_schema(SCHEMAS["nested"])
    answers = {}
    for mode in modes:
        settings = GenerationSettings(
            max_tokens=120, sampling=SamplingParams(temperature=temperature), draft_max=4, constraint=made, seed=2
        )
        generation = pair.generation(pair.prompt_tokens("record: ", chat=False), settings, mode=mode)
        steps = list(generation.run())
        text = "".join(s.text for s in steps)
        jsonschema.validate(json.loads(text), SCHEMAS["nested"])
        assert mode == "off" or generation.stats.by_drafter.get(mode, {}).get("drafted", 0) > 0, mode
        answers[mode] = [t for s in steps for t in s.tokens]
    return answers


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_mtp_heads_draft_constrained_answers_that_validate(hybrid_mtp_target, temperature):
    loaded = Pair(PairConfig(hybrid_mtp_target, None, ctx_size=512, threads=1))
    try:
        answers = constrained_answers(loaded, ["off", "mtp"], temperature)
    finally:
        loaded.close()
    if temperature == 0.0:
        assert answers["mtp"] == answers["off"]


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_drafts_through_text_give_constrained_answers_that_validate(tiny_dir, temperature):
    from tiny_models import write_tiny_gguf

    target = write_tiny_gguf(tiny_dir / "constrained-text-target.gguf", vocab="gpt2", seed=0, name="tiny-bpe")
    draft = write_tiny_gguf(tiny_dir / "constrained-text-draft.gguf", vocab="spm", seed=3, name="tiny-spm")
    loaded = Pair(PairConfig(target, draft, ctx_size=512, threads=1))
    try:
        assert loaded.drafting == "text"
        answers = constrained_answers(loaded, ["off", "text"], temperature)
    finally:
        loaded.close()
    if temperature == 0.0:
        assert answers["text"] == answers["off"]


def test_a_guided_draft_draws_only_what_its_constraint_allows_and_advances_its_guide():
    from specrun.engine.drafting.depth import choose
    from specrun.engine.drafting.protocol import Draft, DraftRequest, DraftTuning
    from specrun.engine.shortlist import Shortlist

    sampling = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    guide = StandIn([{1, 3}, {0}])
    request = DraftRequest(0, [], 4, sampling, make_rng(0), guide)
    draft = Draft(q=[], confidence=[])
    token = choose(request, rows([5, 1, 0, 2, 9, 0])[0], draft, 1, DraftTuning())
    assert token in (1, 3) and guide.consumed == [token]
    assert set(draft.q[0].ids) == {1, 3}  # q is what the token was drawn from: the allowed ones
    cut = Shortlist(np.array([4, 5]), np.array([1.0, 2.0]))  # a shortlist with nothing allowed: the draft stops
    assert choose(request, cut, draft, 2, DraftTuning()) is None and draft.tokens == [token]
