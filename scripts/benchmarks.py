"""Run specrun's reference benchmarks and write their tables into docs/benchmarks.md.

The benchmarks are a fixed list of `specrun bench` commands on the default pair (BENCHES below).
Each writes its JSON document (`--json FILE`) into a results folder, together with `meta.json`
(the commands, when each ran, the machine); the tables are then rendered from those documents.
Rendering needs no model: `--from DIR` renders a results folder saved earlier.

Only the part of the output file between the two marker lines (BEGIN, END) is replaced, so the
page's other sections stay as they are; a file without the markers is written whole. The file is
written atomically (a temporary file beside it, fsynced, then renamed over it).

    python scripts/benchmarks.py --dry-run            # print the commands, run nothing
    python scripts/benchmarks.py                      # run them all (tens of minutes), write docs/benchmarks.md
    python scripts/benchmarks.py --only auto --runs 3 --extra=--mlock
    python scripts/benchmarks.py --from /tmp/specrun-benchmarks-20261206T120000Z

Timings mean something only on an otherwise idle machine: each document records the CPU share its
runs got, and the bench's own warnings are copied under each table.

Standard library only; run it with the Python of specrun's venv or any Python 3.10+.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "docs" / "benchmarks.md"
BEGIN = "<!-- BEGIN scripts/benchmarks.py: this section is regenerated; edit the script, not the tables -->"
END = "<!-- END scripts/benchmarks.py -->"
SINGLE_SCHEMA = "specrun.bench/1"
SERVE_SCHEMA = "specrun.bench-serve/1"
CATEGORY_ORDER = ("code-generation", "code-editing", "structured-output", "question-answering", "creative-writing")


@dataclass(frozen=True)
class Bench:
    """One benchmark: a name (its JSON file's stem), a title, and `specrun bench` arguments."""

    name: str
    title: str
    args: tuple[str, ...]
    serve: bool = False

    def argv(self, runs: int | None, extra: list[str]) -> list[str]:
        """The `specrun bench` arguments, with --runs replaced where one is given (single requests only)."""
        args = list(self.args)
        if runs is not None and not self.serve and "--runs" in args:
            args[args.index("--runs") + 1] = str(runs)
        return ["bench", *args, *extra]


BENCHES = (
    Bench(
        "fixed",
        "Every mode, greedy",
        ("--spec", "off,draft,hybrid,ngram,auto", "--temp", "0", "--runs", "2"),
    ),
    Bench("auto", "auto against plain decoding", ("--spec", "off,auto", "--runs", "2")),
    Bench(
        "auto-fresh",
        "auto against plain decoding, started afresh in every run (`--fresh`)",
        ("--spec", "off,auto", "--runs", "2", "--fresh"),
    ),
    Bench(
        "heldout",
        "auto on the held-out code edits (prompts kept out of all tuning)",
        ("--spec", "off,auto", "--runs", "2", "--prompts", "specrun/bench/data/heldout/code-editing.jsonl"),
    ),
    Bench(
        "serve",
        "The server: plain against auto, FCFS against SRPT",
        ("--serve", "--concurrency", "1,2,4"),
        serve=True,
    ),
)


# -- the machine ------------------------------------------------------------------------------------


def gpus() -> list[str]:
    """NVIDIA GPUs by name (an empty list where nvidia-smi is absent or lists none)."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def machine() -> dict:
    """What the bench documents do not record themselves: the GPUs by name (each document has the
    CPU, its cores and the platform)."""
    return {"gpus": gpus()}


# -- running ----------------------------------------------------------------------------------------


def default_specrun() -> str:
    venv = ROOT / ".venv" / "bin" / "specrun"
    return str(venv) if venv.exists() else "specrun"


def shown(argv: list[str]) -> str:
    """A command as the docs quote it: `specrun …`, the JSON file by its name alone."""
    return shlex.join(["specrun", *argv])


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def write_atomic(path: Path, text: str) -> None:
    """Write whole or not at all: a temporary file beside PATH, fsynced, renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o777)
        else:
            os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run_all(benches: list[Bench], save: Path, specrun: str, runs: int | None, extra: list[str]) -> None:
    """Run each bench, its document into SAVE/NAME.json, and record what ran in SAVE/meta.json."""
    save = save.resolve()
    save.mkdir(parents=True, exist_ok=True)
    meta_path = save / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    meta["machine"] = machine()
    meta.setdefault("benches", {})
    for bench in benches:
        argv = bench.argv(runs, extra)
        quoted = shown([*argv, "--json", f"{bench.name}.json"])
        print(f"benchmarks: {quoted}", file=sys.stderr, flush=True)
        started = utc_now()
        # From the repository root, where the held-out prompts' relative path leads.
        done = subprocess.run([specrun, *argv, "--json", str(save / f"{bench.name}.json")], cwd=ROOT, check=False)
        if done.returncode != 0:
            raise SystemExit(f"benchmarks: `{quoted}` failed with exit code {done.returncode}; nothing written")
        meta["benches"][bench.name] = {"command": quoted, "started": started, "finished": utc_now()}
        write_atomic(meta_path, json.dumps(meta, indent=2) + "\n")


# -- rendering --------------------------------------------------------------------------------------


def fmt(value, digits: int = 2, suffix: str = "") -> str:
    return "—" if value is None else f"{value:.{digits}f}{suffix}"


def date_of(doc: dict, record: dict) -> str:
    stamp = doc.get("created") or record.get("finished") or record.get("started")
    return stamp[:10] if stamp else "unknown"


def machine_line(doc: dict, meta: dict) -> str:
    """CPU model and cores, and the GPU where there is one: as the document records them (older
    meta.json files recorded the CPU too)."""
    env = doc.get("environment") or {}
    recorded = env.get("machine") or {}
    mine = meta.get("machine") or {}
    cpu = mine.get("cpu") or recorded.get("cpu") or "CPU model not recorded"
    cores = mine.get("cpu_count") or recorded.get("cpu_count")
    text = f"{cpu}, {cores} cores" if cores else cpu
    names = mine.get("gpus") or []
    if names:
        text += ", GPU: " + ", ".join(names)
    elif env.get("gpu_offload"):
        text += ", GPU offload"
    else:
        text += ", no GPU"
    system = mine.get("platform") or recorded.get("platform")
    if system:
        text += f" ({system})"
    return text


def command_of(name: str, doc: dict, record: dict) -> str:
    """The command that made a document: as meta.json recorded it; else the fixed list's, when the
    document's settings are that command's; else the settings the document records, said as such."""
    if record.get("command"):
        return f"`{record['command']}`"
    settings = doc.get("settings") or {}
    for bench in BENCHES:
        if bench.name == name and _agrees(bench, doc):
            return f"`{shown([*bench.argv(settings.get('runs'), []), '--json', f'{name}.json'])}`"
    return f"not recorded; the document's settings: `{shown([*_from_settings(doc), '--json', f'{name}.json'])}`"


def _agrees(bench: Bench, doc: dict) -> bool:
    settings = doc.get("settings") or {}
    if bench.serve:
        return doc.get("schema") == SERVE_SCHEMA and settings.get("concurrency") == [1, 2, 4]
    args = list(bench.args)
    spec = args[args.index("--spec") + 1].split(",")
    prompts = args[args.index("--prompts") + 1] if "--prompts" in args else None
    recorded = settings.get("prompts_file")
    return (
        doc.get("schema") == SINGLE_SCHEMA
        and settings.get("spec") == spec
        and bool(settings.get("fresh")) == ("--fresh" in args)
        and (prompts is None) == (recorded is None)
        and (prompts is None or str(recorded).endswith(prompts))
    )


def _numbers(values) -> str:
    return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)


def _from_settings(doc: dict) -> list[str]:
    """`specrun bench` arguments rebuilt from what a document's settings record (models and
    runtime options are not among them)."""
    s = doc.get("settings") or {}
    if doc.get("schema") == SERVE_SCHEMA:
        args = [
            "bench",
            "--serve",
            "--concurrency",
            _numbers(s.get("concurrency") or []),
            "--schedule",
            ",".join(s.get("schedules") or []),
            "--spec",
            ",".join(s.get("modes") or []),
        ]
    else:
        args = ["bench", "--spec", ",".join(s.get("spec") or [])]
        if s.get("draft_max"):
            args += ["--draft-max", _numbers(s["draft_max"])]
        if s.get("fresh"):
            args.append("--fresh")
        if s.get("prompts_file"):
            args += ["--prompts", s["prompts_file"]]
    if s.get("temperatures"):
        args += ["--temp", _numbers(s["temperatures"])]
    for key, flag in (("runs", "--runs"), ("max_tokens", "-n")):
        if s.get(key) is not None:
            args += [flag, str(s[key])]
    return args


def _categories(rows: list[dict]) -> list[str]:
    seen = list(dict.fromkeys(r["category"] for r in rows if r.get("category") != "all"))
    ordered = [c for c in CATEGORY_ORDER if c in seen] + [c for c in seen if c not in CATEGORY_ORDER]
    return ordered + ["all"]


def _label(row: dict) -> str:
    return "plain" if row.get("mode") == "off" else row.get("label") or row.get("config", "?")


def render_single(doc: dict) -> list[str]:
    """Speedup over plain and decode tokens/s by category; acceptance and greedy identity by configuration."""
    rows = doc.get("categories") or []
    categories = _categories(rows)
    configs = list(dict.fromkeys(r["config"] for r in rows))
    cell = {(r["config"], r["category"]): r for r in rows}
    lines = [
        *textwrap.wrap(
            "Speedup of decode tokens/s over plain decoding in the same run (geometric mean over a category's "
            "prompts), with the median decode tokens/s in parentheses:",
            100,
        ),
        "",
        "| configuration | " + " | ".join(categories) + " |",
        "|---|" + "---|" * len(categories),
    ]
    for config in configs:
        first = next(r for r in rows if r["config"] == config)
        cells = []
        for category in categories:
            row = cell.get((config, category))
            if row is None:
                cells.append("—")
            elif row.get("mode") == "off":
                cells.append(f"{fmt(row.get('decode_tokens_per_s'), 1)} tok/s")
            else:
                speed = fmt(row.get("decode_tokens_per_s"), 1)
                cells.append(f"{fmt(row.get('speedup'), 2, '×')} ({speed})")
        lines.append(f"| {_label(first)} | " + " | ".join(cells) + " |")
    divergences = (doc.get("correctness") or {}).get("divergences") or []
    lines += [
        "",
        "| configuration | acceptance | tokens per step | host ms/step | greedy outputs identical to plain | "
        "near-ties | violations |",
        "|---|---|---|---|---|---|---|",
    ]
    for config in configs:
        row = cell.get((config, "all"))
        if row is None:
            continue
        if row.get("identical") is None or row.get("diverged_prompts") is None:
            identical = "—"
        else:
            identical = f"{row['prompts'] - row['diverged_prompts']}/{row['prompts']} prompts"
        ties = sum(1 for d in divergences if d.get("config") == config and d.get("near_tie"))
        acceptance = row.get("acceptance_rate")
        lines.append(
            f"| {_label(row)} | {'—' if acceptance is None else f'{100 * acceptance:.0f}%'} | "
            f"{fmt(row.get('mean_tokens_per_step'))} | {fmt(row.get('host_ms_per_step'))} | {identical} | "
            f"{ties if identical != '—' else '—'} | {'—' if row.get('violations') is None else row['violations']} |"
        )
    return lines


def render_serve(doc: dict) -> list[str]:
    """One line per server run: throughput against plain decoding's in the same shape of run."""
    runs = doc.get("runs") or []
    plain = {
        (r["concurrency"], r["schedule"], r["repetition"], r.get("temperature")): r.get("throughput_tokens_per_s")
        for r in runs
        if r.get("mode") == "off"
    }
    lines = [
        "| parallel | schedule | mode | tok/s | vs plain | completion mean s | p95 s | accept | identical |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        base = plain.get((r["concurrency"], r["schedule"], r["repetition"], r.get("temperature")))
        mine = r.get("throughput_tokens_per_s")
        ratio = f"{mine / base:.2f}×" if base and mine else "—"
        if r.get("identical") is None:
            identical = "—"
        else:
            identical = f"{r['identical']}/{r.get('answered', '?')}"
            extra = [f"{r[k]} {k.replace('_', '-')}" for k in ("near_ties", "violations") if r.get(k)]
            if extra:
                identical += f" ({', '.join(extra)})"
        accept = r.get("acceptance_rate")
        lines.append(
            f"| {r['concurrency']} | {r['schedule']} | {'plain' if r.get('mode') == 'off' else r.get('mode')} | "
            f"{fmt(mine, 1)} | {ratio} | {fmt(r.get('completion_mean_s'), 1)} | {fmt(r.get('completion_p95_s'), 1)} | "
            f"{'—' if accept is None else f'{100 * accept:.0f}%'} | {identical} |"
        )
    return lines


def render_document(name: str, doc: dict, meta: dict) -> list[str]:
    record = (meta.get("benches") or {}).get(name, {})
    title = next((b.title for b in BENCHES if b.name == name), name)
    settings = doc.get("settings") or {}
    lines = [
        f"### {title}",
        "",
        f"- Machine: {machine_line(doc, meta)}",
        f"- Command: {command_of(name, doc, record)}",
        f"- Date: {date_of(doc, record)} (UTC)",
    ]
    if doc.get("schema") == SERVE_SCHEMA:
        lines.append(
            f"- Workload: {settings.get('requests', '?')} requests per run, answers of up to "
            f"{settings.get('max_tokens', '?')} and {settings.get('short_max_tokens', '?')} tokens, temperatures "
            f"{_numbers(settings.get('temperatures') or []) or '?'}"
        )
        body = render_serve(doc)
    else:
        prompts = len(doc.get("prompt_set") or [])
        temperatures = _numbers(settings.get("temperatures") or []) or "?"
        lines.append(
            f"- Workload: {prompts} prompts, up to {settings.get('max_tokens', '?')} tokens each, "
            f"{settings.get('runs', '?')} runs per prompt and configuration, temperature {temperatures}"
        )
        body = render_single(doc)
    lines += ["", *body]
    warnings = doc.get("warnings") or []
    if warnings:
        lines += ["", "The bench warned:", ""] + [f"- {w}" for w in warnings]
    return lines + [""]


def load(folder: Path) -> tuple[list[tuple[str, dict]], dict]:
    """The bench documents of a results folder, in the order of BENCHES (then any others), and its meta.json."""
    meta_path = folder / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    known = [b.name for b in BENCHES]
    files = sorted(
        folder.glob("*.json"), key=lambda p: (known.index(p.stem) if p.stem in known else len(known), p.stem)
    )
    docs = []
    for path in files:
        if path.name == "meta.json":
            continue
        try:
            doc = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise SystemExit(f"benchmarks: {path} is not a JSON document: {error}") from error
        if isinstance(doc, dict) and doc.get("schema") in (SINGLE_SCHEMA, SERVE_SCHEMA):
            docs.append((path.stem, doc))
    if not docs:
        raise SystemExit(f"benchmarks: no `specrun bench --json` documents in {folder}")
    return docs, meta


def render_section(docs: list[tuple[str, dict]], meta: dict) -> str:
    intro = (
        "Measured with `python scripts/benchmarks.py`, which ran the commands named below on the machine and "
        "date named with each table; `python scripts/benchmarks.py` regenerates this section. Every speedup is "
        "against plain decoding measured in the same run. Greedy outputs that differ from plain decoding's are "
        "checked token by token against the target's own logits: a near-tie is a token within the measured "
        "noise of the top one, a violation one further below (a bug)."
    )
    lines = [BEGIN, "", "## Reference benchmarks", "", textwrap.fill(intro, 100, break_on_hyphens=False), ""]
    for name, doc in docs:
        lines += render_document(name, doc, meta)
    lines.append(END)
    return "\n".join(lines) + "\n"


def splice(existing: str | None, section: str) -> str:
    """The page with its generated section replaced, or a new page holding only that section."""
    if existing and BEGIN in existing and END in existing:
        head, _, rest = existing.partition(BEGIN)
        _, _, tail = rest.partition(END)
        return head + section.rstrip("\n") + tail
    return "# Benchmarks\n\n" + section


# -- command line -----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="print the commands and run nothing")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the page to write (default docs/benchmarks.md)")
    parser.add_argument("--runs", type=int, help="repetitions of the single-request benches (default 2)")
    parser.add_argument("--from", dest="source", type=Path, help="render the documents of this results folder")
    parser.add_argument("--save", type=Path, help="results folder (default: a new one in the temporary directory)")
    parser.add_argument(
        "--only", action="append", choices=[b.name for b in BENCHES], help="run only this bench (repeatable)"
    )
    parser.add_argument(
        "--extra", action="append", default=[], help="an argument added to every bench command (repeatable)"
    )
    parser.add_argument("--specrun", default=default_specrun(), help="the specrun executable (default .venv's)")
    args = parser.parse_args(argv)
    if args.runs is not None and args.runs < 1:
        parser.error("--runs must be at least 1")
    benches = [b for b in BENCHES if not args.only or b.name in args.only]
    if args.dry_run:
        for bench in benches:
            print(shown([*bench.argv(args.runs, args.extra), "--json", f"{bench.name}.json"]))
        return 0
    if args.source is not None:
        folder = args.source
    else:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        folder = args.save or Path(tempfile.gettempdir()) / f"specrun-benchmarks-{stamp}"
        print(f"benchmarks: results in {folder}", file=sys.stderr)
        run_all(benches, folder, args.specrun, args.runs, args.extra)
    docs, meta = load(folder)
    existing = args.out.read_text(encoding="utf-8") if args.out.exists() else None
    write_atomic(args.out, splice(existing, render_section(docs, meta)))
    print(f"benchmarks: wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
