"""The agent workload's table for docs/benchmarks.md, from the runs scripts/agent_bench.sh wrote.

    python scripts/agent_summary.py /tmp/agent1 /tmp/agent2 ...

Each folder is one round (specrun, then llama-server plain, then with ngram-mod, one after the
other); a row per server gives the median over the rounds of its mean time to first token on first
and on later turns and of its makespan, each round's makespan, and its drafted and accepted tokens.
Markdown on stdout.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

RUNS = (
    ("specrun-auto", "specrun serve (auto, default pair)"),
    ("llama-plain", "llama-server (plain)"),
    ("llama-ngram-mod", "llama-server --spec-type ngram-mod"),
)


def load(folders: list[Path]) -> dict[str, list[dict]]:
    """Each run's summaries, one per folder that holds it."""
    out: dict[str, list[dict]] = {}
    for folder in folders:
        for name, _ in RUNS:
            path = folder / f"{name}.json"
            if path.exists():
                out.setdefault(name, []).append(json.loads(path.read_text(encoding="utf-8"))["summary"])
    return out


def median(summaries: list[dict], key: str) -> float:
    return statistics.median(s[key] for s in summaries)


def table(runs: dict[str, list[dict]]) -> str:
    rows = [
        "| server | TTFT, first turns (s) | TTFT, later turns (s) | makespan (s) | each round's makespan (s) "
        "| drafted / accepted |",
        "|---|---:|---:|---:|---|---:|",
    ]
    for name, label in RUNS:
        summaries = runs.get(name)
        if not summaries:
            continue

        drafted = [s.get("draft_n") for s in summaries]
        accepted = [s.get("draft_n_accepted") for s in summaries]
        drafts = (
            f"{round(statistics.median(drafted))} / {round(statistics.median(accepted))}"
            if all(d is not None for d in drafted + accepted)
            else "-"
        )
        rounds = ", ".join(f"{s['makespan_s']:.1f}" for s in summaries)
        rows.append(
            f"| {label} | {median(summaries, 'first_turn_ttft_mean_s'):.2f} "
            f"| {median(summaries, 'later_turn_ttft_mean_s'):.2f} | {median(summaries, 'makespan_s'):.1f} "
            f"| {rounds} | {drafts} |"
        )
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: agent_summary.py DIR [DIR...]", file=sys.stderr)
        return 2
    runs = load([Path(a) for a in argv])
    if not runs:
        print("agent_summary: no agent_bench.sh results in those folders", file=sys.stderr)
        return 1
    print(table(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
