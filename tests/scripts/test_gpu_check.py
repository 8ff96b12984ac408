"""scripts/gpu-check.sh and its summary.

The summary is tested on bench documents of a fake engine (instant). The script's refusals need
nothing. A cut-down rehearsal of the whole check on the CPU (install from a bundle, write the
models and heads, every bench, the summary; a few minutes on two cores) runs only with a bundle for this
machine's Python, as tests/test_gpu_bundle.py explains:

    SPECRUN_TEST_BUNDLE=DIR python -m pytest tests/test_gpu_check.py
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from paths import ROOT
from test_bench import FakeEngine, fake_doc, prompts

from specrun.bench.runner import BenchSettings, configurations, run_bench
from specrun.engine.sequence import GenerationSettings

REPO = ROOT
SCRIPT = REPO / "scripts" / "gpu-check.sh"
SUMMARY = REPO / "scripts" / "gpu_check_summary.py"
BUNDLE = os.environ.get("SPECRUN_TEST_BUNDLE", "")
needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def fake_bench(mode: str, ks, rates) -> dict:
    configs = configurations(["off", mode], ks, [0.0], synthetic=rates)
    return fake_doc(
        run_bench(
            FakeEngine(),
            prompts(("a" * 5, "code")),
            configs,
            BenchSettings(runs=1, warmup=0, base=GenerationSettings(max_tokens=20)),
        )
    )


def head_bench(kind: str, k: int, rates, head_row_s: float) -> dict:
    """A canned bench-heads document: plain vs the head at each rate, on the heads' own target,
    its calibration with one row of the head costing `head_row_s`."""
    doc = fake_bench(kind, [k], rates)
    doc["calibration"]["mtp_token_s"] = head_row_s
    doc["calibration"]["draft_token_s"] = None
    doc["environment"] = {
        **doc["environment"],
        "models": {"target": {"name": "llama3.1-8b-q8_0.gguf"}, "draft": {"name": f"{kind}-llama3.1-8b-q8_0.gguf"}},
    }
    return doc


def summarise(work: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SUMMARY), str(work)], capture_output=True, text=True, timeout=60, cwd=REPO
    )


def test_the_summary_has_every_table_and_the_plot(tmp_path):
    (tmp_path / "bench-draft.json").write_text(json.dumps(fake_bench("draft", [2, 4], [0.6, 0.9])))
    (tmp_path / "stages.tsv").write_text("install\t12\nmodels\t3\n")
    result = summarise(tmp_path)
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "summary.md").read_text()
    assert text in result.stdout  # printed as well as written
    assert "| install | 12 |" in text and "| total | 15 |" in text
    assert "## Cost curve" in text and "| 3 | 15.00 | 1.50× |" in text  # FakeEngine: 10 ms × (1 + 0.25 (b − 1))
    for label in ("draft K=2 synthetic 0.6", "draft K=4 synthetic 0.9", "plain"):
        assert f"| {label} |" in text
    assert "host ms/step" in text and "predicted" in text
    svg = (tmp_path / "speedup-acceptance.svg").read_text()
    assert svg.startswith("<svg") and svg.count("<polyline") == 2 and svg.count("<circle") == 4


def test_the_summary_puts_the_heads_beside_the_draft_model(tmp_path):
    (tmp_path / "bench-draft.json").write_text(json.dumps(fake_bench("draft", [4], [0.8])))
    (tmp_path / "bench-eagle3.json").write_text(json.dumps(head_bench("eagle3", 4, [0.6, 0.8], 0.001)))
    (tmp_path / "bench-dflash.json").write_text(json.dumps(head_bench("dflash", 15, [0.6, 0.8], 0.0025)))
    result = summarise(tmp_path)
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "summary.md").read_text()
    # Two cost curves: the draft model's target, and the heads' (up to a DFlash block of 16 rows).
    assert text.count("## Cost curve") == 2 and "## Cost curve (llama3.1-8b-q8_0 + dflash-llama3.1-8b-q8_0" in text
    assert "| 16 | 47.50 | 4.75× |" in text  # FakeEngine: 10 ms × (1 + 0.25 (b − 1))
    # One pass of each drafter beside one target pass (10 ms).
    assert "| draft | t + d | draft model | 10.00 | 2.00 | 20% |" in text
    assert "| eagle3 | llama3.1-8b-q8_0 + eagle3-llama3.1-8b-q8_0 | EAGLE-3 head | 10.00 | 1.00 | 10% |" in text
    assert "| dflash | llama3.1-8b-q8_0 + dflash-llama3.1-8b-q8_0 | DFlash head | 10.00 | 2.50 | 25% |" in text
    # Every head row in the single-request table, with its pass, draft and GPU-predicted figures.
    header = next(line for line in text.splitlines() if line.startswith("| run | pair | configuration"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    assert {"pass ms", "draft ms/step", "predicted", "GPU pred."} <= set(columns)
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == len(columns) and cells[0] in ("draft", "eagle3", "dflash"):
            rows[(cells[0], cells[2])] = dict(zip(columns, cells))
    for kind, k in (("eagle3", 4), ("dflash", 15)):
        for rate in ("0.6", "0.8"):
            row = rows[(kind, f"{kind} K={k} synthetic {rate}")]
            assert row["pass ms"] != "—" and row["draft ms/step"] != "—" and row["predicted"].endswith("×")
            assert row["GPU pred."].endswith("×")
        assert rows[(kind, "plain")]["draft ms/step"] == "—"
    assert ("draft", "draft K=4 synthetic 0.8") in rows


def test_the_summary_says_what_auto_picked(tmp_path):
    (tmp_path / "bench-auto.json").write_text(json.dumps(fake_bench("auto", [4], [0.8])))
    result = summarise(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "## What auto picked" in result.stdout and "auto K=4 synthetic 0.8" in result.stdout


def test_the_summary_refuses_a_missing_folder(tmp_path):
    result = summarise(tmp_path / "absent")
    assert result.returncode == 2 and "usage" in result.stderr


@needs_bash
@pytest.mark.parametrize(
    "env, expected",
    [
        ({"SPECRUN_BACKEND": "metal"}, "SPECRUN_BACKEND=metal is not cuda or cpu"),
        ({"SPECRUN_BACKEND": "cpu"}, "pass SPECRUN_BUNDLE=DIR"),
        ({"SPECRUN_BACKEND": "cpu", "SPECRUN_BUNDLE": "x", "SPECRUN_GPU_SHAPES": "one"}, "needs two shapes"),
    ],
)
def test_the_script_refuses_bad_settings_in_one_line(env, expected, tmp_path):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SPECRUN_", "PIP_"))}
    result = subprocess.run(
        ["bash", str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, "SPECRUN_GPU_WORK": str(tmp_path / "work"), **env},
    )
    assert result.returncode == 2 and expected in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "work").exists()  # refused before anything was written


@needs_bash
@pytest.mark.skipif(
    not BUNDLE, reason="needs SPECRUN_TEST_BUNDLE=DIR, a bundle for this Python (see this file's docstring)"
)
def test_a_cut_down_rehearsal_runs_end_to_end_on_the_cpu(tmp_path):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SPECRUN_", "PIP_", "VIRTUAL_ENV"))}
    env = {
        **clean,
        "SPECRUN_BACKEND": "cpu",
        "SPECRUN_BUNDLE": BUNDLE,
        "SPECRUN_GPU_WORK": str(tmp_path / "work"),
        "SPECRUN_GPU_SHAPES": "tiny-qwen2 tiny-qwen2",
        "SPECRUN_GPU_HEADS": "tiny-eagle3 tiny-dflash",
        "SPECRUN_GPU_TOKENS": "8",
        "SPECRUN_GPU_RATES": "0.8",
        "SPECRUN_GPU_KS": "2",
        "SPECRUN_GPU_THREADS": "1",
    }
    result = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=1200, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    work = tmp_path / "work"
    text = (work / "summary.md").read_text()
    stages = [line.split("\t")[0] for line in (work / "stages.tsv").read_text().splitlines()]
    assert stages == [
        "preflight",
        "install",
        "models",
        "doctor",
        "bench-draft",
        "bench-self",
        "bench-auto",
        "bench-mtp",
        "bench-heads",
        "serve",
        "summary",
    ]
    assert "draft K=2 synthetic 0.8" in text and "## Server" in text and "## What auto picked" in text
    assert "eagle3 K=4 synthetic 0.8" in text and "dflash K=15 synthetic 0.8" in text
    assert "| EAGLE-3 head |" in text and "| DFlash head |" in text
    assert (work / "speedup-acceptance.svg").is_file()
