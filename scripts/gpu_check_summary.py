"""Summarise a scripts/gpu-check.sh run: its folder's bench documents as one Markdown report and a
plot of speedup against acceptance with the cost model's line.

What it shows, and why: the time of each stage (the check must fit a metered machine); the cost
curve (a target pass by batch size, and a draft token), which decides every speedup, for the draft
model's target and for the heads' target; what one pass of each drafter costs beside a target pass
(the draft model's token, the MTP block's and the EAGLE-3 and DFlash heads' row); every
single-request configuration over all prompts, measured speedup beside the cost model's prediction
(and its prediction with verification shaped as on a GPU) and the host milliseconds per step
(outside llama_decode) beside the pass and draft times, so a gap between measured and predicted
shows whether the GPU or the Python side is to blame; what `auto` chose; and the server's
throughput by concurrency. The plot is SVG written by hand: the check's
environment has no plotting library.

Usage: python scripts/gpu_check_summary.py WORK_DIR   (writes WORK_DIR/summary.md and speedup-acceptance.svg)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from specrun.bench import costmodel
from specrun.defaults import MODEL
from specrun.engine.auto.cost_model import Costs

DASH = "—"
SINGLE = ("bench-draft", "bench-self", "bench-auto", "bench-mtp", "bench-eagle3", "bench-dflash")
HEADS = ("bench-eagle3", "bench-dflash")  # the bench-heads stage: one document per head


def cell(value: float | None, digits: int = 2, suffix: str = "") -> str:
    return DASH if value is None else f"{value:,.{digits}f}{suffix}"


def table(headers: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)] + [
        "| " + " | ".join(r) + " |" for r in rows
    ]


def load(work: Path, name: str) -> dict | None:
    path = work / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def pair(doc: dict) -> str:
    models = doc["environment"]["models"]
    names = [Path(models[role]["name"]).stem for role in ("target", "draft") if models.get(role)]
    return " + ".join(names)


def stages(work: Path) -> list[str]:
    path = work / "stages.tsv"
    if not path.is_file():
        return []
    rows = [line.split("\t") for line in path.read_text().splitlines() if line.strip()]
    total = sum(int(seconds) for _, seconds in rows)
    return (
        ["## Time per stage", ""]
        + table(["stage", "seconds"], [[s, t] for s, t in rows] + [["total", str(total)]])
        + [""]
    )


def cost_curve(doc: dict) -> list[str]:
    cal = doc.get("calibration") or {}
    if not cal.get("verify_s"):
        return []
    sizes = sorted(cal["verify_s"], key=int)
    base = cal["verify_s"][sizes[0]]
    rows = [[k, cell(1000 * cal["verify_s"][k], 2), cell(cal["verify_s"][k] / base, 2, "×")] for k in sizes]
    out = [f"## Cost curve ({pair(doc)}, {cal['context_tokens']} tokens of context)", ""]
    out += table(["batch", "target pass ms", "vs batch 1"], rows)
    if cal.get("draft_token_s") is not None:
        out += ["", f"One draft token: {1000 * cal['draft_token_s']:.2f} ms."]
    return out + [""]


def single_rows(docs: dict[str, dict]) -> list[str]:
    rows = []
    for name, doc in docs.items():
        for row in doc["categories"]:
            if row["category"] != "all":
                continue
            steps = row["steps"] or 0
            pass_ms = 1000 * row["verify_time_s"] / steps if steps and row["verify_time_s"] is not None else None
            draft_ms = (
                1000 * row["draft_time_s"] / steps
                if steps and row["mode"] != "off" and row.get("draft_time_s") is not None
                else None
            )
            rows.append(
                [
                    name.removeprefix("bench-"),
                    pair(doc),
                    row["label"],
                    cell(row["alpha"]),
                    cell(row["speedup"], 2, "×"),
                    cell(row["predicted_speedup"], 2, "×"),
                    cell(row.get("predicted_gpu_speedup"), 2, "×"),
                    cell(100 * row["efficiency"], 0, "%") if row["efficiency"] is not None else DASH,
                    cell(row["mean_tokens_per_step"]),
                    cell(pass_ms),
                    cell(draft_ms),
                    cell(row["host_ms_per_step"]),
                    cell(row["decode_tokens_per_s"], 1),
                ]
            )
    headers = [
        "run",
        "pair",
        "configuration",
        "α",
        "speedup",
        "predicted",
        "GPU pred.",
        "efficiency",
        "tok/step",
        "pass ms",
        "draft ms/step",
        "host ms/step",
        "decode tok/s",
    ]
    return (
        [
            "## Single requests (all prompts)",
            "",
            "α is the per-token acceptance (synthetic rows: the rate set, as measured); predicted is the cost model "
            "over the steps taken, GPU pred. the same with verification shaped as on a GPU (they agree on one); "
            "pass ms is the target pass with verification per step; draft ms/step the drafter's passes per step "
            "(a DFlash step is one pass over its block); host ms/step is the time outside llama_decode.",
            "",
        ]
        + table(headers, rows)
        + [""]
    )


DRAFTERS = {"bench-mtp": "MTP block", "bench-eagle3": "EAGLE-3 head", "bench-dflash": "DFlash head"}


def draft_passes(docs: dict[str, dict]) -> list[str]:
    """One pass of each drafter beside one target pass, from each bench's calibration: the draft
    model's token, and the row of a head that lives beside the target (MTP, EAGLE-3, DFlash)."""
    rows = []
    for name, doc in docs.items():
        cal = doc.get("calibration") or {}
        target = cal.get("plain_decode_s")
        if not target:
            continue
        if name == "bench-draft" and cal.get("draft_token_s") is not None:
            drafter, seconds = "draft model", cal["draft_token_s"]
        elif name in DRAFTERS and cal.get("mtp_token_s") is not None:
            drafter, seconds = DRAFTERS[name], cal["mtp_token_s"]
        else:
            continue
        rows.append(
            [
                name.removeprefix("bench-"),
                pair(doc),
                drafter,
                cell(1000 * target),
                cell(1000 * seconds),
                cell(100 * seconds / target, 0, "%"),
            ]
        )
    if not rows:
        return []
    return (
        [
            "## Draft passes",
            "",
            "One target pass (batch 1) and one pass of the drafter (one token, one row), calibrated at the same "
            "context.",
            "",
        ]
        + table(["run", "pair", "drafter", "target pass ms", "draft pass ms", "vs target pass"], rows)
        + [""]
    )


def auto_choices(docs: dict[str, dict]) -> list[str]:
    rows = []
    for name, doc in docs.items():
        configs = {c["id"]: c for c in doc["configurations"]}
        picked: dict[str, dict[str, dict]] = {}
        for run in doc["runs"]:
            if configs[run["config"]]["mode"] != "auto":
                continue
            mine = picked.setdefault(run["config"], {})
            for drafter, counts in run["stats"]["by_drafter"].items():
                total = mine.setdefault(drafter, {"steps": 0, "drafted": 0, "accepted": 0})
                for key in total:
                    total[key] += counts[key]
        for config, by in picked.items():
            text = ", ".join(
                f"{d} {c['steps']} steps ({c['drafted'] / c['steps']:.1f} drafted/step)"
                if d != "plain"
                else f"plain {c['steps']} steps"
                for d, c in sorted(by.items(), key=lambda i: -i[1]["steps"])
            )
            rows.append([name.removeprefix("bench-"), configs[config]["label"], text])
    return (
        (["## What auto picked", ""] + table(["run", "configuration", "steps by drafter"], rows) + [""]) if rows else []
    )


def serve_rows(doc: dict | None) -> list[str]:
    if doc is None:
        return []
    plain = {(r["concurrency"], r["schedule"]): r["throughput_tokens_per_s"] for r in doc["runs"] if r["mode"] == "off"}
    rows = []
    for r in doc["runs"]:
        base = plain.get((r["concurrency"], r["schedule"]))
        speedup = r["throughput_tokens_per_s"] / base if base and r["throughput_tokens_per_s"] else None
        rows.append(
            [
                r["mode"],
                str(r["concurrency"]),
                r["schedule"],
                cell(r["throughput_tokens_per_s"], 1),
                cell(speedup, 2, "×"),
                cell(r["decode_tokens_per_s_median"], 1),
                cell(r["acceptance_rate"]),
                f"{r['answered']}/{r['requests']}",
            ]
        )
    headers = [
        "mode",
        "concurrency",
        "schedule",
        "tok/s",
        "vs plain",
        "decode tok/s (median)",
        "acceptance",
        "answered",
    ]
    return [f"## Server ({pair(doc)})", ""] + table(headers, rows) + [""]


def speedup_plot(doc: dict) -> str | None:
    """Measured speedup against measured α per K (synthetic rows), and the cost model's line for each K."""
    cal = doc.get("calibration") or {}
    if not cal.get("verify_s"):
        return None
    costs = Costs.measured(
        {1: cal["plain_decode_s"], **{int(k): v for k, v in cal["verify_s"].items()}},
        {MODEL: cal.get("draft_token_s") or 0.0},
    )
    points = [
        (r["draft_max"], r["alpha"], r["speedup"])
        for r in doc["categories"]
        if r["category"] == "all" and r["mode"] == "draft" and r["alpha"] is not None and r["speedup"] is not None
    ]
    ks = sorted({k for k, _, _ in points})
    if not ks:
        return None
    lines = {k: [(a / 50, costmodel.predicted_speedup(a / 50, k, costs)) for a in range(51)] for k in ks}
    top = max([s for _, _, s in points] + [y for line in lines.values() for _, y in line] + [1.0]) * 1.1
    width, height, left, bottom, margin = 640, 420, 60, 50, 20
    colours = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]

    def x(a: float) -> float:
        return left + a * (width - left - margin)

    def y(s: float) -> float:
        return height - bottom - s / top * (height - bottom - margin)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
        'font-size="11">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<line x1="{x(0)}" y1="{y(0)}" x2="{x(1)}" y2="{y(0)}" stroke="black"/>',
        f'<line x1="{x(0)}" y1="{y(0)}" x2="{x(0)}" y2="{y(top)}" stroke="black"/>',
        f'<line x1="{x(0)}" y1="{y(1):.1f}" x2="{x(1)}" y2="{y(1):.1f}" stroke="grey" stroke-dasharray="4"/>',
    ]
    for tick in range(11):
        out.append(f'<text x="{x(tick / 10):.1f}" y="{y(0) + 15:.1f}" text-anchor="middle">{tick / 10:.1f}</text>')
    step = max(round(top / 6, 1), 0.1)
    value = 0.0
    while value <= top:
        out.append(f'<text x="{x(0) - 6:.1f}" y="{y(value) + 4:.1f}" text-anchor="end">{value:.1f}</text>')
        value += step
    out.append(
        f'<text x="{(x(0) + x(1)) / 2:.1f}" y="{height - 12}" text-anchor="middle">acceptance α (per token)</text>'
    )
    out.append(
        f'<text x="14" y="{(y(0) + y(top)) / 2:.1f}" transform="rotate(-90 14 {(y(0) + y(top)) / 2:.1f})" '
        'text-anchor="middle">speedup over plain decoding</text>'
    )
    for i, k in enumerate(ks):
        colour = colours[i % len(colours)]
        path = " ".join(f"{x(a):.1f},{y(s):.1f}" for a, s in lines[k])
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{path}"/>')
        for kk, a, s in points:
            if kk == k:
                out.append(f'<circle cx="{x(a):.1f}" cy="{y(s):.1f}" r="4" fill="{colour}"/>')
        out.append(
            f'<text x="{x(0) + 10}" y="{y(top) + 14 * (i + 1):.1f}" fill="{colour}">K={k}: line the cost model, dots '
            "measured</text>"
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python scripts/gpu_check_summary.py WORK_DIR", file=sys.stderr)
        return 2
    work = Path(argv[0])
    docs = {name: doc for name in SINGLE if (doc := load(work, name)) is not None}
    lines = ["# specrun GPU check", ""]
    header = work / "header.txt"
    if header.is_file():
        lines += header.read_text().splitlines() + [""]
    lines += stages(work)
    if "bench-draft" in docs:
        lines += cost_curve(docs["bench-draft"])
    heads = [docs[name] for name in HEADS if name in docs and (docs[name].get("calibration") or {}).get("verify_s")]
    if heads:  # the heads' target, at the largest batch either measured (DFlash verifies whole blocks)
        lines += cost_curve(max(heads, key=lambda doc: len(doc["calibration"]["verify_s"])))
    lines += draft_passes(docs) + single_rows(docs) + auto_choices(docs) + serve_rows(load(work, "serve"))
    plot = speedup_plot(docs["bench-draft"]) if "bench-draft" in docs else None
    if plot:
        (work / "speedup-acceptance.svg").write_text(plot)
        lines += ["Plot: speedup-acceptance.svg (measured speedup by α at each K, and the cost model's line).", ""]
    text = "\n".join(lines)
    (work / "summary.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
