"""Summarise `specrun bench --json` documents as Markdown tables for docs/gpu.md.

Two tables: the calibrated cost curve (milliseconds of one target pass by batch size, and of one
draft token) and the speed of every configuration over all prompts, with its speedup over plain
decoding and its acceptance rate. One row per document and configuration, labelled by its pair.

Usage: python scripts/gpu_summary.py BENCH.json [BENCH2.json ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

DASH = "—"


def pair_label(doc: dict) -> str:
    """'target + draft' from the model file names the bench recorded."""
    models = doc.get("environment", {}).get("models", {})
    names = [
        Path(models[role].get("name") or models[role]["path"]).stem for role in ("target", "draft") if role in models
    ]
    return " + ".join(names) or "?"


def number(value: float | None, digits: int = 1, suffix: str = "") -> str:
    """A table cell: the value rounded, or a dash when the bench had none."""
    return DASH if value is None else f"{value:,.{digits}f}{suffix}"


def table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def cost_table(docs: list[tuple[str, dict]]) -> str:
    """Target pass time by batch size (ms) and draft time per token (ms), one row per document."""
    sizes = sorted({int(k) for _, doc in docs for k in (doc.get("calibration") or {}).get("verify_s", {})})
    rows = []
    for label, doc in docs:
        cal = doc.get("calibration") or {}
        verify = {int(k): v for k, v in cal.get("verify_s", {}).items()}
        draft = cal.get("draft_token_s")
        rows.append(
            [label, str(cal.get("context_tokens", DASH))]
            + [number(verify[n] * 1000 if n in verify else None, 2) for n in sizes]
            + [number(draft * 1000 if draft is not None else None, 2)]
        )
    return table(["pair", "context"] + [f"batch {n}" for n in sizes] + ["draft/token"], rows)


def speed_table(docs: list[tuple[str, dict]]) -> str:
    """Decode speed, speedup over plain decoding and acceptance of each configuration, all prompts."""
    rows = []
    for label, doc in docs:
        for row in doc.get("categories", []):
            if row.get("category") != "all":
                continue
            acceptance = row.get("acceptance_rate")
            rows.append(
                [
                    label,
                    row["label"],
                    number(row.get("decode_tokens_per_s")),
                    number(row.get("speedup"), 2, "×"),
                    number(acceptance * 100 if acceptance is not None else None, 0, "%"),
                ]
            )
    return table(["pair", "configuration", "decode tok/s", "speedup", "acceptance"], rows)


def summary(paths: list[Path]) -> str:
    """Both tables for the bench documents at `paths`."""
    docs = [(pair_label(doc), doc) for doc in (json.loads(p.read_text()) for p in paths)]
    return (
        "Cost of a target pass by batch size and of one draft token (ms):\n\n"
        + cost_table(docs)
        + "\n\nDecode speed over all prompts:\n\n"
        + speed_table(docs)
        + "\n"
    )


def main(argv: list[str]) -> int:
    """Print the summary of the bench documents named on the command line."""
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    print(summary([Path(a) for a in argv]), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
