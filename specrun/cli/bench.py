"""`specrun bench`: plain and speculative decoding side by side on the same prompts and models.

Progress and the summary table go to stderr (a rich bar and table on a terminal, plain lines and a
Markdown table otherwise); `--json -` puts the one document on stdout. Files (--json FILE, --csv,
--markdown, --plot) are written atomically, and their paths are checked before anything runs, so
a typo cannot cost a finished benchmark.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Callable, Iterator, Optional

import typer

from .. import defaults
from ..atomic import write_atomic
from ..bench import prompts as bench_prompts
from ..bench.environment import environment, load_average
from ..bench.render import (
    csv_text,
    markdown_table,
    markdown_text,
    plot_png,
    require_matplotlib,
    summary_lines,
    table_rows,
)
from ..bench.report import document
from ..bench.runner import (
    BenchSettings,
    PairEngine,
    Progress,
    configurations,
    run_bench,
)
from ..errors import InputError
from ..runtime.pair import Pair, PairConfig
from ..terminal import Output
from . import options as opt
from .resolve import resolve_models
from .settings import check_ngram_range

BENCH = "Benchmark"
DEFAULT_MAX_TOKENS = 128
DEFAULT_RUNS = 3
QUICK = {"max_tokens": 32, "runs": 1, "draft_max": 4, "per_category": 1}

SpecList = Annotated[str, typer.Option("--spec", help="Comma-separated speculation modes to compare (off, draft, …). Plain decoding (off) is always measured: it is the baseline of every speedup.", rich_help_panel=BENCH)]
DraftMaxList = Annotated[Optional[str], typer.Option("--draft-max", help="Comma-separated K values to sweep, e.g. 1,2,4,8: the most draft tokens per step in every mode (default: the pair's recommended K, else 4, in the fixed modes, --quick 4; auto's own cap, 31, under auto).", rich_help_panel=BENCH)]
TemperatureList = Annotated[Optional[str], typer.Option("--temperature", "--temp", help="Comma-separated temperatures, e.g. 0,0.8 (default 0). At 0 every speculative output is checked against plain decoding token by token.", rich_help_panel=BENCH)]
MaxTokens = Annotated[Optional[int], typer.Option("--max-tokens", "-n", min=1, help=f"Tokens to generate per run at most (default {DEFAULT_MAX_TOKENS}; --quick {QUICK['max_tokens']}).", rich_help_panel=BENCH)]
Runs = Annotated[Optional[int], typer.Option("--runs", min=1, help=f"Measured repetitions per prompt and configuration, interleaved A B A B (default {DEFAULT_RUNS}; --quick {QUICK['runs']}).", rich_help_panel=BENCH)]
Warmup = Annotated[int, typer.Option("--warmup", min=0, help="Untimed warm-up rounds (one short run per configuration each) before calibration and measurement.", rich_help_panel=BENCH)]
Category = Annotated[Optional[list[str]], typer.Option("--category", help="Only these categories (repeatable or comma-separated): code-generation, code-editing, structured-output, question-answering, creative-writing, or those of --prompts.", rich_help_panel=BENCH)]
PromptsFile = Annotated[Optional[Path], typer.Option("--prompts", help='Your own prompts: JSONL, one {"prompt": ..., "category": ..., "id": ..., "system": ...} per line (only "prompt" required).', rich_help_panel=BENCH)]
Limit = Annotated[Optional[int], typer.Option("--limit", min=1, help="At most this many prompts per category (the first ones).", rich_help_panel=BENCH)]
Quick = Annotated[bool, typer.Option("--quick", help="Smoke run: the shortest prompt per category, 32 tokens, 1 run, K = 4 (explicit flags still win).", rich_help_panel=BENCH)]
Seed = Annotated[int, typer.Option("--seed", "-s", help="Base seed: prompt i uses seed + i in every configuration and run.", rich_help_panel=opt.SAMPLING)]
JsonFile = Annotated[Optional[str], typer.Option("--json", metavar="FILE|-", help="Write the JSON document to FILE, or to stdout with '-'.", rich_help_panel=opt.OUTPUT)]
CsvFile = Annotated[Optional[Path], typer.Option("--csv", metavar="FILE", help="Write every row (categories, then prompts) as CSV.", rich_help_panel=opt.OUTPUT)]
MarkdownFile = Annotated[Optional[Path], typer.Option("--markdown", metavar="FILE", help="Write a Markdown report.", rich_help_panel=opt.OUTPUT)]
PlotFile = Annotated[Optional[Path], typer.Option("--plot", metavar="FILE.png", help="Plot speedup by K per category and acceptance by draft position (needs matplotlib: pip install 'specrun\\[plot]').", rich_help_panel=opt.OUTPUT)]


def register(app: typer.Typer) -> None:
    """Add `bench` to the `specrun` app."""
    app.command(name="bench")(bench)


def bench(
    target: opt.Target = None,
    draft: opt.Draft = None,
    pair: opt.PairName = None,
    registry: opt.Registry = None,
    spec: SpecList = "off,draft",
    draft_max: DraftMaxList = None,
    temperature: TemperatureList = None,
    max_tokens: MaxTokens = None,
    runs: Runs = None,
    warmup: Warmup = 1,
    category: Category = None,
    prompts: PromptsFile = None,
    limit: Limit = None,
    quick: Quick = False,
    seed: Seed = 0,
    ignore_eos: opt.IgnoreEos = False,
    draft_min: opt.DraftMin = defaults.DRAFT_MIN,
    draft_p_min: opt.DraftPMin = defaults.DRAFT_P_MIN,
    ngram_min: opt.NgramMin = defaults.NGRAM_MIN,
    ngram_max: opt.NgramMax = defaults.NGRAM_MAX,
    top_k: opt.TopK = defaults.TOP_K,
    top_p: opt.TopP = defaults.TOP_P,
    min_p: opt.MinP = defaults.MIN_P,
    chat: opt.Chat = True,
    ctx_size: opt.CtxSize = defaults.CTX_SIZE,
    threads: opt.Threads = 0,
    gpu_layers: opt.GpuLayers = None,
    draft_gpu_layers: opt.DraftGpuLayers = None,
    json_file: JsonFile = None,
    csv_file: CsvFile = None,
    markdown_file: MarkdownFile = None,
    plot_file: PlotFile = None,
    quiet: opt.Quiet = False,
) -> None:
    """Measure plain and speculative decoding side by side: speed, acceptance, cost-model efficiency, correctness."""
    modes = parse_list(spec, str, "--spec")
    ks = parse_list(draft_max, int, "--draft-max") if draft_max is not None else None
    temperatures = parse_list(temperature or "0", float, "--temperature")
    configurations(modes, ks, temperatures)  # bad values fail before any model is touched
    check_ngram_range(ngram_min, ngram_max)
    settings = BenchSettings(
        runs=runs or (QUICK["runs"] if quick else DEFAULT_RUNS),
        warmup=warmup,
        max_tokens=max_tokens or (QUICK["max_tokens"] if quick else DEFAULT_MAX_TOKENS),
        seed=seed, ignore_eos=ignore_eos, draft_min=draft_min, draft_p_min=draft_p_min, top_k=top_k, top_p=top_p, min_p=min_p,
        ngram_min=ngram_min, ngram_max=ngram_max,
    )
    chosen = bench_prompts.select(
        bench_prompts.load_file(prompts) if prompts else bench_prompts.builtin(),
        category, limit or (QUICK["per_category"] if quick else None), shortest=quick and limit is None,
    )
    check_outputs(json_file, csv_file, markdown_file, plot_file)
    load_start = load_average()
    out = Output(quiet=quiet, json_mode=json_file == "-")
    models = resolve_models(target, draft, pair, registry)
    configs = configurations(modes, ks, temperatures, QUICK["draft_max"] if quick else models.recommended_k)
    loaded = Pair(PairConfig(models.target, models.draft, ctx_size=ctx_size, threads=threads, gpu_layers=gpu_layers,
                             draft_gpu_layers=draft_gpu_layers), warn=out.warn)
    try:
        engine = PairEngine(loaded, chat=chat)
        env = environment(loaded, load_average_start=load_start)
        with progress_display(out) as progress:
            result = run_bench(engine, chosen, configs, settings, progress)
        record = {**asdict(settings), "spec": modes, "draft_max": ks, "temperatures": temperatures, "chat": chat,
                  "categories": list(dict.fromkeys(p.category for p in chosen)), "limit": limit, "quick": quick,
                  "prompts_file": str(prompts) if prompts else None}
        doc = document(result, env, record, pieces=engine.piece)
    finally:
        loaded.close()
    write_outputs(doc, out, json_file, csv_file, markdown_file, plot_file)
    if not quiet:
        render_summary(doc, out)
    for warning in doc["warnings"] if quiet else []:
        out.warn(f"warning: {warning}")


def parse_list(text: str, convert: Callable, flag: str) -> list:
    """'1, 2,4' → [1, 2, 4]; a bad item is a usage error naming the flag."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise InputError(f"{flag} needs at least one value", f"pass a comma-separated list to {flag}")
    out = []
    for item in items:
        try:
            out.append(convert(item))
        except ValueError:
            kind = "a whole number" if convert is int else "a number" if convert is float else "valid"
            raise InputError(f"{flag}: {item!r} is not {kind}", f"pass a comma-separated list to {flag}, e.g. 1,2,4") from None
    return out


def check_outputs(json_file: str | None, csv_file: Path | None, markdown_file: Path | None, plot_file: Path | None) -> None:
    """Fail before the benchmark, not after it: missing folders, directories as files, no matplotlib."""
    paths = [(flag, Path(p)) for flag, p in (("--json", json_file if json_file != "-" else None), ("--csv", csv_file),
                                             ("--markdown", markdown_file), ("--plot", plot_file)) if p is not None]
    for flag, path in paths:
        if path.is_dir():
            raise InputError(f"{flag} {path} is a directory", f"give {flag} a file name")
        parent = path.expanduser().resolve().parent
        if not parent.is_dir():
            raise InputError(f"{flag} {path}: the folder {parent} does not exist", "create it or choose another path")
    if plot_file is not None:
        require_matplotlib()


@contextlib.contextmanager
def progress_display(out: Output) -> Iterator[Progress]:
    """A rich progress bar on a terminal; otherwise one line per phase (nothing with --quiet)."""
    if out.quiet:
        yield lambda *_: None
        return
    if out.live:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
        )
        from rich.progress import Progress as Bar

        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Bar(*columns, console=Console(file=out.err), transient=True) as bar:
            task = bar.add_task("starting", total=None)

            def update(phase: str, done: int, total: int, what: str) -> None:
                bar.update(task, completed=done, total=total, description=f"{phase}: {what}" if what else phase)

            yield update
        return
    shown: set[str] = set()

    def lines(phase: str, done: int, total: int, what: str) -> None:
        if phase not in shown and phase != "done":
            shown.add(phase)
            out.warn(f"bench: {phase} ({done}/{total})")

    yield lines


def write_outputs(doc: dict, out: Output, json_file: str | None, csv_file: Path | None, markdown_file: Path | None, plot_file: Path | None) -> None:
    """Every requested output; the JSON document on stdout for '--json -'."""
    if json_file == "-":
        out.document(doc)
    elif json_file:
        write_atomic(Path(json_file), (json.dumps(doc, ensure_ascii=False, indent=2) + "\n").encode())
    if csv_file:
        write_atomic(csv_file, csv_text(doc).encode())
    if markdown_file:
        write_atomic(markdown_file, markdown_text(doc).encode())
    if plot_file:
        write_atomic(plot_file, plot_png(doc))


def render_summary(doc: dict, out: Output) -> None:
    """The category table on stderr: rich on a terminal, Markdown otherwise; then calibration and checks."""
    if out.live:
        from rich import box
        from rich.console import Console
        from rich.table import Table

        headers, rows = table_rows(doc, compact=True)
        table = Table(title="specrun bench", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
        for i, header in enumerate(headers):
            table.add_column(header, justify="left" if i < 2 else "right")
        previous = None
        for row in rows:
            if previous is not None and row[0] != previous:
                table.add_section()
            previous = row[0]
            table.add_row(*row)
        console = Console(file=out.err)
        console.print(table)
        for line in summary_lines(doc):
            console.print(line, highlight=False)
        return
    out.err.write(markdown_table(*table_rows(doc)) + "\n")
    for line in summary_lines(doc):
        out.err.write(line + "\n")
    out.err.flush()

