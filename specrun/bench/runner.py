"""Side-by-side measurement of plain and speculative decoding, in one process on the same contexts.

The method, in the order it runs: every configuration is loaded and checked before anything is
timed; warm-up runs; a short calibration of the raw decode costs the cost model needs; then
`runs` repetitions in which the configurations of each prompt run back to back (A B, then B A, …), so
drift on a noisy machine hits all of them alike. Every run starts from empty KV caches, so each
one prefills its prompt and times to first token compare. Seeds are fixed: prompt i uses seed + i
in every configuration and repetition. A prompt with a JSON schema constrains every configuration's
runs, plain decoding's included, and each answer is checked against the schema afterwards.

This module runs and checks; `bench_report` turns the records into the document users read.
Nothing here imports the CLI, so a script can benchmark a Pair directly.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from .. import defaults
from ..engine import identity
from ..engine.auto.cost_model import Costs
from ..engine.auto.estimates import CostCurve
from ..engine.constraint import Constraint
from ..engine.identity import IdentityCheck, rank, tolerance_from_noise
from ..engine.sequence import GenerationSettings
from ..engine.stats import Stats
from ..engine.verify import SyntheticAcceptance
from ..errors import InputError
from .prompts import BenchPrompt

WARMUP_TOKENS = 16  # tokens per warm-up run: enough to touch every weight and code path
CALIBRATION_REPS = defaults.CALIBRATION_REPS


@dataclass(frozen=True)
class Config:
    """One configuration: a speculation mode, its K (draft_max) and a temperature; `synthetic` an
    acceptance that replaces verification (verify.SyntheticAcceptance): the pipeline's speed at that
    acceptance, not the model's output; `predicted`: each prompt's last code block (the file an edit
    starts from) is also its predicted output."""

    mode: str
    draft_max: int = 0
    temperature: float = 0.0
    synthetic: float | None = None
    predicted: bool = False

    @property
    def plain(self) -> bool:
        return self.mode == defaults.OFF

    @property
    def id(self) -> str:
        k = "" if self.plain else f"-k{self.draft_max}"
        synthetic = "" if self.synthetic is None else f"-synthetic{self.synthetic:g}"
        predicted = "-predicted" if self.predicted else ""
        return f"{self.mode}{k}-t{self.temperature:g}{synthetic}{predicted}"

    def label(self, with_temperature: bool = False) -> str:
        text = "plain" if self.plain else f"{self.mode} K={self.draft_max}"
        if self.synthetic is not None:
            text += f" synthetic {self.synthetic:g}"
        if self.predicted:
            text += " +prediction"
        return f"{text} T={self.temperature:g}" if with_temperature else text

    def verifier(self, seed: int) -> SyntheticAcceptance | None:
        """The synthetic acceptance rule for one run (seeded by the run's seed), or None: verify."""
        return None if self.synthetic is None else SyntheticAcceptance(self.synthetic, seed)

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "label": self.label(),
            "mode": self.mode,
            "draft_max": self.draft_max if not self.plain else 0,
            "temperature": self.temperature,
            "synthetic_acceptance": self.synthetic,
            "predicted": self.predicted,
        }


def configurations(
    modes: Sequence[str],
    draft_maxes: Sequence[int] | None,
    temperatures: Sequence[float],
    recommended_k: int | None = None,
    synthetic: Sequence[float] | None = None,
    predict: bool = False,
) -> list[Config]:
    """Plain decoding plus every (mode, K) per temperature. Plain is always included: every speedup
    is measured against plain decoding from the same run. K is the most draft tokens per step in
    every mode; without `draft_maxes` each mode gets its default (defaults.draft_max_for: the
    pair's recommended K in the fixed modes, auto's own cap under auto). With `synthetic`
    acceptances every speculative configuration runs once per acceptance instead, its drafts
    accepted by that rate rather than by the target (plain decoding is still the baseline). With
    `predict` every speculative configuration also runs with each prompt's prediction."""
    if not temperatures:
        raise InputError("no temperature given", "pass --temperature 0 (or a list such as 0,0.8)")
    if any(t < 0 for t in temperatures):
        raise InputError("temperatures must be 0 or more", "pass --temperature 0,0.8")
    spec_modes = [m for m in dict.fromkeys(modes) if m != "off"]
    if synthetic is not None and (not synthetic or any(not 0.0 <= p <= 1.0 for p in synthetic)):
        raise InputError(
            "--synthetic-acceptance values must lie between 0 and 1", "pass e.g. --synthetic-acceptance 0.6,0.8,0.9"
        )
    if synthetic is not None and not spec_modes:
        raise InputError(
            "--synthetic-acceptance needs a speculative mode", "pass --spec draft (or another mode besides off)"
        )
    rates: list[float | None] = list(dict.fromkeys(synthetic)) if synthetic is not None else [None]
    if spec_modes and draft_maxes is not None and (not draft_maxes or any(k < 1 for k in draft_maxes)):
        raise InputError("--draft-max values must be 1 or more", "K = 0 is plain decoding; use --spec off for it")

    def ks(mode: str) -> list[int]:
        if draft_maxes is not None:
            return list(dict.fromkeys(draft_maxes))
        return [defaults.draft_max_for(mode, None, recommended_k) or defaults.AUTO_K_MAX]

    out: list[Config] = []
    for t in dict.fromkeys(temperatures):
        out.append(Config("off", 0, t))
        out.extend(
            Config(m, k, t, p, predicted)
            for m in spec_modes
            for k in ks(m)
            for p in rates
            for predicted in ((False, True) if predict else (False,))
        )
    return out


@dataclass(frozen=True)
class BenchSettings:
    """What every run shares: repetitions, warm-up rounds, and the generation settings each run
    starts from (its seed the base seed; each configuration sets K and the temperature)."""

    runs: int = 3
    warmup: int = 1
    base: GenerationSettings = field(
        default_factory=lambda: GenerationSettings(max_tokens=defaults.BENCH_MAX_TOKENS, seed=0)
    )

    @property
    def max_tokens(self) -> int:
        return self.base.max_tokens

    def generation(
        self,
        config: Config,
        prompt_index: int,
        max_tokens: int | None = None,
        constraint: Constraint | None = None,
    ) -> GenerationSettings:
        """Settings for one run: the prompt's fixed seed and constraint, the configuration's K and
        temperature. A synthetic configuration runs unconstrained: its tokens are not the model's,
        so no constraint could follow them."""
        if config.synthetic is not None:
            constraint = None
        return replace(
            self.base,
            max_tokens=self.base.max_tokens if max_tokens is None else max_tokens,
            sampling=replace(self.base.sampling, temperature=config.temperature),
            seed=(self.base.seed or 0) + prompt_index,
            draft_max=0 if config.plain else config.draft_max,
            constraint=constraint,
        )

    def to_dict(self) -> dict:
        """The shared settings, flat, as the JSON document records them."""
        base, sampling = self.base, self.base.sampling
        return {
            "runs": self.runs,
            "warmup": self.warmup,
            "max_tokens": base.max_tokens,
            "seed": base.seed or 0,
            "ignore_eos": base.ignore_eos,
            "draft_min": base.draft_min,
            "draft_p_min": base.draft_p_min,
            "ngram_min": base.ngram_min,
            "ngram_max": base.ngram_max,
            "top_k": sampling.top_k,
            "top_p": sampling.top_p,
            "min_p": sampling.min_p,
        }


@dataclass(frozen=True)
class StepSample:
    """One target pass as the loop reported it."""

    drafter: str | None
    k: int
    drafted: int
    accepted: int
    draft_s: float
    verify_s: float
    lead: int = 0  # rows a constraint's forced and likely tokens took ahead of the draft
    lead_kept: int = 0  # of them, those kept


@dataclass(frozen=True)
class SchemaCheck:
    """A constrained answer parsed as JSON and validated against its prompt's schema."""

    verdict: str  # VALID, INVALID, or CUT_OFF: the answer stopped at max tokens before it closed (not judged)
    error: str | None = None  # why it is invalid, one line
    validated: bool = True  # False: parsed only (jsonschema is not installed, or could not follow the schema)

    def to_dict(self) -> dict:
        return {"verdict": self.verdict, "error": self.error, "validated": self.validated}


VALID, INVALID, CUT_OFF = "valid", "invalid", "cut off"


@dataclass
class RunRecord:
    """One measured generation."""

    rep: int
    prompt: int
    config: int
    tokens: list[int]
    text: str
    stats: Stats
    steps: list[StepSample] = field(default_factory=list)
    identity: IdentityCheck | None = None  # temperature 0: every token against the target's own logits
    schema_check: SchemaCheck | None = None  # a constrained prompt's answer against its schema


@dataclass(frozen=True)
class Calibration:
    """Raw decode costs at the length of a real prompt: what the cost model is fed."""

    context_tokens: int
    plain_s: float
    verify_s: dict[int, float]
    draft_token_s: float | None
    mtp_token_s: float | None = None  # one pass of the head (MTP, EAGLE-3: one row; DFlash: a block of two)
    passes: dict[str, dict[int, float]] = field(default_factory=dict)  # per drafter running passes, seconds by rows
    blocks: frozenset[str] = frozenset()  # those of them that draft a block per pass

    def costs(self) -> Costs:
        """The cost model's costs as auto builds them: target passes by batch size, and each
        pass-running drafter's passes by rows."""
        passes = {name: CostCurve.of(seconds) for name, seconds in self.passes.items()}
        return Costs(CostCurve.of({1: self.plain_s, **self.verify_s}), passes, blocks=self.blocks)

    def to_dict(self) -> dict:
        return {
            "context_tokens": self.context_tokens,
            "plain_decode_s": round(self.plain_s, 6),
            "verify_s": {str(k): round(v, 6) for k, v in sorted(self.verify_s.items())},
            "draft_token_s": None if self.draft_token_s is None else round(self.draft_token_s, 6),
            "mtp_token_s": None if self.mtp_token_s is None else round(self.mtp_token_s, 6),
            "mtp_cost_ratio": round(self.mtp_token_s / self.plain_s, 4) if self.mtp_token_s and self.plain_s else None,
            "reps": CALIBRATION_REPS,
        }


@dataclass
class Check:
    """A temperature-0 speculative run compared with plain decoding of the same prompt and repetition."""

    rep: int
    prompt: int
    config: int
    position: int | None  # first differing token; None: identical
    plain_token: int | None = None
    spec_token: int | None = None
    detail: dict | None = None  # both tokens ranked by the target's logits at `position` (see `divergence_detail`)
    plain_record: int = -1  # index of the plain run compared with


class BenchEngine(Protocol):
    """What the bench needs from models; PairEngine (pair_engine.py) is the real one, tests plant fakes."""

    n_ctx: int
    threads: int

    def prompt_tokens(self, prompt: BenchPrompt) -> list[int]: ...

    def prediction_tokens(self, prompt: BenchPrompt) -> list[int] | None: ...

    def check(self, config: Config, generation: GenerationSettings) -> None: ...

    def run(
        self, tokens: list[int], config: Config, generation: GenerationSettings, prediction: list[int] | None = None
    ) -> tuple[list[int], str, Stats, list[StepSample]]: ...

    def calibrate(self, tokens: list[int], batch_sizes: Sequence[int], reps: int) -> Calibration: ...

    def output_rows(self, prompt: list[int], output: list[int], constraint: Constraint | None = None) -> np.ndarray: ...

    def logit_noise(self, tokens: list[int]) -> float: ...

    def output_noise(self, prompt: list[int], output: list[int]) -> float: ...

    def piece(self, token: int) -> str: ...


Progress = Callable[[str, int, int, str], None]  # phase, done, total, what is running


@dataclass
class BenchResult:
    """Everything measured; `bench_report.document` renders it."""

    prompts: list[BenchPrompt]
    configs: list[Config]
    settings: BenchSettings
    prompt_lengths: list[int]
    records: list[RunRecord]
    calibration: Calibration | None
    checks: list[Check]
    wall_s: float = 0.0
    measure_s: float = 0.0  # wall seconds of the measured runs
    cpu_s: float = 0.0  # process CPU seconds (all threads) over the measured runs
    threads: int = 1


def schedule(n_prompts: int, n_configs: int, runs: int) -> list[tuple[int, int, int]]:
    """(repetition, prompt, configuration) in running order: the configurations of one prompt back
    to back, repeated `runs` times over all prompts, in reverse order every other repetition
    (A B, B A, A B …): a drift within a prompt's runs, or a cost the first run of a prompt pays,
    then falls on every configuration alike instead of always on the same one."""
    configs = list(range(n_configs))
    return [
        (r, p, c) for r in range(runs) for p in range(n_prompts) for c in (configs if r % 2 == 0 else configs[::-1])
    ]


def first_divergence(expected: Sequence[int], actual: Sequence[int]) -> int | None:
    """Index of the first token that differs (a length difference counts at the shorter end); None if equal."""
    for i, (a, b) in enumerate(zip(expected, actual)):
        if a != b:
            return i
    return None if len(expected) == len(actual) else min(len(expected), len(actual))


def divergence_detail(
    row: np.ndarray | None, plain_token: int | None, spec_token: int | None, tolerance: float
) -> dict:
    """Both tokens at a divergence, ranked by the target's logits there (the prefix is shared, so
    one row serves both); a near-tie when each is within `tolerance` of the argmax."""
    ranked = {
        name: (rank(row, token) if row is not None and token is not None else None)
        for name, token in (("plain", plain_token), ("spec", spec_token))
    }
    near = all(c is not None and c.gap <= tolerance for c in ranked.values())
    return {
        **{name: (c.to_dict() if c else None) for name, c in ranked.items()},
        "near_tie": near,
        "tolerance": round(tolerance, 4),
    }


def compare(records: Sequence[RunRecord], configs: Sequence[Config]) -> list[Check]:
    """Every temperature-0 speculative run against the plain run of the same prompt and repetition."""
    plain = {
        (r.rep, r.prompt): i
        for i, r in enumerate(records)
        if configs[r.config].plain and configs[r.config].temperature == 0
    }
    checks = []
    for record in records:
        config = configs[record.config]
        if (
            config.plain
            or config.temperature != 0
            or config.synthetic is not None
            or (record.rep, record.prompt) not in plain
        ):
            continue
        base = records[plain[(record.rep, record.prompt)]]
        pos = first_divergence(base.tokens, record.tokens)
        check = Check(record.rep, record.prompt, record.config, pos, plain_record=plain[(record.rep, record.prompt)])
        if pos is not None:
            check.plain_token = base.tokens[pos] if pos < len(base.tokens) else None
            check.spec_token = record.tokens[pos] if pos < len(record.tokens) else None
        checks.append(check)
    return checks


def check_answer(text: str, schema: dict, cut_off: bool) -> SchemaCheck:
    """An answer parsed as JSON and validated against `schema` with jsonschema (parsed only when
    jsonschema is not installed). One that stopped at max tokens before it parsed was cut off: the
    budget was short, the answer not wrong."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        if cut_off:
            return SchemaCheck(CUT_OFF)
        return SchemaCheck(INVALID, f"not JSON: {error.msg} at line {error.lineno} column {error.colno}")
    try:
        import jsonschema
    except ImportError:
        return SchemaCheck(VALID, validated=False)
    try:
        validator = jsonschema.validators.validator_for(schema)(schema)
        found = jsonschema.exceptions.best_match(validator.iter_errors(value))
    except Exception as error:  # a schema jsonschema cannot follow (an unresolvable $ref): parsed only
        return SchemaCheck(VALID, f"not validated: {str(error).splitlines()[0][:200]}", validated=False)
    if found is None:
        return SchemaCheck(VALID)
    where = "/".join(map(str, found.absolute_path))
    return SchemaCheck(INVALID, f"{'at /' + where + ': ' if where else ''}{found.message}"[:300])


def check_answers(records: Sequence[RunRecord], prompts: Sequence[BenchPrompt]) -> None:
    """Every answer of a prompt with a schema, checked against it (`RunRecord.schema_check`)."""
    schemas = {i: p.schema for i, p in enumerate(prompts) if p.constraint is not None}
    for record in records:
        schema = schemas.get(record.prompt)
        if schema is not None:
            cut_off = record.stats.stop_reason in ("max_tokens", "context")
            record.schema_check = check_answer(record.text, schema, cut_off)


def verify_identity(
    checks: Sequence[Check],
    records: Sequence[RunRecord],
    configs: Sequence[Config],
    prompt_tokens: Sequence[list[int]],
    engine: BenchEngine,
    constraints: Sequence[Constraint | None] | None = None,
) -> None:
    """Check every temperature-0 run, plain decoding included, token by token against the target's
    own logits from one batched pass over prompt + output (engine.identity), and rank both tokens
    at each divergence from plain decoding. Identical outputs are checked once. A constrained
    prompt's outputs are judged on the logits the constraint allows at each position (`constraints`,
    by prompt), as constrained decoding chose from them.

    The tolerance is twice the measured arithmetic noise (how far a token's logits move between a
    pass of its own and a batch, on this machine), at least identity.NEAR_TIE_LOGITS: on the
    prompt's tail, and for an output with a finding beyond that, along the output itself."""
    zero = [
        i for i, r in enumerate(records) if configs[r.config].temperature == 0 and configs[r.config].synthetic is None
    ]
    if not zero:
        return
    tolerance = tolerance_from_noise(engine.logit_noise(list(prompt_tokens[records[zero[0]].prompt])))
    outputs: dict[tuple[int, tuple[int, ...]], list[int]] = {}
    for i in sorted(zero, key=lambda i: records[i].prompt):  # one prompt's outputs share its prefill
        outputs.setdefault((records[i].prompt, tuple(records[i].tokens)), []).append(i)
    diverged: dict[int, list[Check]] = {}
    for check in checks:
        if check.position is not None:
            diverged.setdefault(check.plain_record, []).append(check)
    for (p, output), indices in outputs.items():
        prompt = list(prompt_tokens[p])
        rows = engine.output_rows(prompt, list(output), constraints[p] if constraints else None)
        result = identity.judge_rows(
            rows, output, tolerance, lambda prompt=prompt, output=output: engine.output_noise(prompt, list(output))
        )
        for i in indices:
            records[i].identity = result
            for check in diverged.pop(i, []):
                row = rows[check.position] if check.position < len(rows) else None
                check.detail = divergence_detail(row, check.plain_token, check.spec_token, result.tolerance)


def calibration_sizes(configs: Sequence[Config]) -> list[int]:
    """Target batch sizes to time: 1 (plain) through K + 1 (a full verification) for every fixed K
    swept. `auto` may verify anything up to its cap, so it adds small sizes and a sparse ladder up
    to the cap (interpolated between)."""
    fixed = max((c.draft_max for c in configs if not c.plain and not defaults.MODES[c.mode].chooses), default=0)
    sizes = set(range(1, fixed + 2))
    for cap in {c.draft_max + 1 for c in configs if defaults.MODES[c.mode].chooses}:
        sizes.update(range(1, min(cap, 5) + 1))
        size = 4
        while size < cap:
            sizes.add(size + 1)
            size *= 2
        sizes.add(cap)
    return sorted(sizes)


def run_bench(
    engine: BenchEngine,
    prompts: Sequence[BenchPrompt],
    configs: Sequence[Config],
    settings: BenchSettings,
    progress: Progress | None = None,
) -> BenchResult:
    """Warm up, calibrate, run the schedule, compare outputs; see the module docstring."""
    progress = progress or (lambda *_: None)
    started = time.perf_counter()
    tokens = [engine.prompt_tokens(p) for p in prompts]
    predicted = [engine.prediction_tokens(p) if any(c.predicted for c in configs) else None for p in prompts]
    _check_fits(engine, prompts, tokens, configs, settings)
    for config in configs:
        engine.check(config, settings.generation(config, 0))
    order = schedule(len(prompts), len(configs), settings.runs)
    total = settings.warmup * len(configs) + 1 + len(order)
    done = 0
    shortest = min(range(len(prompts)), key=lambda i: len(tokens[i]))
    for _ in range(settings.warmup):
        for config in configs:
            progress("warm-up", done, total, config.label(True))
            warm = settings.generation(
                config, shortest, min(settings.max_tokens, WARMUP_TOKENS), prompts[shortest].constraint
            )
            engine.run(tokens[shortest], config, warm)
            done += 1
    progress("calibration", done, total, "decode costs")
    calibration = engine.calibrate(tokens[shortest], calibration_sizes(configs), CALIBRATION_REPS)
    done += 1
    records: list[RunRecord] = []
    cpu_start, measure_start = _cpu_seconds(), time.perf_counter()
    for rep, p, c in order:
        progress("run", done, total, f"run {rep + 1}/{settings.runs} · {prompts[p].id} · {configs[c].label(True)}")
        prediction = predicted[p] if configs[c].predicted else None
        generation = settings.generation(configs[c], p, constraint=prompts[p].constraint)
        out, text, stats, steps = engine.run(tokens[p], configs[c], generation, prediction)
        records.append(RunRecord(rep, p, c, out, text, stats, steps))
        done += 1
    cpu_s, measure_s = _cpu_seconds() - cpu_start, time.perf_counter() - measure_start
    progress("check", done, total, "comparing outputs")
    checks = compare(records, configs)
    verify_identity(checks, records, configs, tokens, engine, [p.constraint for p in prompts])
    check_answers(records, prompts)
    progress("done", total, total, "")
    return BenchResult(
        list(prompts),
        list(configs),
        settings,
        [len(t) for t in tokens],
        records,
        calibration,
        checks,
        time.perf_counter() - started,
        measure_s,
        cpu_s,
        engine.threads,
    )


def _cpu_seconds() -> float:
    """CPU time of this process, every thread included (user + system)."""
    t = os.times()
    return t.user + t.system


def _check_fits(
    engine: BenchEngine,
    prompts: Sequence[BenchPrompt],
    tokens: Sequence[list[int]],
    configs: Sequence[Config],
    settings: BenchSettings,
) -> None:
    """A run that hits the end of the context would stop early and skew its figures: refuse up front."""
    k_max = max((c.draft_max for c in configs), default=0)
    for prompt, ids in zip(prompts, tokens):
        need = len(ids) + settings.max_tokens + k_max + 1
        if need > engine.n_ctx:
            raise InputError(
                f"prompt {prompt.id} needs {need} tokens of context ({len(ids)} prompt + {settings.max_tokens} "
                "generated + K) "
                f"but the context holds {engine.n_ctx}",
                f"raise --ctx-size to {need} or lower --max-tokens",
            )
