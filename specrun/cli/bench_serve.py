"""`specrun bench --serve`: the server under load, plain against speculative decoding, FCFS against
SRPT, at each number of sequences decoded together.

For every (parallel, schedule, repetition) each mode gets a fresh server on a free loopback port
in this process, on the same loaded models (back to back, so drift hits the modes alike), a few
untimed warm-up requests, then the workload's burst (bench.serve_load). The batch costs are
measured once, by the first server, and every later one starts from the same measurement.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from .. import defaults
from ..atomic import write_atomic
from ..bench.environment import environment, load_average
from ..bench.prompts import BenchPrompt
from ..bench.render import markdown_table
from ..bench.runner import BenchSettings
from ..bench.serve_load import LoadRequest, burst, mark_identical, record, send, table_rows, warnings, workload
from ..engine import compute_thread
from ..engine.auto.costs import DecodeCosts
from ..engine.identity import check_output, logit_noise, tolerance_from_noise
from ..engine.llama import Context
from ..engine.sequence import GenerationSettings
from ..errors import InputError
from ..models.fetch import Resolved
from ..runtime import heap
from ..runtime.pair import Pair
from ..runtime.session import Session, check_mode
from ..serve.scheduler import SCHEDULES
from ..serve.server import BackgroundServer
from ..serve.service import ServeOptions, Service
from ..terminal import Output
from .lists import parse_list
from .options import ModelFlags, RuntimeFlags
from .settings import pair_config, resolve

SCHEMA = "specrun.bench-serve/1"
WARMUP_TOKENS = 8


@dataclass(frozen=True)
class ServeBench:
    """What to compare: modes, K, temperatures, sequences decoded together, schedules, repetitions."""

    modes: Sequence[str]
    draft_max: int | None
    temperatures: Sequence[float]
    concurrency: Sequence[int]
    schedules: Sequence[str]
    runs: int
    warmup: int
    max_tokens: int
    seed: int
    base: GenerationSettings
    variables: dict = field(default_factory=dict)  # the chat template's variables (--think/--no-think)


def command(
    models: ModelFlags,
    modes: list[str],
    ks: list[int] | None,
    temperatures: list[float],
    settings: BenchSettings,
    prompts: Sequence[BenchPrompt],
    runtime: RuntimeFlags,
    concurrency: str,
    schedule: str,
    runs: int | None,
    json_file: str | None,
    csv_file: Path | None,
    markdown_file: Path | None,
    plot_file: Path | None,
    quiet: bool,
    variables: dict | None = None,
) -> None:
    """`specrun bench --serve`, from the flags `bench` has parsed."""
    if csv_file or plot_file:
        raise InputError("--csv and --plot describe the single-request bench", "with --serve, use --json or --markdown")
    if ks is not None and len(ks) > 1:
        raise InputError("with --serve, --draft-max takes one value", "pass a single K, e.g. --draft-max 8")
    bench = ServeBench(
        modes=list(dict.fromkeys(["off", *modes])),
        draft_max=ks[0] if ks else None,
        temperatures=temperatures,
        concurrency=parse_list(concurrency, int, "--concurrency"),
        schedules=[s.lower() for s in parse_list(schedule, str, "--schedule")],
        runs=runs or 1,
        warmup=settings.warmup,
        max_tokens=settings.max_tokens,
        seed=settings.base.seed or 0,
        base=settings.base,
        variables=dict(variables or {}),
    )
    check(bench)
    out = Output(quiet=quiet, json_mode=json_file == "-")
    doc = run(bench, prompts, resolve(models), runtime, out)
    write(doc, out, json_file, markdown_file)


def check(bench: ServeBench) -> None:
    """Bad values fail before any model is touched."""
    for mode in bench.modes:
        check_mode(mode)
    for schedule in bench.schedules:
        if schedule not in SCHEDULES:
            raise InputError(f"--schedule: unknown schedule {schedule!r}", f"use one of: {', '.join(SCHEDULES)}")
    if any(c < 1 for c in bench.concurrency):
        raise InputError("--concurrency values must be 1 or more", "pass e.g. --concurrency 1,2,4")
    if any(t < 0 for t in bench.temperatures):
        raise InputError("temperatures must be 0 or more", "pass --temperature 0")


def run(
    bench: ServeBench, prompts: Sequence[BenchPrompt], resolved: Resolved, runtime: RuntimeFlags, out: Output
) -> dict:
    """Every run of the comparison, as one JSON-ready document."""
    load_start = load_average()
    loaded = Pair(pair_config(resolved, runtime), warn=out.warn)
    try:
        requests = workload(prompts, bench.max_tokens, bench.seed)
        _check_fit(loaded, requests, loaded.config.ctx_size, bench.variables)
        env = environment(loaded, load_average_start=load_start)
        started = time.perf_counter()
        runs: list[dict] = []
        if not out.quiet:
            out.warn("bench --serve: measuring batch costs")
        calibration = compute_thread.call(_calibrate, loaded, max(bench.concurrency))  # where the servers decode
        for temperature in bench.temperatures:
            for concurrency in bench.concurrency:
                for schedule in bench.schedules:
                    for repetition in range(bench.runs):
                        for mode in bench.modes:
                            outcomes, makespan, share = _one_run(
                                loaded, bench, requests, mode, schedule, concurrency, temperature, calibration
                            )
                            runs.append(
                                record(mode, schedule, concurrency, repetition, temperature, outcomes, makespan, share)
                            )
                            _progress(out, runs[-1])
        compute_thread.call(judge, loaded, requests, mark_identical(runs), loaded.config.ctx_size, bench.variables)
        cpus = (env.get("machine") or {}).get("cpu_count") or 0
        return {
            "schema": SCHEMA,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "wall_time_s": round(time.perf_counter() - started, 3),
            "settings": {
                "modes": list(bench.modes),
                "draft_max": bench.draft_max,
                "temperatures": list(bench.temperatures),
                "concurrency": list(bench.concurrency),
                "schedules": list(bench.schedules),
                "runs": bench.runs,
                "warmup": bench.warmup,
                "max_tokens": bench.max_tokens,
                "short_max_tokens": max(1, bench.max_tokens // 4),
                "seed": bench.seed,
                "requests": len(requests),
                "chat_template_kwargs": dict(bench.variables),
            },
            "environment": env,
            "calibration": calibration,
            "workload": [
                {"id": r.id, "category": r.category, "max_tokens": r.max_tokens, "seed": r.seed} for r in requests
            ],
            "warnings": warnings(runs, load_start, cpus, loaded.threads, bool(env.get("gpu_layers"))),
            "runs": runs,
        }
    finally:
        loaded.close()


def judge(
    pair: Pair,
    requests: Sequence[LoadRequest],
    differing: Sequence[tuple[dict, dict, dict]],
    ctx_size: int,
    variables: dict | None = None,
) -> None:
    """A greedy answer that differs from plain decoding's is checked, with plain's, token by token
    against the target's own logits (engine.identity): each run counts its answers whose every
    token is the target's choice or a measured near-tie (`near_ties`) and those with a token
    further below the top (`violations`, a bug)."""
    if not differing:
        return
    by_id = {r.id: r for r in requests}
    ctx = Context(pair.target_model, n_ctx=ctx_size, n_threads=pair.threads, n_batch=pair.config.n_batch)
    try:
        for run, outcome, other in differing:
            prompt = pair.tokens_for_messages(_messages(by_id[outcome["id"]]), variables)
            tolerance = tolerance_from_noise(logit_noise(ctx, prompt))
            checks = [check_output(ctx, prompt, o["tokens"], tolerance) for o in (outcome, other)]
            key = "violations" if any(c.violations for c in checks) else "near_ties"
            run[key] = run.get(key, 0) + 1
            run.setdefault("findings", []).append(
                {"id": outcome["id"], "identity": checks[0].to_dict(), "plain_identity": checks[1].to_dict()}
            )
    finally:
        ctx.close()


def _messages(request: LoadRequest) -> list[dict]:
    return ([{"role": "system", "content": request.system}] if request.system else []) + [
        {"role": "user", "content": request.prompt}
    ]


def _check_fit(pair: Pair, requests: Sequence[LoadRequest], ctx_size: int, variables: dict | None = None) -> None:
    for request in requests:
        n = len(pair.tokens_for_messages(_messages(request), variables))
        if n + request.max_tokens > ctx_size:
            raise InputError(
                f"{request.id}: {n} prompt tokens + {request.max_tokens} do not fit in --ctx-size {ctx_size}",
                f"raise --ctx-size to {n + request.max_tokens} or lower --max-tokens",
            )


def _one_run(
    pair: Pair,
    bench: ServeBench,
    requests: Sequence[LoadRequest],
    mode: str,
    schedule: str,
    concurrency: int,
    temperature: float,
    calibration: dict,
):
    """A fresh server for one configuration, starting from the shared batch costs, warmed up, then
    the burst; with the share of its threads' CPU time the process got meanwhile (the server is
    busy throughout a burst, so well under 1 means other processes took the rest)."""
    k_max = defaults.draft_max_for(mode, bench.draft_max)
    costs = _seeded_costs(calibration)
    options = ServeOptions(
        parallel=concurrency, queue=len(requests), schedule=schedule, mode=mode, draft_max=k_max, base=bench.base
    )
    service = Service(pair, options, costs=costs)
    try:
        server = BackgroundServer(service)
        try:
            for i in range(bench.warmup):
                warm = LoadRequest(
                    f"warmup/{i}", "warmup", requests[0].prompt, requests[0].system, WARMUP_TOKENS, bench.seed
                )
                send(server.url, warm, temperature, variables=bench.variables)
            heap.settle()  # as `specrun serve` does once it has loaded
            cpu_before = time.process_time()
            outcomes, makespan = burst(server.url, requests, temperature, variables=bench.variables)
            share = (time.process_time() - cpu_before) / (makespan * pair.threads) if makespan > 0 else None
        finally:
            heap.release()
            server.stop()
    finally:
        service.close()
    return outcomes, makespan, round(share, 3) if share is not None else None


def _calibrate(pair: Pair, parallel: int) -> dict:
    """One measurement of batch costs that every server of the comparison starts from, as JSON."""
    session = Session(pair.models())
    try:
        costs = session.measure(parallel=parallel)
    finally:
        session.close()
    return {
        "verify_s": {str(k): round(v, 6) for k, v in costs.verify_s.items()},
        "draft_s": {str(k): round(v, 6) for k, v in costs.draft_s.items()} if costs.draft_s else None,
        "mtp_s": {str(k): round(v, 6) for k, v in costs.head_s.items()} if costs.head_s else None,
    }


def _seeded_costs(calibration: dict) -> DecodeCosts:
    """The costs a server starts from, as `specrun serve` would measure them: target passes, draft
    passes and the head's passes."""
    draft = _points(calibration["draft_s"])
    head = _points(calibration.get("mtp_s"))
    return DecodeCosts(_points(calibration["verify_s"]), (draft or {}).get(1), None, None, draft, head)


def _points(points: dict | None) -> dict[int, float] | None:
    return {int(k): float(v) for k, v in points.items()} if points else None


def _progress(out: Output, run: dict) -> None:
    if out.quiet:
        return
    label = "plain" if run["mode"] == defaults.OFF else run["mode"]
    out.warn(
        f"bench --serve: parallel {run['concurrency']} · {run['schedule']} · {label}: "
        f"{run['answered']}/{run['requests']} answered, "
        f"{run['generated_tokens']} tokens in {run['makespan_s']:.1f} s ({run['throughput_tokens_per_s'] or 0:.1f} "
        "tok/s), "
        f"completion mean {run['completion_mean_s'] or 0:.2f} s"
    )


def write(doc: dict, out: Output, json_file: str | None, markdown_file: Path | None) -> None:
    """The document (to FILE, or stdout with '-'), the Markdown table, and the table on stderr."""
    table = markdown_table(*table_rows(doc["runs"]))
    if json_file == "-":
        out.document(doc)
    elif json_file:
        write_atomic(Path(json_file), (json.dumps(doc, ensure_ascii=False, indent=2) + "\n").encode())
    if markdown_file:
        settings = doc["settings"]
        text = (
            f"# specrun bench --serve\n\n{settings['requests']} requests per run (max_tokens {settings['max_tokens']} "
            "and "
            f"{settings['short_max_tokens']}), temperature {', '.join(map(str, settings['temperatures']))}, "
            f"{doc['environment']['threads']} threads.\n\n{table}\n"
        )
        write_atomic(markdown_file, text.encode())
    if not out.quiet:
        out.err.write(table + "\n")
        failed = sum(len(r["failed"]) for r in doc["runs"])
        if failed:
            out.err.write(f"warning: {failed} requests failed (see runs[].failed in --json)\n")
        out.err.flush()
    for warning in doc["warnings"]:
        out.warn(f"warning: {warning}")
