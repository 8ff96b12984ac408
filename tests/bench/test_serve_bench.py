"""`specrun bench --serve`: the workload, the figures of a run, and the command end to end on tiny
models (figures are not judged here: timing depends on the machine; what is checked is that every
request is answered and greedy answers agree across modes)."""

from __future__ import annotations

import json

import pytest
from cli_helpers import specrun

from specrun.bench.prompts import BenchPrompt
from specrun.bench.serve_load import (
    RequestOutcome,
    mark_identical,
    summary,
    warnings,
    workload,
)

PROMPTS = [BenchPrompt("a/1", "a", "first"), BenchPrompt("b/1", "b", "second", system="be brief")]


def test_the_workload_asks_every_prompt_for_a_long_and_a_short_answer_in_a_seeded_order():
    requests = workload(PROMPTS, 64, seed=3)
    assert sorted((r.id, r.max_tokens) for r in requests) == [
        ("a/1/long", 64),
        ("a/1/short", 16),
        ("b/1/long", 64),
        ("b/1/short", 16),
    ]
    assert [r.id for r in workload(PROMPTS, 64, seed=3)] == [r.id for r in requests]
    assert {tuple(r.id for r in workload(PROMPTS, 64, seed=s)) for s in range(8)} != {tuple(r.id for r in requests)}
    assert [r.seed for r in requests] == [3, 4, 5, 6]
    assert {r.id: r.system for r in requests}["b/1/short"] == "be brief"


def outcome(
    i: int, completion: float, tokens: int, drafted: int = 0, accepted: int = 0, text: str = "x"
) -> RequestOutcome:
    return RequestOutcome(
        f"r{i}",
        "a",
        64,
        200,
        ttft_s=completion / 4,
        completion_s=completion,
        completion_tokens=tokens,
        decode_tokens_per_s=10.0,
        draft_n=drafted,
        draft_n_accepted=accepted,
        finish_reason="length",
        text=text,
    )


def test_a_run_summary_gives_throughput_over_the_burst_and_per_request_times():
    outcomes = [outcome(i, float(i + 1), 10, 4, 3) for i in range(20)] + [
        RequestOutcome("bad", "a", 64, 503, error="busy")
    ]
    figures = summary(outcomes, makespan=20.0)
    assert figures["answered"] == 20 and figures["failed"] == [{"id": "bad", "status": 503, "error": "busy"}]
    assert figures["throughput_tokens_per_s"] == pytest.approx(200 / 20.0)
    assert figures["completion_mean_s"] == pytest.approx(10.5) and figures["completion_p95_s"] == 19.0
    assert figures["acceptance_rate"] == pytest.approx(0.75)


def test_identical_counts_compare_with_plain_decoding_of_the_same_run_shape():
    def run(mode, texts, concurrency=1):
        return {
            "mode": mode,
            "schedule": "srpt",
            "concurrency": concurrency,
            "repetition": 0,
            "temperature": 0.0,
            "outcomes": [{"id": f"r{i}", "text": t, "tokens": [ord(c) for c in t]} for i, t in enumerate(texts)],
        }

    runs = [run("off", ["a", "b", "c"]), run("auto", ["a", "b", "z"]), run("off", ["x"], 2), run("auto", ["x"], 2)]
    differing = mark_identical(runs)
    assert [r["identical"] for r in runs] == [None, 2, None, 1]
    assert [(o["id"], o["text"], p["text"]) for _, o, p in differing] == [("r2", "z", "c")]


def test_a_busy_machine_is_said_to_make_the_figures_unreliable():
    quiet = [{"cpu_share": 0.97}, {"cpu_share": 1.02}]
    assert warnings(quiet, 0.2, cpus=2, threads=2, on_gpu=False) == []
    busy = warnings(quiet + [{"cpu_share": 0.55}], 3.9, cpus=2, threads=2, on_gpu=False)
    assert len(busy) == 2 and "load average was 3.9" in busy[0] and "55%" in busy[1]
    assert warnings(quiet + [{"cpu_share": 0.55}], None, cpus=2, threads=2, on_gpu=True) == []


@pytest.mark.slow
def test_bench_serve_runs_end_to_end(tiny_target, tiny_draft, tmp_path):
    report = tmp_path / "serve.md"
    result = specrun(
        "bench",
        "--serve",
        "-m",
        tiny_target,
        "-md",
        tiny_draft,
        "-c",
        "2048",
        "-t",
        "1",
        "--category",
        "code-generation",
        "--limit",
        "1",
        "-n",
        "12",
        "--concurrency",
        "1,2",
        "--warmup",
        "1",
        "--json",
        "-",
        "--markdown",
        report,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["schema"] == "specrun.bench-serve/1" and doc["settings"]["requests"] == 2
    shapes = [(r["concurrency"], r["schedule"], r["mode"]) for r in doc["runs"]]
    assert shapes == [(c, s, m) for c in (1, 2) for s in ("fcfs", "srpt") for m in ("off", "auto")]
    for run in doc["runs"]:
        assert run["answered"] == run["requests"] == 2 and not run["failed"], run
        assert run["generated_tokens"] == sum(o["completion_tokens"] for o in run["outcomes"]) > 0
        assert run["completion_mean_s"] > 0 and run["throughput_tokens_per_s"] > 0
        assert run["identical"] in (None, 2)  # greedy: every answer equals plain decoding's
    assert "verify_s" in doc["calibration"] and doc["environment"]["ctx_size"] == 2048
    assert all(isinstance(w, str) and w for w in doc["warnings"]) and all(0 < r["cpu_share"] for r in doc["runs"])
    assert "| parallel | schedule | mode | tok/s |" in result.stderr and report.read_text().startswith(
        "# specrun bench --serve"
    )


@pytest.mark.slow
def test_bench_serve_refuses_what_it_cannot_report(tiny_target):
    for flags, message in (
        (["--csv", "x.csv"], "--csv"),
        (["--schedule", "lifo"], "lifo"),
        (["--concurrency", "0"], "--concurrency"),
        (["--spec", "off,sideways"], "sideways"),
    ):
        result = specrun("bench", "--serve", "-m", tiny_target, "-md", "none", *flags)
        assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_answers_that_differ_from_plain_decoding_are_judged_against_the_targets_logits(tiny_target):
    from serve_helpers import load_pair

    from specrun.bench.serve_load import LoadRequest
    from specrun.cli.bench_serve import judge
    from specrun.engine.sampling import SamplingParams
    from specrun.engine.sequence import GenerationSettings
    from specrun.runtime.pair import Pair, PairConfig

    request = LoadRequest("q/long", "q", "hello", None, 12, 0)
    reference = Pair(PairConfig(tiny_target, None, ctx_size=512, threads=1))
    try:
        prompt = reference.tokens_for_messages([{"role": "user", "content": "hello"}])
        settings = GenerationSettings(max_tokens=12, sampling=SamplingParams(temperature=0.0), ignore_eos=True)
        greedy = [t for step in reference.generation(prompt, settings, mode="off").run() for t in step.tokens]
    finally:
        reference.close()
    wrong = greedy[:5] + [(greedy[5] + 1) % 256] + greedy[6:]  # a token the target would not have chosen
    plain = {"id": "q/long", "tokens": greedy, "text": ""}
    good, bad = {}, {}
    pair = load_pair(tiny_target, None)
    try:
        judge(
            pair,
            [request],
            [
                (good, {"id": "q/long", "tokens": greedy, "text": "other"}, plain),
                (bad, {"id": "q/long", "tokens": wrong, "text": ""}, plain),
            ],
            512,
        )
    finally:
        pair.close()
    assert good["near_ties"] == 1 and "violations" not in good
    assert bad["violations"] == 1 and bad["findings"][0]["identity"]["violations"][0]["position"] == 5


def test_the_servers_start_from_the_heads_pass_costs_too(feature_target, eagle3_head):
    """Every server of the comparison is seeded with the head's pass costs as `specrun serve`
    measures them: without them, auto takes the head for untried and explores it in every burst."""
    from specrun.cli import bench_serve
    from specrun.engine import compute_thread
    from specrun.runtime.pair import Pair, PairConfig

    pair = Pair(PairConfig(str(feature_target), str(eagle3_head), ctx_size=1024, threads=1))
    try:
        calibration = compute_thread.call(bench_serve._calibrate, pair, 2)
    finally:
        pair.close()
    assert calibration["mtp_s"] and all(seconds > 0 for seconds in calibration["mtp_s"].values())
    costs = bench_serve._seeded_costs(calibration)
    assert costs.head_s == {int(rows): seconds for rows, seconds in calibration["mtp_s"].items()}
