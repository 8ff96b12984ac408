"""`specrun bench`: plain and speculative decoding side by side on the same prompts and models.

Progress and the summary table go to stderr (a rich bar and table on a terminal, plain lines and a
Markdown table otherwise); `--json -` puts the one document on stdout. Files (--json FILE, --csv,
--markdown, --plot) are written atomically, and their paths are checked before anything runs, so
a typo cannot cost a finished benchmark.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from .. import defaults
from ..atomic import write_atomic
from ..bench import prompts as bench_prompts
from ..bench.environment import environment, load_average
from ..bench.pair_engine import PairEngine
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
    configurations,
    run_bench,
)
from ..errors import InputError
from ..models.modelfile import feature_head, is_assistant
from ..runtime import heap
from ..runtime.chat_format import thinking_variables
from ..terminal import Output, progress_display
from . import options as opt
from .lists import parse_list
from .options import flag_groups
from .settings import check_runtime, generation_settings, open_pair, resolve

BENCH = "Benchmark"
QUICK = {"max_tokens": 32, "runs": 1, "draft_max": 4, "per_category": 1}

SpecList = Annotated[
    str | None,
    typer.Option(
        "--spec",
        help="Comma-separated speculation modes to compare (off, draft, …; default off,draft, with --serve off,auto; "
        "off,mtp with a Gemma 4 assistant, off,eagle3 or off,dflash with such a head as the draft). "
        "Plain decoding (off) is always measured: it is the baseline of every speedup.",
        rich_help_panel=BENCH,
    ),
]
DraftMaxList = Annotated[
    str | None,
    typer.Option(
        "--draft-max",
        help="Comma-separated K values to sweep, e.g. 1,2,4,8: the most draft tokens per step in every mode (default: "
        "the pair's recommended K, else 4, in the fixed modes, --quick 4; auto's own cap, "
        f"{defaults.AUTO_K_MAX}, under auto).",
        rich_help_panel=BENCH,
    ),
]
TemperatureList = Annotated[
    str | None,
    typer.Option(
        "--temperature",
        "--temp",
        help="Comma-separated temperatures, e.g. 0,0.8 (default 0). At 0 every speculative output is checked against "
        "plain decoding token by token.",
        rich_help_panel=BENCH,
    ),
]
MaxTokens = Annotated[
    int | None,
    typer.Option(
        "--max-tokens",
        "-n",
        min=1,
        help=f"Tokens to generate per run at most (default {defaults.BENCH_MAX_TOKENS}; --quick "
        f"{QUICK['max_tokens']}).",
        rich_help_panel=BENCH,
    ),
]
Runs = Annotated[
    int | None,
    typer.Option(
        "--runs",
        min=1,
        help="Measured repetitions per prompt and configuration, interleaved A B, B A, A B … (default "
        f"{defaults.BENCH_RUNS}; --quick {QUICK['runs']}).",
        rich_help_panel=BENCH,
    ),
]
Warmup = Annotated[
    int,
    typer.Option(
        "--warmup",
        min=0,
        help="Untimed warm-up rounds (one short run per configuration each) before calibration and measurement.",
        rich_help_panel=BENCH,
    ),
]
Category = Annotated[
    list[str] | None,
    typer.Option(
        "--category",
        help="Only these categories (repeatable or comma-separated): code-generation, code-editing, "
        "structured-output, question-answering, creative-writing, or those of --prompts.",
        rich_help_panel=BENCH,
    ),
]
PromptsFile = Annotated[
    Path | None,
    typer.Option(
        "--prompts",
        help='Your own prompts: JSONL, one {"prompt": ..., "category": ..., "id": ..., "system": ..., "schema": ...} '
        'per line (only "prompt" required; a "schema", a JSON Schema object, constrains every run of its prompt and '
        "each answer is checked against it).",
        rich_help_panel=BENCH,
    ),
]
Limit = Annotated[
    int | None,
    typer.Option(
        "--limit", min=1, help="At most this many prompts per category (the first ones).", rich_help_panel=BENCH
    ),
]
Fresh = Annotated[
    bool,
    typer.Option(
        "--fresh",
        help="Start auto afresh in every run, as a new `specrun run` process would (from the cached costs and what "
        "earlier processes learned), instead of carrying its estimates from run to run.",
        rich_help_panel=BENCH,
    ),
]
Quick = Annotated[
    bool,
    typer.Option(
        "--quick",
        help="Smoke run: the shortest prompt per category, 32 tokens, 1 run, K = 4 (explicit flags still win).",
        rich_help_panel=BENCH,
    ),
]
Seed = Annotated[
    int,
    typer.Option(
        "--seed",
        "-s",
        help="Base seed: prompt i uses seed + i in every configuration and run.",
        rich_help_panel=opt.SAMPLING,
    ),
]
JsonFile = Annotated[
    str | None,
    typer.Option(
        "--json",
        metavar="FILE|-",
        help="Write the JSON document to FILE, or to stdout with '-'.",
        rich_help_panel=opt.OUTPUT,
    ),
]
CsvFile = Annotated[
    Path | None,
    typer.Option(
        "--csv", metavar="FILE", help="Write every row (categories, then prompts) as CSV.", rich_help_panel=opt.OUTPUT
    ),
]
MarkdownFile = Annotated[
    Path | None, typer.Option("--markdown", metavar="FILE", help="Write a Markdown report.", rich_help_panel=opt.OUTPUT)
]
PlotFile = Annotated[
    Path | None,
    typer.Option(
        "--plot",
        metavar="FILE.png",
        help="Plot speedup by K per category and acceptance by draft position (needs matplotlib: pip install "
        "'specrun\\[plot]').",
        rich_help_panel=opt.OUTPUT,
    ),
]
SyntheticList = Annotated[
    str | None,
    typer.Option(
        "--synthetic-acceptance",
        metavar="P[,P...]",
        help="Measure the pipeline, not the model: accept each draft position with probability P (seeded) instead of "
        "verifying it, e.g. 0.6,0.8,0.9; every speculative configuration runs once per P. The draft and target "
        "passes still run at their real sizes; such rows are marked synthetic, never checked against plain "
        "decoding, never learned from.",
        rich_help_panel=BENCH,
    ),
]
Predict = Annotated[
    bool,
    typer.Option(
        "--predict",
        help="Also run every speculative configuration with each prompt's last code block (the file an edit starts "
        "from) as its predicted output, as OpenAI's own example sends it; rows marked +prediction.",
        rich_help_panel=BENCH,
    ),
]
SERVE = "Server benchmark"
Serve = Annotated[
    bool,
    typer.Option(
        "--serve",
        help="Benchmark `specrun serve`: a burst of requests (every prompt with a long and a short answer) from "
        "concurrent HTTP clients, per mode, schedule and --concurrency.",
        rich_help_panel=SERVE,
    ),
]
ConcurrencyList = Annotated[
    str,
    typer.Option(
        "--concurrency",
        help="With --serve: comma-separated numbers of sequences decoded together (the server's --parallel), e.g. "
        "1,2,4.",
        rich_help_panel=SERVE,
    ),
]
ScheduleList = Annotated[
    str,
    typer.Option(
        "--schedule", help="With --serve: comma-separated schedules to compare: fcfs, srpt.", rich_help_panel=SERVE
    ),
]


def register(app: typer.Typer) -> None:
    """Add `bench` to the `specrun` app."""
    app.command(name="bench")(bench)


@flag_groups
def bench(
    models: opt.ModelFlags = opt.ModelFlags(),
    spec: SpecList = None,
    draft_max: DraftMaxList = None,
    temperature: TemperatureList = None,
    max_tokens: MaxTokens = None,
    runs: Runs = None,
    warmup: Warmup = 1,
    category: Category = None,
    prompts: PromptsFile = None,
    limit: Limit = None,
    quick: Quick = False,
    fresh: Fresh = False,
    seed: Seed = 0,
    synthetic_acceptance: SyntheticList = None,
    predict: Predict = False,
    ignore_eos: opt.IgnoreEos = False,
    tuning: opt.TuningFlags = opt.TuningFlags(),
    filters: opt.FilterFlags = opt.FilterFlags(),
    chat: opt.Chat = True,
    think: opt.Think = None,
    runtime: opt.RuntimeFlags = opt.RuntimeFlags(),
    json_file: JsonFile = None,
    csv_file: CsvFile = None,
    markdown_file: MarkdownFile = None,
    plot_file: PlotFile = None,
    quiet: opt.Quiet = False,
    serve: Serve = False,
    concurrency: ConcurrencyList = "1,2,4",
    schedule: ScheduleList = "fcfs,srpt",
) -> None:
    """Measure plain and speculative decoding side by side: speed, acceptance, cost-model efficiency, correctness."""
    modes = parse_list(spec or ("off,auto" if serve else "off,draft"), str, "--spec")
    ks = parse_list(draft_max, int, "--draft-max") if draft_max is not None else None
    temperatures = parse_list(temperature or "0", float, "--temperature")
    synthetic = (
        parse_list(synthetic_acceptance, float, "--synthetic-acceptance") if synthetic_acceptance is not None else None
    )
    configurations(modes, ks, temperatures, synthetic=synthetic, predict=predict)  # bad values fail before loading
    if synthetic is not None and serve:
        raise InputError(
            "--synthetic-acceptance measures single requests only", "drop --serve, or drop --synthetic-acceptance"
        )
    if predict and serve:
        raise InputError("--predict measures single requests only", "drop --serve, or drop --predict")
    check_runtime(runtime)
    settings = BenchSettings(
        runs=runs or (QUICK["runs"] if quick else defaults.BENCH_RUNS),
        warmup=warmup,
        base=generation_settings(
            max_tokens=max_tokens or (QUICK["max_tokens"] if quick else defaults.BENCH_MAX_TOKENS),
            temperature=0.0,
            filters=filters,
            tuning=tuning,
            draft_max=None,
            seed=seed,
            ignore_eos=ignore_eos,
        ),
    )
    chosen = bench_prompts.select(
        bench_prompts.load_file(prompts) if prompts else bench_prompts.builtin(),
        category,
        limit or (QUICK["per_category"] if quick else None),
        shortest=quick and limit is None,
    )
    check_outputs(json_file, csv_file, markdown_file, plot_file)
    if serve:
        from . import bench_serve  # the server's modules load only here

        return bench_serve.command(
            models,
            modes,
            ks,
            temperatures,
            settings,
            chosen,
            runtime,
            concurrency,
            schedule,
            runs,
            json_file,
            csv_file,
            markdown_file,
            plot_file,
            quiet,
            thinking_variables(think),
        )
    load_start = load_average()
    out = Output(quiet=quiet, json_mode=json_file == "-")
    resolved = resolve(models)
    if spec is None and resolved.draft is not None and is_assistant(resolved.draft):
        modes = ["off", "mtp"]  # a Gemma 4 assistant drafts under mtp only
    elif spec is None and resolved.draft is not None and (kind := feature_head(resolved.draft)):
        modes = ["off", kind]  # an EAGLE-3 or DFlash head drafts under its own mode
    configs = configurations(
        modes, ks, temperatures, QUICK["draft_max"] if quick else resolved.recommended_k, synthetic, predict
    )
    loaded = open_pair(resolved, runtime, out.warn)
    out.note(f"specrun: {loaded.placement.describe()}")
    try:
        engine = PairEngine(loaded, chat=chat, fresh=fresh, variables=thinking_variables(think))
        heap.settle()  # no full collection in the middle of a timed run
        env = environment(loaded, load_average_start=load_start)
        with progress_display(out.err, unit="steps", quiet=out.quiet) as progress:
            result = run_bench(
                engine, chosen, configs, settings, lambda phase, *rest: progress(f"bench: {phase}", *rest)
            )
        record = {
            **settings.to_dict(),
            "spec": modes,
            "draft_max": ks,
            "temperatures": temperatures,
            "chat": chat,
            "think": think,
            "categories": list(dict.fromkeys(p.category for p in chosen)),
            "limit": limit,
            "quick": quick,
            "fresh": fresh,
            "synthetic_acceptance": synthetic,
            "predict": predict,
            "prompts_file": str(prompts) if prompts else None,
        }
        doc = document(result, env, record, pieces=engine.piece)
    finally:
        loaded.close()
    write_outputs(doc, out, json_file, csv_file, markdown_file, plot_file)
    if not quiet:
        render_summary(doc, out)
    for warning in doc["warnings"] if quiet else []:
        out.warn(f"warning: {warning}")


def check_outputs(
    json_file: str | None, csv_file: Path | None, markdown_file: Path | None, plot_file: Path | None
) -> None:
    """Fail before the benchmark, not after it: missing folders, directories as files, no matplotlib."""
    paths = [
        (flag, Path(p))
        for flag, p in (
            ("--json", json_file if json_file != "-" else None),
            ("--csv", csv_file),
            ("--markdown", markdown_file),
            ("--plot", plot_file),
        )
        if p is not None
    ]
    for flag, path in paths:
        if path.is_dir():
            raise InputError(f"{flag} {path} is a directory", f"give {flag} a file name")
        parent = path.expanduser().resolve().parent
        if not parent.is_dir():
            raise InputError(f"{flag} {path}: the folder {parent} does not exist", "create it or choose another path")
    if plot_file is not None:
        require_matplotlib()


def write_outputs(
    doc: dict,
    out: Output,
    json_file: str | None,
    csv_file: Path | None,
    markdown_file: Path | None,
    plot_file: Path | None,
) -> None:
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
