"""Summarise `specrun bench --json` documents of one pair over different links as a Markdown table.

One row per configuration (plain, draft K=…, …), one column per document: decode tokens/s over all
prompts and the speedup over plain decoding in the same run.

Usage: python scripts/rpc_summary.py LABEL=BENCH.json [LABEL=BENCH.json ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def cell(row: dict | None) -> str:
    if row is None or row.get("decode_tokens_per_s") is None:
        return "—"
    speedup = row.get("speedup")
    return (
        f"{row['decode_tokens_per_s']:.1f} tok/s ({speedup:.2f}×)"
        if speedup is not None
        else f"{row['decode_tokens_per_s']:.1f} tok/s"
    )


def summary(documents: list[tuple[str, dict]]) -> str:
    """The table: configurations down, links across."""
    rows: dict[str, dict[str, dict]] = {}
    for label, doc in documents:
        for row in doc.get("categories", []):
            if row.get("category") == "all":
                rows.setdefault(row["label"], {})[label] = row
    header = ["configuration"] + [label for label, _ in documents]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for configuration, cells in rows.items():
        lines.append("| " + " | ".join([configuration] + [cell(cells.get(label)) for label, _ in documents]) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if not argv or any("=" not in a for a in argv):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    documents = [(label, json.loads(Path(path).read_text())) for label, path in (a.split("=", 1) for a in argv)]
    print(summary(documents), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
