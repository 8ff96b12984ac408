"""Benchmark records → the document users read: a row per (prompt, configuration), a row per
(category, configuration) plus an "all" row per configuration, the correctness check, the raw runs.

Figures, and why each is computed as it is:
- times (TTFT, decode tokens/s after the first token, total) are medians over the repetitions of a
  prompt; a category's are the median of its prompts' medians. `_min`/`_max` are always the
  extremes over every single run the row covers, so run-to-run noise stays visible;
- speedup is a configuration's median decode tokens/s over plain decoding's, for the same prompt and
  temperature from the same bench; a category's is the geometric mean over its prompts (ratios
  average geometrically). Its `_min`/`_max` pair each run with plain decoding's run of the same
  repetition and keep the extremes;
- acceptance is pooled over every run (accepted / drafted); α is the per-token acceptance the cost
  model needs (accepted / judged positions, see costmodel.alpha_from_steps);
- a row with `synthetic_acceptance` accepted its drafts at that rate instead of by the target
  (bench --synthetic-acceptance): its speed is the pipeline's at that acceptance, its output not
  the model's, so it is never checked against plain decoding (`identical` is None);
- predicted speedup applies the cost model to the steps the runs took, with the calibrated costs;
  efficiency = speedup / predicted;
- forced counts the tokens a prompt's schema forced ahead of the drafts (keys, brackets): certain
  tokens, in neither drafted nor accepted; invalid_answers counts the runs of schema prompts whose
  answer failed to parse or validate (None: no prompt of the row has a schema).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone

from ..engine.auto.cost_model import expected_tokens
from . import costmodel
from .prompts import ALL
from .runner import CUT_OFF, INVALID, VALID, BenchResult, Check, Config, RunRecord

SCHEMA = "specrun.bench/1"
CPU_SHARE_WARN = 0.8
SPREAD_WARN = 1.3

ROW_FIELDS = (
    "level",
    "category",
    "prompt_id",
    "prompts",
    "config",
    "label",
    "mode",
    "draft_max",
    "temperature",
    "synthetic_acceptance",
    "runs",
    "prompt_tokens",
    "generated_tokens",
    "ttft_s",
    "ttft_s_min",
    "ttft_s_max",
    "decode_tokens_per_s",
    "decode_tokens_per_s_min",
    "decode_tokens_per_s_max",
    "total_time_s",
    "total_time_s_min",
    "total_time_s_max",
    "speedup",
    "speedup_min",
    "speedup_max",
    "speedup_end_to_end",
    "acceptance_rate",
    "alpha",
    "mean_tokens_per_step",
    "expected_tokens_per_step",
    "acceptance_by_position",
    "drafted",
    "accepted",
    "forced",
    "steps",
    "draft_time_s",
    "verify_time_s",
    "host_ms_per_step",
    "predicted_speedup",
    "efficiency",
    "predicted_gpu_speedup",
    "identical",
    "diverged_prompts",
    "divergence_position",
    "violations",
    "invalid_answers",
    "flagged_runs",
)


def spread(values: Iterable[float | None]) -> tuple[float | None, float | None, float | None]:
    """(median, min, max) of the values that exist."""
    xs = [v for v in values if v is not None]
    if not xs:
        return None, None, None
    return statistics.median(xs), min(xs), max(xs)


def geomean(values: Iterable[float | None]) -> float | None:
    """Geometric mean of the positive values: the mean of ratios such as speedups."""
    xs = [v for v in values if v is not None and v > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


class Aggregator:
    """Groups the runs by prompt and configuration and computes each row."""

    def __init__(self, result: BenchResult):
        self.result = result
        self.configs = result.configs
        self.costs = result.calibration.costs() if result.calibration else None
        self.by_key: dict[tuple[int, int], list[RunRecord]] = {}
        for record in result.records:
            self.by_key.setdefault((record.prompt, record.config), []).append(record)
        self.checks: dict[tuple[int, int], list[Check]] = {}
        for check in result.checks:
            self.checks.setdefault((check.prompt, check.config), []).append(check)
        self.plain_index = {c.temperature: i for i, c in enumerate(self.configs) if c.plain}
        self.threads = max(result.threads, 1)
        self._prompt_rows: dict[tuple[int, int], dict] = {}

    # -- prompt level -----------------------------------------------------------------------

    def prompt_row(self, p: int, c: int) -> dict:
        """Medians over the repetitions of one prompt in one configuration."""
        if (p, c) in self._prompt_rows:
            return self._prompt_rows[(p, c)]
        config = self.configs[c]
        runs = sorted(self.by_key.get((p, c), []), key=lambda r: r.rep)
        plain = sorted(self.by_key.get((p, self.plain_index.get(config.temperature, -1)), []), key=lambda r: r.rep)
        stats = [r.stats for r in runs]
        ttft = spread(s.time_to_first_token for s in stats)
        decode = spread(s.decode_tokens_per_second for s in stats)
        total = spread(s.total_time for s in stats)
        plain_decode = spread(r.stats.decode_tokens_per_second for r in plain)[0]
        per_rep = _per_rep_speedups(runs, plain)
        row = {
            "level": "prompt",
            "category": self.result.prompts[p].category,
            "prompt_id": self.result.prompts[p].id,
            "prompts": 1,
            **self._config_fields(config),
            "runs": len(runs),
            "prompt_tokens": self.result.prompt_lengths[p],
            "generated_tokens": _median_low(s.generated_tokens for s in stats),
            "ttft_s": ttft[0],
            "ttft_s_min": ttft[1],
            "ttft_s_max": ttft[2],
            "decode_tokens_per_s": decode[0],
            "decode_tokens_per_s_min": decode[1],
            "decode_tokens_per_s_max": decode[2],
            "total_time_s": total[0],
            "total_time_s_min": total[1],
            "total_time_s_max": total[2],
            "speedup": ratio(decode[0], plain_decode),
            "speedup_min": min(per_rep, default=None),
            "speedup_max": max(per_rep, default=None),
            "speedup_end_to_end": ratio(spread(_rate(r) for r in runs)[0], spread(_rate(r) for r in plain)[0]),
            **self._pooled(runs, config),
            "drafted": _median_low(s.drafted for s in stats),
            "accepted": _median_low(s.accepted for s in stats),
            "forced": _median_low(s.forced_tokens for s in stats),
            "steps": _median_low(s.steps for s in stats),
            "draft_time_s": spread(s.draft_time for s in stats)[0],
            "verify_time_s": spread(s.verify_time for s in stats)[0],
            **self._correctness([(p, c)]),
            "flagged_runs": sum(1 for r in runs if disturbed(r, self.threads)),
        }
        row["predicted_speedup"] = self._predicted(runs, config)
        row["predicted_gpu_speedup"] = self._predicted(runs, config, gpu=True)
        row["efficiency"] = costmodel.efficiency(row["speedup"], row["predicted_speedup"])
        self._prompt_rows[(p, c)] = row
        return row

    # -- group level ------------------------------------------------------------------------

    def group_row(self, category: str, prompts: Sequence[int], c: int) -> dict:
        """A category (or all prompts): medians over prompt medians, geometric mean of speedups."""
        config = self.configs[c]
        rows = [self.prompt_row(p, c) for p in prompts]
        runs = [r for p in prompts for r in self.by_key.get((p, c), [])]
        predicted = geomean(row["predicted_speedup"] for row in rows) if not config.plain else None
        speedup = geomean(row["speedup"] for row in rows)
        out = {
            "level": "category",
            "category": category,
            "prompt_id": None,
            "prompts": len(prompts),
            **self._config_fields(config),
            "runs": self.result.settings.runs,
            "prompt_tokens": _median_low(row["prompt_tokens"] for row in rows),
            "generated_tokens": _sum(row["generated_tokens"] for row in rows),
        }
        for name in ("ttft_s", "decode_tokens_per_s", "total_time_s"):
            out.update(
                {
                    name: spread(row[name] for row in rows)[0],
                    f"{name}_min": _min(row[f"{name}_min"] for row in rows),
                    f"{name}_max": _max(row[f"{name}_max"] for row in rows),
                }
            )
        out.update(
            {
                "speedup": speedup,
                "speedup_min": _min(row["speedup_min"] for row in rows),
                "speedup_max": _max(row["speedup_max"] for row in rows),
                "speedup_end_to_end": geomean(row["speedup_end_to_end"] for row in rows),
                **self._pooled(runs, config),
                "drafted": _sum(row["drafted"] for row in rows),
                "accepted": _sum(row["accepted"] for row in rows),
                "forced": _sum(row["forced"] for row in rows),
                "steps": _sum(row["steps"] for row in rows),
                "draft_time_s": _sum(row["draft_time_s"] for row in rows),
                "verify_time_s": _sum(row["verify_time_s"] for row in rows),
                "predicted_speedup": predicted,
                "efficiency": costmodel.efficiency(speedup, predicted),
                "predicted_gpu_speedup": geomean(row["predicted_gpu_speedup"] for row in rows)
                if not config.plain
                else None,
                **self._correctness([(p, c) for p in prompts]),
                "flagged_runs": _sum(row["flagged_runs"] for row in rows),
            }
        )
        return out

    # -- shared pieces ----------------------------------------------------------------------

    def _config_fields(self, config: Config) -> dict:
        with_t = len({c.temperature for c in self.configs}) > 1
        return {
            "config": config.id,
            "label": config.label(with_t),
            "mode": config.mode,
            "draft_max": 0 if config.plain else config.draft_max,
            "temperature": config.temperature,
            "synthetic_acceptance": config.synthetic,
        }

    def _pooled(self, runs: Sequence[RunRecord], config: Config) -> dict:
        """Acceptance and tokens per step over every run (per-run ratios of small counts are noisy)."""
        drafted = sum(r.stats.drafted for r in runs)
        accepted = sum(r.stats.accepted for r in runs)
        steps = sum(r.stats.steps for r in runs)
        after_first = sum(max(r.stats.generated_tokens - 1, 0) for r in runs)
        by_drafted: list[int] = []
        by_accepted: list[int] = []
        for r in runs:
            for i, (d, a) in enumerate(zip(r.stats.drafted_by_position, r.stats.accepted_by_position)):
                if i == len(by_drafted):
                    by_drafted.append(0)
                    by_accepted.append(0)
                by_drafted[i] += d
                by_accepted[i] += a
        alpha = costmodel.alpha_from_steps((s.drafted, s.accepted) for r in runs for s in r.steps)
        return {
            "acceptance_rate": ratio(accepted, drafted) if drafted else None,
            "alpha": alpha,
            "mean_tokens_per_step": after_first / steps if steps else None,
            "expected_tokens_per_step": expected_tokens(alpha, config.draft_max) if alpha is not None else None,
            "acceptance_by_position": [round(a / d, 4) if d else None for a, d in zip(by_accepted, by_drafted)],
            "host_ms_per_step": 1000.0 * sum(r.stats.host_time for r in runs) / steps if steps else None,
        }

    def _predicted(self, runs: Sequence[RunRecord], config: Config, gpu: bool = False) -> float | None:
        """The cost model over these runs' steps: α per drafter, the calibrated costs as auto prices
        them (Calibration.costs: verify passes, each pass-running drafter's passes); a drafter that
        runs no passes (prompt lookup) costs its measured seconds per step (host work). `gpu`:
        with verification shaped as on a GPU (Costs.on_a_gpu)."""
        if config.plain or self.costs is None or not self.costs.plain_s:
            return None
        steps = [s for r in runs for s in r.steps]
        names = {s.drafter for s in steps}
        alphas = {
            n: costmodel.alpha_from_steps((s.drafted, s.accepted) for s in steps if s.drafter == n) for n in names
        }
        measured = {n: statistics.fmean(s.draft_s for s in steps if s.drafter == n) for n in names}

        def draft_seconds(s) -> float:
            if s.drafter in self.costs.draft:
                return self.costs.draft_seconds(s.drafter, s.drafted)
            return measured[s.drafter] if s.drafter is not None else 0.0

        costs = self.costs.on_a_gpu() if gpu else self.costs
        return costmodel.predicted_speedup_of_steps(
            ((alphas[s.drafter], s.drafted, draft_seconds(s), s.lead, s.lead_kept) for s in steps), costs
        )

    def _correctness(self, keys: Sequence[tuple[int, int]]) -> dict:
        """identical: every temperature-0 run matched plain (None: not checked)."""
        checks = [ch for key in keys for ch in self.checks.get(key, [])]
        runs = [r for key in keys for r in self.by_key.get(key, [])]
        judged = [r.identity for r in runs if r.identity is not None]
        violations = sum(len(i.violations) for i in judged) if judged else None
        answers = [r.schema_check for r in runs if r.schema_check is not None]
        invalid = sum(1 for a in answers if a.verdict == INVALID) if answers else None
        if not checks:
            return {
                "identical": None,
                "diverged_prompts": None,
                "divergence_position": None,
                "violations": violations,
                "invalid_answers": invalid,
            }
        diverged = {ch.prompt for ch in checks if ch.position is not None}
        positions = [ch.position for ch in checks if ch.position is not None]
        return {
            "identical": not diverged,
            "diverged_prompts": len(diverged),
            "divergence_position": min(positions, default=None),
            "violations": violations,
            "invalid_answers": invalid,
        }


def _per_rep_speedups(runs: Sequence[RunRecord], plain: Sequence[RunRecord]) -> list[float]:
    """Decode speedup of each repetition against plain decoding in the same repetition."""
    base = {r.rep: r.stats.decode_tokens_per_second for r in plain}
    out = []
    for r in runs:
        s = ratio(r.stats.decode_tokens_per_second, base.get(r.rep))
        if s is not None:
            out.append(s)
    return out


def _rate(record: RunRecord) -> float | None:
    """Tokens per second end to end, prefill included."""
    s = record.stats
    return s.generated_tokens / s.total_time if s.total_time > 0 and s.generated_tokens else None


def _median_low(values: Iterable[int | None]) -> int | None:
    xs = [v for v in values if v is not None]
    return statistics.median_low(xs) if xs else None


def _min(values: Iterable[float | None]) -> float | None:
    return min((v for v in values if v is not None), default=None)


def _max(values: Iterable[float | None]) -> float | None:
    return max((v for v in values if v is not None), default=None)


def _sum(values: Iterable[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return sum(xs) if xs else None


def rounded(row: dict) -> dict:
    """The row's fields in ROW_FIELDS order, floats rounded for reading: seconds keep microseconds,
    rates two decimals, ratios four."""
    out = {}
    for key in ROW_FIELDS:
        value = row[key]
        if isinstance(value, float):
            base = key.removesuffix("_min").removesuffix("_max")
            value = round(value, 2 if base.endswith("_per_s") else 6 if base.endswith("_s") else 4)
        out[key] = value
    return out


def correctness(result: BenchResult, pieces=None) -> dict:
    """The temperature-0 checks: every run's tokens against the target's own logits (positions
    checked, near-ties, violations, each with the rank and gap of the token chosen and of the
    argmax), and every speculative run against plain decoding (divergences, with both tokens ranked)."""
    show = pieces or (lambda token: None)
    divergences = []
    for ch in result.checks:
        if ch.position is None:
            continue
        prompt = result.prompts[ch.prompt]
        item = {
            "prompt_id": prompt.id,
            "category": prompt.category,
            "config": result.configs[ch.config].id,
            "run": ch.rep + 1,
            "position": ch.position,
            "plain_token": ch.plain_token,
            "spec_token": ch.spec_token,
            "plain_piece": show(ch.plain_token) if ch.plain_token is not None else None,
            "spec_piece": show(ch.spec_token) if ch.spec_token is not None else None,
        }
        item.update(ch.detail or {"near_tie": False})
        divergences.append(item)
    judged = [r for r in result.records if r.identity is not None]
    findings = []
    for record in judged:
        for kind, found in (("tie", record.identity.ties), ("violation", record.identity.violations)):
            for f in found:
                findings.append(
                    {
                        "kind": kind,
                        "prompt_id": result.prompts[record.prompt].id,
                        "config": result.configs[record.config].id,
                        "run": record.rep + 1,
                        **f.to_dict(),
                        "chosen_piece": show(f.chosen.token),
                        "top_piece": show(f.top.token),
                    }
                )
    return {
        "checked": len(result.checks),
        "identical": sum(1 for ch in result.checks if ch.position is None),
        "schema": schema_checks(result),
        "diverged": len(divergences),
        "near_ties": sum(1 for d in divergences if d.get("near_tie")),
        "divergences": divergences,
        "runs_judged": len(judged),
        "positions_checked": sum(r.identity.checked for r in judged),
        "ties": sum(len(r.identity.ties) for r in judged),
        "violations": sum(len(r.identity.violations) for r in judged),
        "tolerance": judged[0].identity.tolerance if judged else None,
        "findings": findings,
    }


def schema_checks(result: BenchResult) -> dict:
    """The answers of prompts with a JSON schema: how many parsed and validated, which did not."""
    answers = [r for r in result.records if r.schema_check is not None]
    return {
        "prompts": sum(1 for p in result.prompts if p.constraint is not None),
        "answers": len(answers),
        "valid": sum(1 for r in answers if r.schema_check.verdict == VALID),
        "invalid": sum(1 for r in answers if r.schema_check.verdict == INVALID),
        "cut_off": sum(1 for r in answers if r.schema_check.verdict == CUT_OFF),
        "validated": all(r.schema_check.validated for r in answers),
        "failures": [
            {
                "prompt_id": result.prompts[r.prompt].id,
                "config": result.configs[r.config].id,
                "label": result.configs[r.config].label(True),
                "run": r.rep + 1,
                "error": r.schema_check.error,
            }
            for r in answers
            if r.schema_check.verdict == INVALID
        ],
    }


def schema_warnings(checks: dict) -> list[str]:
    """A warning per answer that failed its schema (a bug: the constraint should make every answer
    valid), naming the prompt, configuration and run."""
    return [
        f"the answer of {f['prompt_id']} ({f['label']}, run {f['run']}) does not match its schema: {f['error']}"
        for f in checks["failures"]
    ]


def run_share(record: RunRecord, threads: int) -> float | None:
    """CPU time one run got over what it needed alone (as `noise` computes it for the whole bench)."""
    s = record.stats
    parallel = s.prefill_time + s.llama_decode_time
    alone = threads * parallel + max(s.total_time - parallel, 0.0)
    return s.cpu_time / alone if alone > 0 and s.cpu_time else None


def disturbed(record: RunRecord, threads: int) -> list[str]:
    """Why one run's timing is suspect: pages read back from disk, or too little CPU."""
    reasons = []
    if record.stats.major_faults:
        reasons.append(f"{record.stats.major_faults} major page faults")
    share = run_share(record, threads)
    if share is not None and share < CPU_SHARE_WARN:
        reasons.append(f"{share:.0%} of the CPU it needed")
    return reasons


def noise(result: BenchResult, environment: dict, prompt_rows: Sequence[dict]) -> tuple[dict, list[str]]:
    """Signs that the machine was not quiet, and the warnings they call for.

    cpu_share: CPU time the process got during the runs over what it would get alone — its
    threads inside llama.cpp (prefill and decode), one thread the rest of the time. llama.cpp's
    threads wait for each other at every layer, so a thread descheduled by another process stalls
    them all; a share well under 1 means the timings measure the neighbours too.
    """
    threads = max(result.threads, 1)
    parallel = sum(r.stats.prefill_time + r.stats.llama_decode_time for r in result.records)
    alone = threads * parallel + max(result.measure_s - parallel, 0.0)
    share = result.cpu_s / alone if alone > 0 and result.measure_s >= 1.0 else None
    spreads = [
        (row["decode_tokens_per_s_max"] / row["decode_tokens_per_s_min"], row)
        for row in prompt_rows
        if row["runs"] > 1 and row["decode_tokens_per_s_min"]
    ]
    worst = max(spreads, key=lambda item: item[0], default=None)
    load = environment.get("load_average_start")
    cpus = (environment.get("machine") or {}).get("cpu_count") or 0
    warnings = []
    if share is not None and not environment.get("gpu_layers") and share < CPU_SHARE_WARN:
        warnings.append(
            f"the bench got {share:.0%} of the CPU time its {threads} threads needed: other processes competed "
            "for the CPU, so these timings are unreliable (rerun on an idle machine or with fewer --threads)"
        )
    if load is not None and cpus and load >= 1.0 and load + threads > cpus:
        warnings.append(f"the load average was {load:.1f} on {cpus} CPUs when the bench started: the machine was busy")
    if worst is not None and worst[0] > SPREAD_WARN:
        row = worst[1]
        warnings.append(
            f"decode speed varied {worst[0]:.1f}× between repetitions of {row['prompt_id']} ({row['label']}): "
            "medians resist outliers, but check that the machine is idle"
        )
    flagged = [r for r in result.records if disturbed(r, threads)]
    if flagged:
        faults = sum(r.stats.major_faults for r in flagged)
        warnings.append(
            f"{len(flagged)} of {len(result.records)} runs were disturbed ({faults} major page faults in all, "
            "or too little CPU): their rows count `flagged_runs`; each run's figures are in `runs`"
        )
    figures = {
        "flagged_runs": len(flagged),
        "cpu_share": None if share is None else round(share, 3),
        "load_average_start": load,
        "max_run_spread": None
        if worst is None
        else {"ratio": round(worst[0], 3), "prompt_id": worst[1]["prompt_id"], "config": worst[1]["config"]},
    }
    return figures, warnings


def document(result: BenchResult, environment: dict, settings: dict, pieces=None) -> dict:
    """The whole --json document (schema in docs/bench.md)."""
    agg = Aggregator(result)
    prompts = result.prompts
    categories = list(dict.fromkeys(p.category for p in prompts))
    prompt_rows = [rounded(agg.prompt_row(p, c)) for c in range(len(result.configs)) for p in range(len(prompts))]
    prompt_rows.sort(
        key=lambda row: (categories.index(row["category"]), row["prompt_id"], _config_order(result, row["config"]))
    )
    category_rows = []
    for c in range(len(result.configs)):
        for category in categories:
            category_rows.append(
                rounded(agg.group_row(category, [i for i, p in enumerate(prompts) if p.category == category], c))
            )
        category_rows.append(rounded(agg.group_row(ALL, list(range(len(prompts))), c)))
    order = categories + [ALL]
    category_rows.sort(key=lambda row: (order.index(row["category"]), _config_order(result, row["config"])))
    figures, warnings = noise(result, environment, prompt_rows)
    checked = correctness(result, pieces)
    warnings += schema_warnings(checked["schema"])
    return {
        "schema": SCHEMA,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "wall_time_s": round(result.wall_s, 3),
        "settings": settings,
        "environment": environment,
        "calibration": result.calibration.to_dict() if result.calibration else None,
        "configurations": [c.to_dict() for c in result.configs],
        "prompt_set": [
            {"id": p.id, "category": p.category, "prompt_tokens": n, "schema": p.schema}
            for p, n in zip(prompts, result.prompt_lengths)
        ],
        "categories": category_rows,
        "prompts": prompt_rows,
        "correctness": checked,
        "noise": figures,
        "warnings": warnings,
        "runs": [_run_entry(result, r) for r in result.records],
    }


def _config_order(result: BenchResult, config_id: str) -> int:
    return next(i for i, c in enumerate(result.configs) if c.id == config_id)


def _run_entry(result: BenchResult, record: RunRecord) -> dict:
    share = run_share(record, max(result.threads, 1))
    return {
        "run": record.rep + 1,
        "prompt_id": result.prompts[record.prompt].id,
        "config": result.configs[record.config].id,
        "stats": record.stats.to_dict(),
        "cpu_share": None if share is None else round(share, 3),
        "disturbed": disturbed(record, max(result.threads, 1)),
        "schema_check": record.schema_check.to_dict() if record.schema_check is not None else None,
        "text": record.text,
    }
