"""The Claude Code turn-by-turn table for docs/benchmarks.md, from what scripts/claude_code_bench.sh
recorded.

    python scripts/turns_summary.py OUT/turns.tsv OUT/turns.json

The record has a line per turn: server, session, turn index, seconds, exit status. Session 0's
first turn read Claude Code's instructions cold; every other first turn found them in the prompt
cache. Writes every session's seconds per server as JSON and prints a Markdown table: the cold first
turn, then per turn the median over the sessions (and each session's seconds), and whether
specrun's median is at most llama-server's on every turn after the first. A turn that failed
(exit status other than 0) makes the script fail after printing.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

SERVERS = (("specrun", "specrun serve (auto)"), ("llama", "llama-server (plain)"))


def read(record: Path) -> dict[str, dict[int, dict[int, tuple[float, int]]]]:
    """server -> session -> turn -> (seconds, exit status)."""
    runs: dict[str, dict[int, dict[int, tuple[float, int]]]] = {}
    for line in record.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        server, session, turn, seconds, status = line.split("\t")
        runs.setdefault(server, {}).setdefault(int(session), {})[int(turn)] = (float(seconds), int(status))
    return runs


def per_turn(sessions: dict[int, dict[int, tuple[float, int]]]) -> dict[int, list[float]]:
    """Each turn's seconds over the sessions, the cold first turn (session 0, turn 0) left out."""
    turns: dict[int, list[float]] = {}
    for session, recorded in sorted(sessions.items()):
        for turn, (seconds, _) in sorted(recorded.items()):
            if (session, turn) != (0, 0):
                turns.setdefault(turn, []).append(seconds)
    return turns


def table(runs) -> tuple[str, bool]:
    """The Markdown table, and whether specrun's median is at most llama-server's on every later turn."""
    turns = sorted({t for sessions in runs.values() for recorded in sessions.values() for t in recorded})
    header = ["server", "turn 1, cold (s)"] + [f"turn {t + 1}, {'warm ' if t == 0 else ''}median (s)" for t in turns]
    rows = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    medians: dict[str, dict[int, float]] = {}
    for name, label in SERVERS:
        sessions = runs.get(name)
        if not sessions:
            continue
        seen = per_turn(sessions)
        medians[name] = {t: statistics.median(v) for t, v in seen.items()}
        cold = sessions.get(0, {}).get(0)
        cells = [label, f"{cold[0]:.1f}" if cold else "-"]
        cells += [f"{medians[name][t]:.2f}" if t in medians[name] else "-" for t in turns]
        rows.append("| " + " | ".join(cells) + " |")
    later = [t for t in turns if t > 0]
    ahead = len(medians) == 2 and all(
        medians["specrun"].get(t, float("inf")) <= medians["llama"].get(t, float("-inf")) for t in later
    )
    lines = rows + [""]
    for name, label in SERVERS:
        for t, seconds in sorted(per_turn(runs.get(name, {})).items()):
            lines.append(f"- {label}, turn {t + 1}: " + ", ".join(f"{s:.2f}" for s in seconds))
    return "\n".join(lines), ahead


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: turns_summary.py TURNS.tsv OUT.json", file=sys.stderr)
        return 2
    runs = read(Path(argv[0]))
    failed = [
        (s, n, t) for s, sessions in runs.items() for n, rec in sessions.items() for t, (_, c) in rec.items() if c
    ]
    text, ahead = table(runs)
    print(text)
    print(f"\nspecrun's median at most llama-server's on every turn after the first: {'yes' if ahead else 'no'}")
    data = {
        name: {str(n): [rec[t][0] for t in sorted(rec)] for n, rec in sorted(sessions.items())}
        for name, sessions in runs.items()
    }
    Path(argv[1]).write_text(json.dumps({"seconds": data, "later_turns_at_most": ahead}, indent=1), encoding="utf-8")
    for server, session, turn in failed:
        print(f"turns_summary: {server} session {session} turn {turn + 1} failed", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
