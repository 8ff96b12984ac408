"""`specrun doctor`: the report on tiny models (text and JSON), the break-even arithmetic against
made-up cost curves, a missing default pair, and llama.cpp that cannot load."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from cli_helpers import env as cli_env
from cli_helpers import specrun

from specrun.bench import break_even
from specrun.bench.costmodel import predicted_speedup
from specrun.defaults import LOOKUP, MODEL
from specrun.engine.auto.cost_model import Costs, expected_tokens

# Made-up machines (seconds): a GPU, where a pass over a few tokens costs what one does and the
# draft is cheap; a CPU, where a pass over K+1 tokens costs K+1 passes up to 9 tokens but 16 tokens
# run in cheaper tiles (7 passes), and the draft costs 0.6 of a pass.
GPU = Costs.measured({1: 0.010, 2: 0.0102, 3: 0.0104, 5: 0.0108, 9: 0.0116, 16: 0.013, 32: 0.016}, {MODEL: 0.001})
CPU = Costs.measured({1: 0.040, 2: 0.080, 3: 0.120, 5: 0.200, 9: 0.360, 16: 0.280, 32: 0.500}, {MODEL: 0.024})


def test_break_even_alpha_is_where_drafting_costs_what_it_saves():
    for k in (1, 2, 4, 8):
        alpha = break_even.break_even_alpha(GPU, k, MODEL)
        assert alpha is not None and 0 < alpha < 1
        saved = expected_tokens(alpha, k) * GPU.plain_s
        assert saved == pytest.approx(GPU.step_seconds(k, MODEL), rel=1e-6)


def test_a_draft_that_loses_even_when_always_right_never_pays():
    result = break_even.verdict(CPU)
    assert all(alpha is None for alpha in result.draft.values())
    sentence = break_even.sentence(result, gpu=False)
    assert "cannot pay" in sentence and "K=4 step costs 7.4 plain tokens" in sentence  # (4·24 + 200) ms / 40 ms
    assert "On a GPU" in sentence


def test_lookup_pays_from_the_draft_length_where_cheaper_batches_make_up_for_it():
    """Up to 9 tokens a pass costs as many plain ones, so free drafts accepted 95% of the time still
    lose; towards the cheap 16-token tile they start to pay."""
    first = break_even.lookup_pays_from(CPU)
    assert first is not None and 9 <= first <= 15
    assert predicted_speedup(break_even.COPY_ALPHA, first, CPU, LOOKUP) > 1
    assert all(predicted_speedup(break_even.COPY_ALPHA, k, CPU, LOOKUP) <= 1 for k in range(1, first))
    assert f"from {first} drafted tokens on" in break_even.sentence(break_even.verdict(CPU), gpu=False)
    assert break_even.lookup_pays_from(Costs.measured({1: 1.0, 32: 32.0})) is None


def test_on_a_gpu_the_draft_pays_and_the_expected_speedup_is_given():
    result = break_even.verdict(GPU)
    code = result.expected["code"]["draft"]
    assert code.k >= 4 and code.speedup > 2
    assert result.expected["prose"]["draft"].speedup < code.speedup
    sentence = break_even.sentence(result, gpu=True)
    assert "the draft model pays once" in sentence and "On a GPU" not in sentence


def test_doctor_json_on_tiny_models(tiny_target, tiny_draft):
    result = specrun("doctor", "--target", tiny_target, "--draft", tiny_draft, "--calibrate", "--json", "-c", "512")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert {"backends", "devices", "cpu", "costs", "break_even", "verdict", "files", "placement"} <= set(doc)
    assert "CPU" in doc["backends"] and any(d["type"] == "cpu" and d["free_bytes"] > 0 for d in doc["devices"])
    assert doc["cpu"]["threads"] >= 1 and doc["cpu"]["cores"] >= 1
    assert doc["costs"]["calibrated_now"] and doc["costs"]["verify_s"]["1"] > 0 and doc["costs"]["draft_token_s"] > 0
    assert [row["k"] for row in doc["break_even"]["draft"]] == list(range(1, 9))
    assert doc["placement"]["target"]["devices"][0]["device"] == "CPU"
    assert doc["verdict"].startswith("On this machine")
    assert doc["files"]["cost_cache"].endswith("decode-costs.json")
    assert "measuring decode costs" in result.stderr  # --calibrate measured, and said so on stderr


def test_doctor_text_on_tiny_models(tiny_target, tiny_draft):
    result = specrun("doctor", "--target", tiny_target, "--draft", tiny_draft, "-c", "512")
    assert result.returncode == 0, result.stderr
    labels = [line.split("  ")[0] for line in result.stdout.splitlines()]
    for label in (
        "llama.cpp",
        "device",
        "cpu",
        "placement",
        "target pass",
        "draft token",
        "break-even α",
        "verdict",
        "cost cache",
    ):
        assert label in labels, result.stdout
    assert "Traceback" not in result.stderr


def test_doctor_without_the_default_pair_reports_the_rest(tmp_path):
    registry = tmp_path / "models.toml"
    registry.write_text(
        '[[model]]\nname = "absent-t"\nfamily = "x"\nhf = { repo = "nobody/none", file = "t.gguf" }\n'
        '[[model]]\nname = "absent-d"\nfamily = "x"\nhf = { repo = "nobody/none", file = "d.gguf" }\n'
        '[[pair]]\nname = "absent"\ntarget = "absent-t"\ndraft = "absent-d"\ndefault = true\n'
    )
    result = specrun("doctor", "--registry", registry, "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["default_pair"] == {"name": "absent", "present": False}
    assert doc["costs"] is None and doc["break_even"] is None and "not installed" in doc["verdict"]
    assert doc["devices"]


def test_doctor_exits_1_when_llama_cpp_cannot_load():
    code = "import sys; sys.modules['llama_cpp'] = None; from specrun.cli.app import main; main(['doctor', '--json'])"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), timeout=60)
    assert result.returncode == 1, result.stderr
    assert "llama.cpp cannot load" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_unknown_device_exits_2_listing_the_available_ones(tiny_target):
    result = specrun("run", "hi", "--target", tiny_target, "--draft", "none", "--device", "CUDA9")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "CUDA9" in result.stderr and "available here: cpu" in result.stderr


@pytest.mark.parametrize(
    "flags, words",
    [
        (["-ngl", "many"], ["--gpu-layers"]),
        (["--tensor-split", "a,b"], ["--tensor-split"]),
        (["--tensor-split", "0,0"], ["not all 0"]),
        (["--draft-device", ","], ["--draft-device"]),
        (["--flash-attn", "maybe"], ["--flash-attn", "auto, on, off"]),
    ],
)
def test_bad_placement_flags_are_usage_errors(tiny_target, flags, words):
    result = specrun("run", "hi", "--target", tiny_target, "--draft", "none", *flags)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert all(w in result.stderr for w in words)


@pytest.mark.slow
def test_mlock_and_no_mmap_reach_llama_cpp(tiny_target):
    """llama.cpp names its load mode in its log: mlock with mapping, and no mapping at all."""
    args = ("run", "hi", "--target", tiny_target, "--draft", "none", "-n", "1", "--temp", "0", "--raw")
    default = specrun(*args, env={"SPECRUN_DEBUG": "1"})
    locked = specrun(*args, "--mlock", env={"SPECRUN_DEBUG": "1"})
    unmapped = specrun(*args, "--no-mmap", env={"SPECRUN_DEBUG": "1"})
    assert "load_mode = mmap)" in default.stderr
    assert "load_mode = mmap+mlock)" in locked.stderr
    assert "load_mode = none)" in unmapped.stderr


@pytest.mark.slow
def test_flash_attn_reaches_llama_cpp(tiny_target):
    """llama.cpp names its attention kernel in its log: unfused by default on the CPU, fused when asked."""
    args = ("run", "hi", "--target", tiny_target, "--draft", "none", "-n", "1", "--temp", "0", "--raw")
    default = specrun(*args, env={"SPECRUN_DEBUG": "1"})
    fused = specrun(*args, "--flash-attn", "on", env={"SPECRUN_DEBUG": "1"})
    assert "flash_attn            = disabled" in default.stderr
    assert "flash_attn            = enabled" in fused.stderr
