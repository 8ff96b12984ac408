"""`specrun bench`: scheduling, aggregation, the identity check, prompt files, outputs and the JSON
schema. The method is tested on a fake engine (exact, instant); the command on tiny models."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

import numpy as np
import pytest
from cli_helpers import env as cli_env

from specrun import defaults
from specrun.atomic import write_atomic
from specrun.bench import prompts as bench_prompts
from specrun.bench.environment import file_hash
from specrun.bench.pair_engine import PairEngine
from specrun.bench.prompts import BenchPrompt
from specrun.bench.render import (
    csv_text,
    markdown_text,
    plot_png,
    require_matplotlib,
    summary_lines,
    table_rows,
)
from specrun.bench.report import ROW_FIELDS, SCHEMA, document, geomean, spread
from specrun.bench.runner import (
    WARMUP_TOKENS,
    BenchSettings,
    Calibration,
    Config,
    RunRecord,
    StepSample,
    compare,
    configurations,
    divergence_detail,
    first_divergence,
    run_bench,
    schedule,
)
from specrun.engine.sequence import GenerationSettings
from specrun.engine.stats import Stats
from specrun.errors import EXIT_USAGE, InputError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
FAKE_ENV = {
    "threads": 2,
    "gpu_layers": 0,
    "draft_gpu_layers": 0,
    "ctx_size": 256,
    "llama_cpp_system_info": "CPU",
    "packages": {"specrun": "0"},
    "machine": {"cpu": "cpu", "cpu_count": 2, "platform": "p", "python": "3"},
    "models": {
        "target": {"name": "t.gguf", "path": "/t.gguf", "size": 1, "sha256": "0" * 64},
        "draft": {"name": "d.gguf", "path": "/d.gguf", "size": 1, "sha256": "1" * 64},
    },
}


# ---- a fake engine: exact timings, planted outputs ----------------------------------------------


class FakeEngine:
    """Plain decoding emits 10, 11, 12, …; `plant` maps (config id, prompt text) to a position where
    that configuration emits 999 instead. Decode times come from `times[config id]`, one per call."""

    n_ctx = 256
    threads = 1
    VOCAB = 1000

    def __init__(self, plant=None, times=None, bad_mode=None):
        self.plant = plant or {}
        self.times = {k: list(v) for k, v in (times or {}).items()}
        self.bad_mode = bad_mode
        self.calls: list[tuple] = []

    def prompt_tokens(self, prompt):
        return [1] * len(prompt.prompt)

    def prediction_tokens(self, prompt):
        text = prompt.prediction()
        return [2] * len(text) if text else None

    def check(self, config, generation):
        if config.mode == self.bad_mode:
            raise InputError(f"unknown speculation mode {config.mode!r}", "use one of: off, draft")

    def run(self, tokens, config, generation, prediction=None):
        self.calls.append(("run", config.id, len(tokens), generation.max_tokens, generation.seed))
        self.predictions = getattr(self, "predictions", []) + [(config.id, prediction)]
        out = [10 + i for i in range(generation.max_tokens)]
        pos = self.plant.get((config.id, len(tokens)))
        if pos is not None and generation.max_tokens > WARMUP_TOKENS:
            out[pos] = 999
        queue = self.times.get(config.id)
        decode_s = queue.pop(0) if queue and generation.max_tokens > WARMUP_TOKENS else 1.0
        k = config.draft_max
        steps = [
            StepSample(None if config.plain else "draft", k, k, k // 2, 0.001 * k, 0.002) for _ in range(len(out) // 2)
        ]
        stats = Stats(
            prompt_tokens=len(tokens), generated_tokens=len(out), time_to_first_token=0.1, total_time=0.1 + decode_s
        )
        for s in steps:
            stats.record_step(s.drafted, s.accepted, s.draft_s, s.verify_s)
        return out, "x" * len(out), stats, steps

    def calibrate(self, tokens, batch_sizes, reps):
        self.calls.append(("calibrate", len(tokens), tuple(batch_sizes)))
        verify = {b: 0.010 * (1 + 0.25 * (b - 1)) for b in batch_sizes}
        return Calibration(len(tokens), 0.010, verify, 0.002, passes={defaults.MODEL: {1: 0.002}})

    def output_rows(self, prompt, output, constraint=None):
        """Plain's token 10 + i tops row i; the planted 999 is a near-tie (0.05 below) everywhere,
        and token 500 is far below (a violation if an output ever chose it)."""
        self.calls.append(("rows", len(prompt), len(output)))
        rows = np.zeros((len(output), self.VOCAB), dtype=np.float32)
        for i in range(len(output)):
            rows[i, 10 + i] = 5.0
            rows[i, 999] = 4.95
        return rows

    def logit_noise(self, tokens):
        self.calls.append(("noise", len(tokens)))
        return 0.0

    def output_noise(self, prompt, output):
        self.calls.append(("output noise", len(prompt), len(output)))
        return 0.0

    def piece(self, token):
        return f"<{token}>"


def prompts(*texts_and_categories):
    return [BenchPrompt(f"{c}/{i}", c, t) for i, (t, c) in enumerate(texts_and_categories)]


def fake_doc(result, settings=None):
    return document(
        result,
        FAKE_ENV,
        settings
        or {
            "runs": result.settings.runs,
            "max_tokens": result.settings.max_tokens,
            "seed": 0,
            "temperatures": [0.0],
            "ignore_eos": False,
        },
        pieces=lambda t: f"<{t}>",
    )


# ---- scheduling ----------------------------------------------------------------------------------


def test_schedule_interleaves_configurations_per_prompt_and_reverses_them_every_other_repetition():
    order = schedule(n_prompts=2, n_configs=2, runs=2)
    assert order == [(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1), (1, 0, 1), (1, 0, 0), (1, 1, 1), (1, 1, 0)]
    three = schedule(n_prompts=1, n_configs=3, runs=4)
    assert [c for _, _, c in three] == [0, 1, 2, 2, 1, 0, 0, 1, 2, 2, 1, 0]  # A B C, C B A, …
    positions = {c: [i % 3 for i, (_, _, cc) in enumerate(three) if cc == c] for c in range(3)}
    assert all(sum(p) == sum(positions[0]) for p in positions.values())  # no configuration always runs first


def test_configurations_always_include_plain_per_temperature():
    configs = configurations(["draft"], [1, 2, 2], [0.0, 0.8])
    assert [c.id for c in configs] == [
        "off-t0",
        "draft-k1-t0",
        "draft-k2-t0",
        "off-t0.8",
        "draft-k1-t0.8",
        "draft-k2-t0.8",
    ]
    assert configs[0].label() == "plain" and configs[2].label(True) == "draft K=2 T=0"


@pytest.mark.parametrize("ks, temps", [([0], [0.0]), ([2], [-1.0]), ([2], [])])
def test_configurations_reject_bad_values(ks, temps):
    with pytest.raises(InputError):
        configurations(["off", "draft"], ks, temps)


def test_run_bench_warms_up_calibrates_then_runs_interleaved_with_fixed_seeds():
    engine = FakeEngine()
    ps = prompts(("a" * 30, "qa"), ("b" * 20, "qa"))
    configs = configurations(["off", "draft"], [3], [0.0])
    run_bench(engine, ps, configs, BenchSettings(runs=2, warmup=1, base=GenerationSettings(max_tokens=24, seed=7)))
    kinds = [c[0] for c in engine.calls]
    assert kinds[:3] == ["run", "run", "calibrate"]
    warm = engine.calls[:2]
    assert all(c[2] == 20 and c[3] == min(24, WARMUP_TOKENS) for c in warm)  # shortest prompt, short runs
    assert engine.calls[2] == ("calibrate", 20, (1, 2, 3, 4))  # batch sizes 1 … K + 1
    measured = [c for c in engine.calls[3:] if c[0] == "run"]
    assert [c[1] for c in measured] == ["off-t0", "draft-k3-t0"] * 2 + ["draft-k3-t0", "off-t0"] * 2
    assert [c[4] for c in measured] == [7, 7, 8, 8, 7, 7, 8, 8]  # seed + prompt index, same in every config and run


def test_unknown_mode_fails_before_anything_runs():
    engine = FakeEngine(bad_mode="bogus")
    with pytest.raises(InputError, match="bogus"):
        run_bench(engine, prompts(("a", "qa")), configurations(["off", "bogus"], [2], [0.0]), BenchSettings(runs=1))
    assert engine.calls == []


def test_prompt_longer_than_the_context_is_refused_up_front():
    engine = FakeEngine()
    with pytest.raises(InputError, match="needs 301 tokens") as caught:
        run_bench(
            engine,
            prompts(("a" * 200, "qa")),
            configurations(["off"], [1], [0.0]),
            BenchSettings(base=GenerationSettings(max_tokens=100)),
        )
    assert "--ctx-size" in caught.value.hint and engine.calls == []


# ---- aggregation ---------------------------------------------------------------------------------


def test_spread_and_geomean():
    assert spread([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0)
    assert spread([None, 4.0]) == (4.0, 4.0, 4.0)
    assert spread([]) == (None, None, None)
    assert geomean([2.0, 0.5]) == pytest.approx(1.0)
    assert geomean([4.0, 1.0]) == pytest.approx(2.0)
    assert geomean([None]) is None


def test_medians_ranges_and_speedups_from_interleaved_runs():
    # decode seconds (after the first token) by configuration, prompt and repetition
    plain = {0: [3.0, 2.0, 2.0], 1: [1.0, 2.0, 2.0]}
    spec = {0: [1.0, 4.0, 1.0], 1: [2.0, 4.0, 8.0]}
    # the fake consumes them in running order: rep 0 (p0, p1), rep 1 (p0, p1), rep 2 (p0, p1)
    queue = lambda by_prompt: [by_prompt[p][r] for r in range(3) for p in (0, 1)]  # noqa: E731
    engine = FakeEngine(times={"off-t0": queue(plain), "draft-k2-t0": queue(spec)})
    ps = prompts(("a" * 5, "code"), ("b" * 6, "qa"))
    configs = configurations(["off", "draft"], [2], [0.0])
    doc = fake_doc(
        run_bench(engine, ps, configs, BenchSettings(runs=3, warmup=0, base=GenerationSettings(max_tokens=32)))
    )
    rows = {(r["prompt_id"], r["config"]): r for r in doc["prompts"]}
    plain0, spec0, spec1 = rows[("code/0", "off-t0")], rows[("code/0", "draft-k2-t0")], rows[("qa/1", "draft-k2-t0")]
    assert plain0["runs"] == 3
    assert plain0["total_time_s"] == pytest.approx(2.1)  # TTFT 0.1 + median {3, 2, 2}
    assert (plain0["total_time_s_min"], plain0["total_time_s_max"]) == (pytest.approx(2.1), pytest.approx(3.1))
    assert plain0["decode_tokens_per_s"] == pytest.approx(31 / 2.0, abs=0.01)  # 31 tokens after the first
    assert spec0["decode_tokens_per_s"] == pytest.approx(31 / 1.0, abs=0.01)
    assert spec0["speedup"] == pytest.approx(2.0, rel=1e-3)  # ratio of medians
    # per repetition: 3/1, 2/4, 2/1
    assert (spec0["speedup_min"], spec0["speedup_max"]) == (pytest.approx(0.5, rel=1e-3), pytest.approx(3.0, rel=1e-3))
    assert spec1["speedup"] == pytest.approx(2.0 / 4.0, rel=1e-3)
    assert rows[("qa/1", "off-t0")]["speedup"] == pytest.approx(1.0)
    overall = next(r for r in doc["categories"] if r["category"] == "all" and r["config"] == "draft-k2-t0")
    assert overall["speedup"] == pytest.approx(1.0, rel=1e-3)  # geometric mean of 2 and 0.5
    # extremes over every run: prompt 1 pairs 1/2, 2/4, 2/8 with plain
    assert (overall["speedup_min"], overall["speedup_max"]) == (
        pytest.approx(0.25, rel=1e-3),
        pytest.approx(3.0, rel=1e-3),
    )
    assert overall["prompts"] == 2 and overall["level"] == "category"
    assert overall["decode_tokens_per_s"] == pytest.approx((31 + 31 / 4) / 2, abs=0.01)  # median of the prompt medians
    assert overall["decode_tokens_per_s_min"] == pytest.approx(31 / 8, abs=0.01)
    assert overall["decode_tokens_per_s_max"] == pytest.approx(31 / 1, abs=0.01)
    plain_all = next(r for r in doc["categories"] if r["category"] == "all" and r["config"] == "off-t0")
    assert plain_all["speedup"] == pytest.approx(1.0) and plain_all["predicted_speedup"] is None


def test_acceptance_alpha_and_cost_model_in_rows():
    engine = FakeEngine()
    configs = configurations(["off", "draft"], [4], [0.0])
    doc = fake_doc(
        run_bench(
            engine,
            prompts(("a" * 5, "qa")),
            configs,
            BenchSettings(runs=1, warmup=0, base=GenerationSettings(max_tokens=32)),
        )
    )
    row = next(r for r in doc["categories"] if r["category"] == "qa" and r["mode"] == "draft")
    # every step drafts 4 and accepts 2: acceptance 2/4, α = 2 / 3 judged positions
    assert row["acceptance_rate"] == 0.5
    assert row["alpha"] == pytest.approx(2 / 3, abs=1e-4)
    assert row["acceptance_by_position"] == [1.0, 1.0, 0.0, 0.0]
    assert row["expected_tokens_per_step"] == pytest.approx((1 - (2 / 3) ** 5) / (1 / 3), abs=1e-3)
    # calibration: plain 10 ms, a pass over 5 tokens 20 ms, a draft token 2 ms
    expected = row["expected_tokens_per_step"] * 0.010 / (4 * 0.002 + 0.020)
    assert row["predicted_speedup"] == pytest.approx(expected, rel=1e-3)
    assert row["efficiency"] == pytest.approx(row["speedup"] / row["predicted_speedup"], rel=1e-3)
    # on a GPU's shape of costs the pass over 5 tokens costs what one does (10 ms)
    assert row["predicted_gpu_speedup"] == pytest.approx(
        row["expected_tokens_per_step"] * 0.010 / (4 * 0.002 + 0.010), rel=1e-3
    )
    plain = next(r for r in doc["categories"] if r["category"] == "qa" and r["mode"] == "off")
    assert plain["predicted_gpu_speedup"] is None


# ---- correctness ---------------------------------------------------------------------------------


def test_first_divergence():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert first_divergence([1, 2, 3], [1, 2]) == 2  # one ended early


def test_divergence_detail_ranks_both_tokens():
    logits = np.array([0.0, 3.0, 2.95, 1.0, 2.96])
    d = divergence_detail(logits, 1, 2, 0.1)
    assert d["plain"] == {"token": 1, "rank": 1, "gap": 0.0}
    assert d["spec"] == {"token": 2, "rank": 3, "gap": pytest.approx(0.05)}  # third, behind 4: a three-way tie
    assert d["near_tie"] is True
    assert divergence_detail(logits, 1, 3, 0.1)["near_tie"] is False  # two logits below the top
    assert divergence_detail(None, None, 3, 0.1)["near_tie"] is False  # one output ended: nothing to rank


def test_comparator_catches_a_modified_token_list():
    configs = configurations(["draft"], [2], [0.0, 0.8])
    stats = Stats()
    records = [
        RunRecord(0, 0, 0, [5, 6, 7, 8], "", stats),  # plain T=0
        RunRecord(0, 0, 1, [5, 6, 9, 8], "", stats),  # draft T=0: planted at 2
        RunRecord(0, 0, 2, [5, 6, 7, 8], "", stats),  # plain T=0.8
        RunRecord(0, 0, 3, [1, 1, 1, 1], "", stats),  # draft T=0.8: sampling, not checked
    ]
    checks = compare(records, configs)
    assert len(checks) == 1
    assert (checks[0].position, checks[0].plain_token, checks[0].spec_token) == (2, 7, 9)


def test_identity_check_reports_a_planted_divergence_with_its_margin():
    configs = configurations(["off", "draft"], [2], [0.0])
    ps = prompts(("a" * 5, "code"), ("b" * 6, "qa"))
    engine = FakeEngine(plant={("draft-k2-t0", 6): 3})
    engine.calls_prompt_len = 6
    doc = fake_doc(
        run_bench(engine, ps, configs, BenchSettings(runs=2, warmup=0, base=GenerationSettings(max_tokens=24)))
    )
    check = doc["correctness"]
    assert (check["checked"], check["identical"], check["diverged"]) == (4, 2, 2)
    first = check["divergences"][0]
    assert first["prompt_id"] == "qa/1" and first["position"] == 3
    assert (first["plain_token"], first["spec_token"]) == (13, 999)
    assert first["plain_piece"] == "<13>" and first["near_tie"] is True
    assert first["spec"] == {"token": 999, "rank": 2, "gap": pytest.approx(0.05)} and first["plain"]["rank"] == 1
    # Every temperature-0 run is judged, plain included; identical outputs only once.
    assert check["runs_judged"] == 8 and check["positions_checked"] == 8 * 24
    assert sum(1 for c in engine.calls if c[0] == "rows") == 3  # two plain outputs, one planted
    assert (check["violations"], check["ties"]) == (0, 2)
    ties = [f for f in check["findings"] if f["kind"] == "tie"]
    assert {(f["prompt_id"], f["position"], f["chosen"]["token"], f["chosen"]["rank"]) for f in ties} == {
        ("qa/1", 3, 999, 2)
    }
    rows = {(r["category"], r["config"]): r for r in doc["categories"]}
    assert rows[("qa", "draft-k2-t0")]["identical"] is False
    assert rows[("qa", "draft-k2-t0")]["divergence_position"] == 3
    assert rows[("code", "draft-k2-t0")]["identical"] is True
    assert rows[("all", "draft-k2-t0")]["diverged_prompts"] == 1
    assert rows[("all", "off-t0")]["identical"] is None


# ---- prompt files --------------------------------------------------------------------------------


def test_builtin_prompts_cover_the_categories():
    ps = bench_prompts.builtin()
    assert [c for c in dict.fromkeys(p.category for p in ps)] == list(bench_prompts.CATEGORIES)
    for category in bench_prompts.CATEGORIES:
        assert len([p for p in ps if p.category == category]) >= 3
    for p in ps:
        if p.category == "code-editing":
            code = p.prompt.split("```")[1]
            assert 20 <= len(code.strip().splitlines()) <= 61


def test_bad_lines_are_reported_with_their_numbers():
    lines = [
        '{"prompt": "fine", "category": "qa"}',
        "",
        "not json",
        "[1, 2]",
        '{"prompt": ""}',
        '{"category": "qa"}',
        '{"prompt": "x", "category": 3}',
    ]
    with pytest.raises(InputError) as caught:
        bench_prompts.parse_lines(lines, "p.jsonl")
    message = caught.value.one_line()
    assert "\n" not in message and caught.value.exit_code == EXIT_USAGE
    for n in (3, 4, 5, 6, 7):
        assert f"line {n}:" in message
    assert "line 1:" not in message and "5 bad line(s)" in message


def test_duplicate_ids_reserved_category_and_many_errors():
    with pytest.raises(InputError, match="repeats line 1"):
        bench_prompts.parse_lines(['{"prompt": "a", "id": "x"}', '{"prompt": "b", "id": "x"}'], "p")
    with pytest.raises(InputError, match="reserved"):
        bench_prompts.parse_lines(['{"prompt": "a", "category": "all"}'], "p")
    with pytest.raises(InputError, match="and 3 more"):
        bench_prompts.parse_lines(["x"] * 8, "p")
    with pytest.raises(InputError, match="no prompts"):
        bench_prompts.parse_lines(["", "  "], "p")


def test_file_defaults_and_selection(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "long one here"}\n{"prompt": "short", "category": "Code_Edit"}\n{"prompt": "s"}\n')
    ps = bench_prompts.load_file(path)
    assert [(p.id, p.category) for p in ps] == [
        ("custom/1", "custom"),
        ("code-edit/1", "code-edit"),
        ("custom/2", "custom"),
    ]
    assert [p.prompt for p in bench_prompts.select(ps, None, 1, shortest=True)] == ["s", "short"]
    assert [p.category for p in bench_prompts.select(ps, ["code edit"])] == ["code-edit"]
    with pytest.raises(InputError, match="unknown category 'nope'") as caught:
        bench_prompts.select(ps, ["nope"])
    assert caught.value.hint == "choose from: custom, code-edit"
    with pytest.raises(InputError, match="not found"):
        bench_prompts.load_file(tmp_path / "missing.jsonl")


def test_contention_and_spread_raise_warnings():
    from specrun.bench.report import noise

    engine = FakeEngine(times={"off-t0": [1.0, 2.0]})
    result = run_bench(
        engine,
        prompts(("a" * 5, "qa")),
        configurations(["off"], [1], [0.0]),
        BenchSettings(runs=2, warmup=0, base=GenerationSettings(max_tokens=20)),
    )
    for r in result.records:
        r.stats.llama_decode_time = 1.0  # one second in llama.cpp each
    result.threads, result.measure_s = 2, 3.0
    env = {"gpu_layers": 0, "load_average_start": 3.2, "machine": {"cpu_count": 2}}
    rows = fake_doc(result)["prompts"]
    result.cpu_s = 4.0 + 1.0  # alone: 2 threads × 2 s in llama.cpp + 1 s of Python
    figures, warnings = noise(result, env, rows)
    assert figures["cpu_share"] == 1.0
    assert figures["max_run_spread"]["ratio"] == pytest.approx(2.0, rel=1e-3)
    assert [w.split()[0:2] for w in warnings] == [["the", "load"], ["decode", "speed"]]
    result.cpu_s = 2.5
    figures, warnings = noise(result, {**env, "load_average_start": 0.1}, rows)
    assert figures["cpu_share"] == 0.5 and "competed for the CPU" in warnings[0]
    assert noise(result, {**env, "gpu_layers": 99, "load_average_start": None}, rows[:0])[1] == []


# ---- outputs and environment ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def fake_document():
    configs = configurations(["off", "draft"], [1, 2], [0.0])
    engine = FakeEngine()
    return fake_doc(
        run_bench(
            engine,
            prompts(("a" * 5, "code"), ("b" * 6, "qa")),
            configs,
            BenchSettings(runs=1, warmup=0, base=GenerationSettings(max_tokens=20)),
        )
    )


def test_csv_and_markdown_render_every_row(fake_document):
    table = list(csv.DictReader(io.StringIO(csv_text(fake_document))))
    assert len(table) == len(fake_document["categories"]) + len(fake_document["prompts"])
    assert list(table[0]) == list(ROW_FIELDS)
    md = markdown_text(fake_document)
    assert "## By category" in md and "| qa | draft K=2 |" in md
    headers, rows = table_rows(fake_document)
    assert len(rows) == 3 * 3 and all(len(r) == len(headers) for r in rows)


def test_plot_is_a_png(fake_document):
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    assert plot_png(fake_document).startswith(PNG_MAGIC)


def test_missing_matplotlib_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(InputError) as caught:
        require_matplotlib()
    assert "specrun[plot]" in caught.value.one_line()


def test_file_hash_is_computed_once_then_cached(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + b"\0" * 100)
    cache = tmp_path / "hashes.json"
    calls = []

    def hasher(path):
        calls.append(path)
        return "a" * 64

    assert file_hash(model, cache, hasher) == ("a" * 64, "computed")
    assert file_hash(model, cache, hasher) == ("a" * 64, "cache")
    model.write_bytes(b"GGUF" + b"\1" * 100)
    import os

    os.utime(model, ns=(1, 1))
    assert file_hash(model, cache, hasher)[1] == "computed" and len(calls) == 2
    record = model.with_name(model.name + ".verified.json")
    st = model.stat()
    record.write_text(json.dumps({"sha256": "b" * 64, "size": st.st_size, "mtime_ns": st.st_mtime_ns}))
    assert file_hash(model, cache, hasher) == ("b" * 64, "record")


def test_write_atomic_leaves_no_temp_file(tmp_path):
    target = tmp_path / "out.json"
    write_atomic(target, b"{}")
    write_atomic(target, b"[]")
    assert target.read_bytes() == b"[]" and [p.name for p in tmp_path.iterdir()] == ["out.json"]


# ---- the command on tiny models ------------------------------------------------------------------

LAUNCH = "import sys\nfrom specrun.cli import app\napp.main(sys.argv[1:])\n"


def bench_cli(*args, tmp_path=None) -> subprocess.CompletedProcess:
    env = cli_env(XDG_CACHE_HOME=str(tmp_path / "cache")) if tmp_path else cli_env()
    return subprocess.run(
        [sys.executable, "-c", LAUNCH, "bench", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def small_prompts(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"prompt": "def add(a, b):", "category": "code"}\n{"prompt": "The sky is", "category": "prose"}\n')
    return path


def test_json_document_schema_on_tiny_models(tiny_target, tiny_draft, small_prompts, tmp_path):
    outputs = {name: tmp_path / f"out.{name}" for name in ("csv", "md")}
    result = bench_cli(
        "--target",
        tiny_target,
        "--draft",
        tiny_draft,
        "--prompts",
        small_prompts,
        "--runs",
        "2",
        "-n",
        "10",
        "--draft-max",
        "2",
        "--ignore-eos",
        "--json",
        "-",
        "--csv",
        outputs["csv"],
        "--markdown",
        outputs["md"],
        tmp_path=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["schema"] == SCHEMA
    assert set(doc) == {
        "schema",
        "created",
        "wall_time_s",
        "settings",
        "environment",
        "calibration",
        "configurations",
        "prompt_set",
        "categories",
        "prompts",
        "correctness",
        "noise",
        "warnings",
        "runs",
    }
    assert [c["id"] for c in doc["configurations"]] == ["off-t0", "draft-k2-t0"]
    assert [(r["category"], r["config"]) for r in doc["categories"]] == [
        ("code", "off-t0"),
        ("code", "draft-k2-t0"),
        ("prose", "off-t0"),
        ("prose", "draft-k2-t0"),
        ("all", "off-t0"),
        ("all", "draft-k2-t0"),
    ]
    assert len(doc["prompts"]) == 4 and len(doc["runs"]) == 2 * 2 * 2
    for row in doc["categories"] + doc["prompts"]:
        assert set(row) == set(ROW_FIELDS)
        assert row["runs"] == 2 and row["generated_tokens"] > 0
        assert row["ttft_s"] > 0 and row["decode_tokens_per_s"] > 0 and row["total_time_s"] > 0
        assert row["ttft_s_min"] <= row["ttft_s"] <= row["ttft_s_max"]
    spec = next(r for r in doc["categories"] if r["category"] == "all" and r["mode"] == "draft")
    assert spec["speedup"] > 0 and spec["drafted"] > 0 and 0 <= spec["acceptance_rate"] <= 1
    assert spec["predicted_speedup"] > 0 and spec["efficiency"] > 0
    # greedy: the same text as plain decoding, or parting only at a measured near-tie
    assert spec["violations"] == 0 and spec["identical"] == (spec["diverged_prompts"] == 0)
    assert len(spec["acceptance_by_position"]) == 2 and spec["draft_time_s"] > 0 and spec["verify_time_s"] > 0
    assert doc["correctness"]["checked"] == 4
    assert set(doc["calibration"]["verify_s"]) == {"1", "2", "3"} and doc["calibration"]["draft_token_s"] > 0
    env = doc["environment"]
    assert env["models"]["target"]["sha256"] and env["models"]["draft"]["size"] > 0
    assert (
        env["threads"] >= 1 and env["gpu_layers"] == 0 and "llama_cpp_system_info" in env and env["packages"]["specrun"]
    )
    assert all(run["stats"]["generated_tokens"] == 10 for run in doc["runs"])
    assert outputs["csv"].read_text().startswith("level,category,")
    assert "# specrun bench" in outputs["md"].read_text()
    assert "| all | draft K=2 |" in result.stderr  # the summary table, as Markdown off a terminal


@pytest.mark.slow
def test_plot_written_by_the_command(tiny_target, small_prompts, tmp_path):
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    png = tmp_path / "plot.png"
    result = bench_cli(
        "--target",
        tiny_target,
        "--draft",
        tiny_target,
        "--prompts",
        small_prompts,
        "--runs",
        "1",
        "-n",
        "6",
        "--draft-max",
        "1,2",
        "--warmup",
        "0",
        "--quiet",
        "--plot",
        png,
        tmp_path=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert all(line.startswith("warning: ") for line in result.stderr.splitlines())  # --quiet keeps only warnings
    assert png.read_bytes().startswith(PNG_MAGIC)


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--draft-max", "1,x"], "--draft-max: 'x' is not a whole number"),
        (["--temperature", "hot"], "--temperature: 'hot' is not a number"),
        (["--category", "poetry"], "unknown category 'poetry'"),
        (["--json", "/nonexistent/dir/out.json"], "does not exist"),
        (["--ngram-min", "4", "--ngram-max", "2"], "--ngram-min 4 is above --ngram-max 2"),
    ],
)
@pytest.mark.slow
def test_bad_flags_fail_before_loading_models(args, expected, tmp_path):
    result = bench_cli("--target", tmp_path / "absent.gguf", *args, tmp_path=tmp_path)
    assert result.returncode == EXIT_USAGE
    assert expected in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_bad_prompt_file_is_one_line_with_line_numbers(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"prompt": 5}\n{oops\n')
    result = bench_cli("--prompts", bad, tmp_path=tmp_path)
    assert result.returncode == EXIT_USAGE
    assert "line 2:" in result.stderr and "line 3:" in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_unknown_mode_and_missing_draft_are_usage_errors(tiny_target, small_prompts, tmp_path):
    result = bench_cli(
        "--target", tiny_target, "--draft", "none", "--prompts", small_prompts, "--spec", "off,bogus", tmp_path=tmp_path
    )
    assert result.returncode == EXIT_USAGE and "bogus" in result.stderr
    result = bench_cli("--target", tiny_target, "--draft", "none", "--prompts", small_prompts, tmp_path=tmp_path)
    assert result.returncode == EXIT_USAGE and "needs a draft model" in result.stderr


def test_pair_engine_calibrates_and_runs_from_empty_caches(tiny_target, tiny_draft):
    from specrun.runtime.pair import Pair, PairConfig

    pair = Pair(PairConfig(tiny_target, tiny_draft, ctx_size=256, threads=1))
    try:
        engine = PairEngine(pair, chat=False)
        tokens = engine.prompt_tokens(BenchPrompt("p", "c", "hello there"))
        cal = engine.calibrate(tokens, [1, 2, 3], reps=1)
        assert set(cal.verify_s) == {1, 2, 3} and cal.plain_s == cal.verify_s[1] and cal.draft_token_s > 0
        assert pair.session.target_ctx.tokens[0] == [] and pair.session.draft_ctx.tokens[0] == []
        settings = BenchSettings(base=GenerationSettings(max_tokens=8, ignore_eos=True))
        first = engine.run(tokens, Config("draft", 2), settings.generation(Config("draft", 2), 0))
        again = engine.run(tokens, Config("draft", 2), settings.generation(Config("draft", 2), 0))
        assert first[0] == again[0] and len(first[0]) == 8 and first[3]
        assert first[2].prompt_tokens == again[2].prompt_tokens == len(tokens)
        plain = engine.run(tokens, Config("off"), settings.generation(Config("off"), 0))
        assert plain[0] == first[0]  # greedy speculative output equals plain decoding
        rows = engine.output_rows(tokens, plain[0])
        assert rows.shape == (8, pair.target_model.n_vocab)
        assert [int(np.argmax(r)) for r in rows] == plain[0]  # one batched pass agrees with plain decoding here
        assert pair.session.target_ctx.tokens[0] == tokens[:-1]  # the prompt's prefill stays for the next output
        noise = engine.logit_noise(tokens)
        assert 0.0 <= noise < 0.5 and pair.session.target_ctx.tokens[0] == []
        along = engine.output_noise(tokens, plain[0])
        assert 0.0 <= along < 0.5 and pair.session.target_ctx.tokens[0] == []
    finally:
        pair.close()


class NoisyEngine(FakeEngine):
    """Plain's token tops every row; at position 2 of the draft run a near-tie (999, 0.05 below),
    then at position 5 a token far below the top (500): a violation after a tie."""

    def run(self, tokens, config, generation, prediction=None):
        out, text, stats, steps = super().run(tokens, config, generation)
        if not config.plain and generation.max_tokens > WARMUP_TOKENS:
            out[2], out[5] = 999, 500
        return out, text, stats, steps

    def output_rows(self, prompt, output, constraint=None):
        rows = super().output_rows(prompt, output)
        rows[:, 500] = 1.0
        return rows


def judged_draft_run(engine: FakeEngine) -> dict:
    """The bench document of one greedy draft run beside plain on one prompt, 24 tokens."""
    configs = configurations(["draft"], [2], [0.0])
    return fake_doc(
        run_bench(
            engine,
            prompts(("a" * 5, "code")),
            configs,
            BenchSettings(runs=1, warmup=0, base=GenerationSettings(max_tokens=24)),
        )
    )


def test_identity_check_reads_past_the_first_divergence_and_counts_violations():
    doc = judged_draft_run(NoisyEngine())
    check = doc["correctness"]
    assert check["violations"] == 1 and check["ties"] == 1
    kinds = {(f["kind"], f["position"], f["chosen"]["token"]) for f in check["findings"]}
    assert kinds == {("tie", 2, 999), ("violation", 5, 500)}
    violation = next(f for f in check["findings"] if f["kind"] == "violation")
    assert violation["chosen"]["gap"] == pytest.approx(4.0) and violation["chosen"]["rank"] == 3
    rows = {(r["category"], r["config"]): r for r in doc["categories"]}
    assert rows[("code", "draft-k2-t0")]["violations"] == 1 and rows[("code", "off-t0")]["violations"] == 0
    assert "1 violations" in "\n".join(summary_lines(doc))


class DriftingEngine(NoisyEngine):
    """The draft run's token at position 5 lies 0.5 below the top: beyond twice the prompt's noise
    (0.1), within twice the noise measured along the output (0.3)."""

    def output_rows(self, prompt, output, constraint=None):
        rows = super().output_rows(prompt, output)
        rows[:, 500] = 4.5
        return rows

    def logit_noise(self, tokens):
        super().logit_noise(tokens)
        return 0.05

    def output_noise(self, prompt, output):
        super().output_noise(prompt, output)
        return 0.3


def test_a_finding_beyond_the_prompts_noise_is_judged_again_along_its_output():
    engine = DriftingEngine()
    check = judged_draft_run(engine)["correctness"]
    assert check["violations"] == 0 and check["ties"] == 2
    assert {(f["kind"], f["position"]) for f in check["findings"]} == {("tie", 2), ("tie", 5)}
    prompt_len = len(engine.prompt_tokens(prompts(("a" * 5, "code"))[0]))
    assert [c for c in engine.calls if c[0] == "output noise"] == [
        ("output noise", prompt_len, 24)
    ]  # once: one output has a finding beyond 0.1


def test_near_tie_tolerance_follows_the_measured_noise():
    from specrun.engine.identity import check_rows, tolerance_from_noise

    row = np.zeros((1, 8), dtype=np.float32)
    row[0, 3], row[0, 5] = 10.0, 9.85  # a gap of 0.15
    assert tolerance_from_noise(0.0) == 0.1 and tolerance_from_noise(0.1) == 0.2
    assert len(check_rows(row, [5], tolerance_from_noise(0.0)).violations) == 1  # beyond the 0.1 floor
    assert len(check_rows(row, [5], tolerance_from_noise(0.1)).ties) == 1  # within twice a noise of 0.1
    assert check_rows(row, [3]).ok and not check_rows(row, [3]).ties


@pytest.mark.real
def test_quick_bench_on_the_default_pair(real_pair_paths, tmp_path):
    target, draft = real_pair_paths
    result = bench_cli("--quick", "--target", target, "--draft", draft, "--json", "-", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    categories = list(bench_prompts.CATEGORIES) + ["all"]
    assert [(r["category"], r["config"]) for r in doc["categories"]] == [
        (c, k) for c in categories for k in ("off-t0", "draft-k4-t0")
    ]
    for row in doc["categories"]:
        assert row["speedup"] > 0 and row["decode_tokens_per_s"] > 0
        if row["mode"] == "draft":
            assert 0 < row["acceptance_rate"] <= 1 and row["efficiency"] > 0
    assert doc["correctness"]["violations"] == 0 and doc["correctness"]["runs_judged"] > 0


def test_the_plot_leaves_out_positions_never_drafted_and_keeps_its_legend_off_the_data(fake_document, monkeypatch):
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    from matplotlib.figure import Figure

    doc = json.loads(json.dumps(fake_document))
    row = next(r for r in doc["categories"] if r["category"] == "qa" and r["mode"] == "draft" and r["draft_max"] == 2)
    row["acceptance_by_position"] = [0.9, None]  # position 2 never drafted
    saved: list = []
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: saved.append(self))
    plot_png(doc)
    figure = saved[0]
    bottoms = [axis for axis in figure.axes if tuple(axis.get_ylim()) == (0, 1.05)]
    drawn = [(list(line.get_xdata()), list(line.get_ydata())) for axis in bottoms for line in axis.get_lines()]
    assert ([1], [0.9]) in drawn  # the drafted position is drawn, the undrafted one is absent (not a 0)
    assert figure.legends and not any(axis.get_legend() for axis in figure.axes)  # one legend, outside every panel


def test_the_table_shows_end_to_end_speedup_beside_decode_speedup(fake_document):
    headers, rows = table_rows(fake_document)
    assert headers[headers.index("speedup") + 1] == "end to end"
    assert all(cell.endswith("×") or cell == "—" for cell in (r[headers.index("end to end")] for r in rows))


def test_disturbed_runs_are_flagged(fake_document):
    from specrun.bench.report import disturbed

    record = RunRecord(
        0, 0, 0, [1], "", Stats(total_time=1.0, prefill_time=0.1, llama_decode_time=0.8, cpu_time=0.5, major_faults=3)
    )
    reasons = disturbed(record, threads=2)
    assert any("3 major page faults" in r for r in reasons) and any("CPU" in r for r in reasons)
    calm = RunRecord(0, 0, 0, [1], "", Stats(total_time=1.0, prefill_time=0.1, llama_decode_time=0.8, cpu_time=1.85))
    assert disturbed(calm, threads=2) == []
    assert all("flagged_runs" in r for r in fake_document["categories"])


def test_the_plot_shares_the_speedup_axis_and_draws_k_as_categories(monkeypatch):
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    from matplotlib.figure import Figure

    configs = configurations(["off", "draft"], [1, 2, 8], [0.0])
    doc = fake_doc(
        run_bench(
            FakeEngine(),
            prompts(("a" * 5, "code"), ("b" * 6, "qa")),
            configs,
            BenchSettings(runs=1, warmup=0, base=GenerationSettings(max_tokens=20)),
        )
    )
    code = next(r for r in doc["categories"] if r["category"] == "code" and r["draft_max"] == 8)
    code["speedup"] = 7.5  # one category far above the others: every panel's axis must reach it
    saved: list = []
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: saved.append(self))
    plot_png(doc)
    tops = [axis for axis in saved[0].axes if axis.get_xlabel().startswith("K ")]
    assert len(tops) == 3  # code, qa, all
    assert len({tuple(axis.get_ylim()) for axis in tops}) == 1 and all(axis.get_ylim()[1] >= 7.5 for axis in tops)
    for axis in tops:
        assert [t.get_text() for t in axis.get_xticklabels()] == ["1", "2", "8"]
        assert [list(line.get_xdata()) for line in axis.get_lines() if len(line.get_xdata()) == 3] == [[0, 1, 2]]


def test_predict_runs_every_speculative_configuration_also_with_the_prompts_last_code_block():
    configs = configurations(["off", "auto"], None, [0.0], predict=True)
    assert [c.id for c in configs] == [
        "off-t0",
        f"auto-k{defaults.AUTO_K_MAX}-t0",
        f"auto-k{defaults.AUTO_K_MAX}-t0-predicted",
    ]
    assert configs[2].label() == f"auto K={defaults.AUTO_K_MAX} +prediction"
    edit = BenchPrompt("e/1", "code-editing", "Rename x.\n\n```python\nx = 1\n```\nand also\n```py\ny = 2\n```")
    assert edit.prediction() == "y = 2\n"
    assert BenchPrompt("q/1", "qa", "no code here").prediction() is None
    engine = FakeEngine()
    run_bench(engine, [edit], configs, BenchSettings(runs=1, warmup=0, base=GenerationSettings(max_tokens=20)))
    given = {config: prediction for config, prediction in engine.predictions if prediction is not None}
    assert set(given) == {configs[2].id} and given[configs[2].id] == [2] * len("y = 2\n")
