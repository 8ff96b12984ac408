"""scripts/turns_summary.py: the Claude Code turn-by-turn table, medians per turn over sessions."""

from __future__ import annotations

import json
import subprocess
import sys

from paths import SCRIPTS


def run(tmp_path, lines):
    record = tmp_path / "turns.tsv"
    record.write_text("".join("\t".join(map(str, line)) + "\n" for line in lines))
    result = subprocess.run(
        [sys.executable, str(SCRIPTS / "turns_summary.py"), str(record), str(tmp_path / "turns.json")],
        capture_output=True,
        text=True,
    )
    return result, json.loads((tmp_path / "turns.json").read_text())


def sessions(server, cold, warm):
    """Session 0 starts cold; `warm` holds each later session's seconds per turn."""
    first = [(server, 0, t, s, 0) for t, s in enumerate(cold)]
    return first + [(server, n + 1, t, s, 0) for n, turns in enumerate(warm) for t, s in enumerate(turns)]


def test_the_cold_turn_stands_apart_and_later_turns_take_medians_over_sessions(tmp_path):
    lines = sessions("specrun", [600.0, 3.0, 3.1], [[5.0, 2.9, 3.0], [5.2, 3.5, 2.8]])
    lines += sessions("llama", [640.0, 3.2, 3.3], [[5.5, 3.1, 3.2], [5.1, 3.0, 3.4]])
    result, data = run(tmp_path, lines)
    assert result.returncode == 0, result.stderr
    rows = result.stdout.splitlines()
    assert "| specrun serve (auto) | 600.0 | 5.10 | 3.00 | 3.00 |" in rows
    assert "| llama-server (plain) | 640.0 | 5.30 | 3.10 | 3.30 |" in rows
    assert "- specrun serve (auto), turn 2: 3.00, 2.90, 3.50" in rows
    assert rows[-1].endswith(": yes") and data["later_turns_at_most"] is True
    assert data["seconds"]["specrun"]["0"] == [600.0, 3.0, 3.1]


def test_a_slower_later_turn_says_no_and_a_failed_turn_fails(tmp_path):
    lines = sessions("specrun", [600.0, 3.5], [[5.0, 3.4]])
    lines += sessions("llama", [640.0, 3.2], [[5.5, 3.1]])
    result, data = run(tmp_path, lines)
    assert result.returncode == 0 and result.stdout.splitlines()[-1].endswith(": no")
    assert data["later_turns_at_most"] is False
    result, _ = run(tmp_path, lines + [("llama", 2, 0, 9.0, 1)])
    assert result.returncode == 1 and "llama session 2 turn 1 failed" in result.stderr
