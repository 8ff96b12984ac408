"""scripts/agent_summary.py: the agent workload's table, medians over rounds."""

from __future__ import annotations

import json
import subprocess
import sys

from paths import SCRIPTS


def summary(makespan: float, first: float, later: float, drafted=None, accepted=None) -> dict:
    return {
        "summary": {
            "makespan_s": makespan,
            "first_turn_ttft_mean_s": first,
            "later_turn_ttft_mean_s": later,
            "draft_n": drafted,
            "draft_n_accepted": accepted,
        }
    }


def test_the_table_has_a_row_per_server_with_medians_over_rounds(tmp_path):
    for i, (spec, plain) in enumerate([(40.0, 55.0), (38.0, 53.0), (42.0, 54.0)]):
        folder = tmp_path / f"round{i}"
        folder.mkdir()
        (folder / "specrun-auto.json").write_text(json.dumps(summary(spec, 5.0, 1.0 + i, 900, 800 + i)))
        (folder / "llama-plain.json").write_text(json.dumps(summary(plain, 5.5, 1.2)))
    result = subprocess.run(
        [sys.executable, str(SCRIPTS / "agent_summary.py"), *(str(tmp_path / f"round{i}") for i in range(3))],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "| specrun serve (auto, default pair) | 5.00 | 2.00 | 40.0 | 40.0, 38.0, 42.0 | 900 / 801 |" in lines
    assert "| llama-server (plain) | 5.50 | 1.20 | 54.0 | 55.0, 53.0, 54.0 | - |" in lines
    assert not any("ngram-mod" in line for line in lines)


def test_no_results_is_one_line_and_exit_1(tmp_path):
    result = subprocess.run(
        [sys.executable, str(SCRIPTS / "agent_summary.py"), str(tmp_path)], capture_output=True, text=True
    )
    assert result.returncode == 1 and "no agent_bench.sh results" in result.stderr
