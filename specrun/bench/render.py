"""The bench document as people read it: table cells, CSV, Markdown and a PNG plot.

Everything works from the JSON document alone, so a saved result can be re-rendered later. No
terminal code here: bench_command decides where the text goes.
"""

from __future__ import annotations

import csv
import io

from ..errors import InputError
from .report import ROW_FIELDS

PLOT_HINT = "pip install 'specrun[plot]'"


def _num(value, digits: int = 2, suffix: str = "") -> str:
    return "—" if value is None else f"{value:.{digits}f}{suffix}"


def _rate_digits(value) -> int:
    return 1 if value is not None and value < 100 else 0


def _rate(value) -> str:
    """Tokens per second: one decimal below 100, none above (the noise is larger than that)."""
    return _num(value, _rate_digits(value))


def _pct(value) -> str:
    return "—" if value is None else f"{100 * value:.0f}%"


def _range(low, high, digits: int = 2) -> str:
    return "" if low is None or high is None else f" ({low:.{digits}f}–{high:.{digits}f})"


def _identical(row: dict, compact: bool = False) -> str:
    """The identity verdict, and answers that failed their schema (either is a finding)."""
    invalid = row.get("invalid_answers")
    if not invalid:
        return _same(row, compact)
    same = _same(row, compact)
    return ("" if same == "—" else f"{same}; ") + f"{invalid} invalid" + ("" if compact else " JSON")


def _same(row: dict, compact: bool) -> str:
    if row.get("synthetic_acceptance") is not None:
        return "synthetic" if compact else "not checked (synthetic acceptance)"
    if row["identical"] is None:
        return "—"
    if row["identical"]:
        return "yes"
    if compact:
        return f"no: {row['diverged_prompts']} @{row['divergence_position']}"
    return f"no ({row['diverged_prompts']} diverged, first at token {row['divergence_position']})"


def table_rows(doc: dict, level: str = "category", compact: bool = False) -> tuple[list[str], list[list[str]]]:
    """Headers and cells of the summary table: one line per (category or prompt, configuration).
    `compact` (the terminal) drops α and the speedup range, which the files keep."""
    headers = [
        "category" if level == "category" else "prompt",
        "config",
        "TTFT s",
        "decode tok/s",
        "total s",
        "speedup",
        "end to end",
        "accept",
        "α",
        "tok/step",
        "host ms/step",
        "predicted",
        "efficiency",
        "GPU pred.",
        "identical",
    ]
    rows = []
    for row in doc["categories" if level == "category" else "prompts"]:
        name = row["category"] if level == "category" else row["prompt_id"]
        speedup = _num(row["speedup"], 2, "×")
        rows.append(
            [
                name,
                row["label"],
                _num(row["ttft_s"], 3),
                _rate(row["decode_tokens_per_s"])
                + _range(
                    row["decode_tokens_per_s_min"],
                    row["decode_tokens_per_s_max"],
                    _rate_digits(row["decode_tokens_per_s_max"]),
                ),
                _num(row["total_time_s"], 2),
                speedup if compact else speedup + _range(row["speedup_min"], row["speedup_max"]),
                _num(row["speedup_end_to_end"], 2, "×"),
                _pct(row["acceptance_rate"]),
                _num(row["alpha"], 2),
                _num(row["mean_tokens_per_step"], 2),
                _num(row["host_ms_per_step"], 2),
                _num(row["predicted_speedup"], 2, "×"),
                _pct(row["efficiency"]),
                _num(row.get("predicted_gpu_speedup"), 2, "×"),
                _identical(row, compact),
            ]
        )
    if compact:
        drop = headers.index("α")
        headers = headers[:drop] + headers[drop + 1 :]
        rows = [r[:drop] + r[drop + 1 :] for r in rows]
    return headers, rows


def summary_lines(doc: dict) -> list[str]:
    """Calibrated costs, the correctness verdict and the wall time, one line each."""
    lines = []
    cal = doc.get("calibration")
    if cal:
        verify = ", ".join(f"{k}: {1000 * v:.1f}" for k, v in cal["verify_s"].items())
        draft = f" · draft {1000 * cal['draft_token_s']:.1f} ms/token" if cal.get("draft_token_s") is not None else ""
        lines.append(
            f"costs at {cal['context_tokens']} tokens of context: target pass by batch size (ms) {verify}{draft}"
        )
    check = doc["correctness"]
    if check.get("runs_judged"):
        lines.append(
            f"temperature 0: {check['positions_checked']} tokens of {check['runs_judged']} runs checked against the "
            "target's own "
            f"logits: {check['violations']} violations, {check['ties']} near-ties (within {check['tolerance']:.2f} "
            "logits of the top)"
        )
    if check["checked"]:
        verdict = f"temperature 0: {check['identical']}/{check['checked']} speculative runs identical to plain decoding"
        if check["diverged"]:
            verdict += f"; {check['diverged']} diverged, {check['near_ties']} of them at near-ties"
        lines.append(verdict)
    schema = check.get("schema") or {}
    if schema.get("prompts"):
        lines.append(_schema_line(schema))
    synthetic = sorted(
        {r["synthetic_acceptance"] for r in doc["categories"] if r.get("synthetic_acceptance") is not None}
    )
    if synthetic:
        lines.append(
            f"synthetic acceptance {', '.join(f'{p:g}' for p in synthetic)}: those rows accepted drafts at that rate, "
            "not by the target; their speed is the pipeline's, their output not the model's (never checked or learned "
            "from)"
        )
    lines += [f"warning: {w}" for w in doc.get("warnings", [])]
    env = doc["environment"]
    models = env["models"]
    names = models["target"]["name"] + (f" + {models['draft']['name']}" if models.get("draft") else "")
    lines.append(
        f"{names} · {env['threads']} threads · {env['gpu_layers']} GPU layers · wall {doc['wall_time_s']:.1f} s"
    )
    return lines


def _schema_line(schema: dict) -> str:
    """How the answers of the prompts with a JSON schema fared."""
    checked = "parse and validate against it" if schema["validated"] else "parse as JSON (jsonschema not installed)"
    line = (
        f"{schema['prompts']} prompt{'s' if schema['prompts'] != 1 else ''} constrained by a JSON schema in every "
        f"configuration: {schema['valid']}/{schema['answers']} answers {checked}"
    )
    if schema["invalid"]:
        line += f"; {schema['invalid']} invalid"
    if schema["cut_off"]:
        line += f"; {schema['cut_off']} cut off at --max-tokens before the answer closed (not checked)"
    return line


def _ranked(candidate: dict | None) -> str:
    return "—" if not candidate else f"rank {candidate['rank']}, {candidate['gap']:.3f} below the top"


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    def line(cells):
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(headers), line(["---"] * len(headers)), *map(line, rows)])


def markdown_text(doc: dict) -> str:
    """A Markdown report: settings, the category and prompt tables, costs, divergences, environment."""
    s = doc["settings"]
    env = doc["environment"]
    parts = [
        "# specrun bench",
        "",
        f"{doc['created']} · runs {s['runs']} (interleaved, medians with min–max) · max tokens {s['max_tokens']} · "
        f"seed {s['seed']} · temperatures {', '.join(map(str, s['temperatures']))} · ignore EOS {s['ignore_eos']}",
        "",
        "## By category",
        "",
        markdown_table(*table_rows(doc, "category")),
        "",
        "## By prompt",
        "",
        markdown_table(*table_rows(doc, "prompt")),
        "",
        "## Costs and correctness",
        "",
        *[f"- {line}" for line in summary_lines(doc)],
    ]
    for d in doc["correctness"]["divergences"]:
        parts.append(
            f"- {d['prompt_id']} · {d['config']} · run {d['run']}: token {d['position']} — plain {d['plain_token']!r} "
            f"({_ranked(d.get('plain'))}) vs speculative {d['spec_token']!r} ({_ranked(d.get('spec'))})"
            + (" (near-tie)" if d.get("near_tie") else "")
        )
    for f in doc["correctness"].get("findings", []):
        parts.append(
            f"- {f['kind']}: {f['prompt_id']} · {f['config']} · run {f['run']}: token {f['position']} is "
            f"{f['chosen']['token']!r} ({_ranked(f['chosen'])}), the target's top is {f['top']['token']!r}"
        )
    models = env["models"]
    parts += ["", "## Environment", ""]
    for role in ("target", "draft"):
        m = models.get(role)
        if m:
            parts.append(f"- {role}: `{m['path']}` ({m['size']} bytes, sha256 `{m['sha256']}`)")
    machine = env["machine"]
    parts += [
        f"- machine: {machine['cpu']} · {machine['cpu_count']} CPUs · {machine['platform']} · Python "
        f"{machine['python']}",
        f"- threads {env['threads']} · GPU layers {env['gpu_layers']} (draft {env['draft_gpu_layers']}) · context "
        f"{env['ctx_size']}",
        "- packages: " + ", ".join(f"{k} {v}" for k, v in env["packages"].items() if v),
        f"- llama.cpp: `{env['llama_cpp_system_info']}`",
        "",
    ]
    return "\n".join(parts)


def csv_text(doc: dict) -> str:
    """Category rows, then prompt rows, one column per field; lists joined with ';'."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=ROW_FIELDS, lineterminator="\n")
    writer.writeheader()
    for row in doc["categories"] + doc["prompts"]:
        writer.writerow({k: _cell(row.get(k)) for k in ROW_FIELDS})
    return buffer.getvalue()


def _cell(value):
    if value is None:
        return ""
    if isinstance(value, list):
        return ";".join(str(v) for v in value)
    return value


def require_matplotlib():
    """matplotlib, or the one-line error that says how to get it."""
    try:
        import matplotlib
    except ImportError:
        raise InputError("--plot needs matplotlib, which is not installed", PLOT_HINT) from None
    return matplotlib


def plot_png(doc: dict) -> bytes:
    """Speedup by K, a panel per category, and acceptance by draft position at each category's
    largest K. The speedup panels share one axis, so categories compare at a glance; K is drawn
    as categories (the values swept, evenly spaced), since K = 1, 2, 4, 8 are choices, not a
    scale. A series (mode, temperature, synthetic acceptance) keeps its colour everywhere; the
    legend sits below the panels, never over the data; a position never drafted is left out."""
    matplotlib = require_matplotlib()
    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure

    rows = [r for r in doc["categories"] if r["mode"] != "off"]
    categories = list(dict.fromkeys(r["category"] for r in rows)) or ["all"]
    temperatures = sorted({r["temperature"] for r in rows})

    def series(r) -> tuple:
        return r["mode"], r["temperature"], r.get("synthetic_acceptance")

    series_keys = list(dict.fromkeys(series(r) for r in rows))
    palette = matplotlib.colormaps["tab10"]
    colour = {key: palette(i % 10) for i, key in enumerate(series_keys)}
    ks = sorted({r["draft_max"] for r in rows})
    slot = {k: i for i, k in enumerate(ks)}  # K as a category: its place among the values swept

    def name(key) -> str:
        return (
            key[0]
            + (f" T={key[1]:g}" if len(temperatures) > 1 else "")
            + (f" synthetic {key[2]:g}" if key[2] is not None else "")
        )

    fig = Figure(figsize=(max(8, 2.6 * len(categories)), 6.5), dpi=100)
    axes = fig.subplots(2, len(categories), squeeze=False, sharey="row")
    handles: dict[str, object] = {}
    for column, category in enumerate(categories):
        top, bottom = axes[0][column], axes[1][column]
        mine = [r for r in rows if r["category"] == category]
        for key in series_keys:
            group = sorted(
                (r for r in mine if series(r) == key and r["speedup"] is not None), key=lambda r: r["draft_max"]
            )
            if group:
                (line,) = top.plot(
                    [slot[r["draft_max"]] for r in group],
                    [r["speedup"] for r in group],
                    marker="o",
                    color=colour[key],
                    linewidth=2.0 if category == "all" else 1.3,
                )
                handles.setdefault(name(key), line)
            widest = max((r for r in mine if series(r) == key), key=lambda r: r["draft_max"], default=None)
            if widest is not None and widest["acceptance_by_position"]:
                points = [(i + 1, a) for i, a in enumerate(widest["acceptance_by_position"]) if a is not None]
                if points:
                    bottom.plot(*zip(*points), marker=".", color=colour[key])
        top.axhline(1.0, color="grey", linestyle="--", linewidth=1)
        top.set_title(category, fontsize=10)
        top.set_xticks(range(len(ks)), [str(k) for k in ks])
        top.set_xlim(-0.5, len(ks) - 0.5)
        top.set_xlabel("K (most draft tokens per step)", fontsize=8)
        bottom.set_ylim(0, 1.05)
        bottom.set_xlabel("draft position", fontsize=8)
        for axis in (top, bottom):
            axis.grid(alpha=0.3)
            axis.tick_params(labelsize=8)
        if column == 0:
            top.set_ylabel("speedup vs plain (decode tok/s)", fontsize=8)
            bottom.set_ylabel("acceptance", fontsize=8)
    if handles:
        fig.legend(
            list(handles.values()),
            list(handles),
            loc="lower center",
            ncol=min(len(handles), 6),
            fontsize=8,
            frameon=False,
        )
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()
