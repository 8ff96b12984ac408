"""`specrun run`: one prompt in, generated text on stdout, statistics on stderr or in --json."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from .. import defaults
from ..chat.interrupts import Interrupts
from ..engine.constraint import Constraint
from ..engine.sequence import GenerationSettings, check_prompt_fits
from ..engine.stats import Stats
from ..errors import InputError
from ..models.fim import model_fim_prompt
from ..models.reasoning import CONTENT, REASONING, ReasoningSplitter, join
from ..runtime.chat_format import thinking_variables
from ..runtime.pair import Pair
from ..terminal import Output, mode_label, status_line, summary_parts
from . import fatal
from . import options as opt
from .options import flag_groups
from .prompt_input import read_constraint, read_fim_parts, read_prediction, read_prompt
from .settings import answer_settings, check_runtime, open_pair, pick_seed, resolve, spec_mode


@flag_groups
def run(
    prompt: Annotated[
        str | None, typer.Argument(help="The prompt; '-' or a pipe reads stdin (both given: stdin first).")
    ] = None,
    flags: opt.GenerateFlags = opt.GenerateFlags(),
    max_tokens: opt.MaxTokens = defaults.MAX_TOKENS,
    predict: Annotated[
        Path | None,
        typer.Option(
            "--predict",
            metavar="FILE",
            help="The text the answer is expected to repeat (the file an edit starts from): drafted from, "
            "never changing the answer.",
            rich_help_panel=opt.SPECULATION,
        ),
    ] = None,
    json_schema: Annotated[
        str | None,
        typer.Option(
            "--json-schema",
            metavar="FILE|JSON",
            help="The answer is JSON that validates against this schema (a file, or the schema itself).",
            rich_help_panel=opt.OUTPUT,
        ),
    ] = None,
    grammar: Annotated[
        Path | None,
        typer.Option(
            "--grammar",
            metavar="FILE",
            help="The answer follows this grammar (Lark, or llama.cpp's GBNF).",
            rich_help_panel=opt.OUTPUT,
        ),
    ] = None,
    regex: Annotated[
        str | None,
        typer.Option(
            "--regex",
            metavar="PATTERN",
            help="The whole answer matches this regular expression.",
            rich_help_panel=opt.OUTPUT,
        ),
    ] = None,
    fim_prefix: Annotated[
        Path | None,
        typer.Option(
            "--fim-prefix",
            metavar="FILE",
            help="Fill in the middle: the code before the cursor. The answer is what goes between it and "
            "--fim-suffix (a model with FIM tokens: Qwen2.5-Coder, StarCoder2, CodeLlama, …); no prompt is given.",
            rich_help_panel=opt.OUTPUT,
        ),
    ] = None,
    fim_suffix: Annotated[
        Path | None,
        typer.Option(
            "--fim-suffix",
            metavar="FILE",
            help="Fill in the middle: the code after the cursor (see --fim-prefix).",
            rich_help_panel=opt.OUTPUT,
        ),
    ] = None,
    chat: opt.Chat = True,
    json_output: opt.Json = False,
    quiet: opt.Quiet = False,
) -> None:
    """Generate text for one prompt: text to stdout, statistics to stderr (or one JSON document)."""
    framing, speculation = flags.framing, flags.speculation
    out = Output(quiet=quiet, json_mode=json_output, hide_thinking=framing.hide_thinking)
    check_runtime(flags.runtime)
    infill = fim_prefix is not None or fim_suffix is not None
    if infill and prompt is not None:
        raise InputError("--fim-prefix and --fim-suffix take no prompt", "drop the prompt argument")
    parts = read_fim_parts(fim_prefix, fim_suffix) if infill else None
    text = read_prompt(prompt) if not infill else ""
    predicted_text = read_prediction(predict)
    constrained = read_constraint(json_schema, grammar, regex)
    resolved = resolve(flags.models)
    seed = pick_seed(flags.sampling.seed)
    mode = spec_mode(speculation.spec, flags.models.draft)
    draft_max = defaults.draft_max_for(mode, speculation.draft_max, resolved.recommended_k)
    settings = answer_settings(flags, max_tokens=max_tokens, draft_max=draft_max, seed=seed)
    if constrained is not None:
        settings = replace(settings, constraint=constrained)
    loaded = open_pair(resolved, flags.runtime, out.warn)
    if out.live:
        out.note(f"specrun: {loaded.placement.describe()}")
    try:
        splitter = None
        if parts is not None:
            tokens = model_fim_prompt(loaded.target_model, n_ctx=loaded.n_ctx, n_predict=max_tokens, **parts).tokens
        elif chat:
            prompt = loaded.chat_prompt(text, system=framing.system, variables=thinking_variables(framing.think))
            tokens, splitter = prompt.tokens, prompt.splitter()
        else:
            tokens = loaded.prompt_tokens(text, chat=False, system=framing.system)
        check_prompt_fits(len(tokens), loaded.n_ctx, max_tokens)
        prediction = loaded.prediction_tokens(predicted_text) if predicted_text else None
        generate(loaded, tokens, settings, out, seed, mode, splitter, prediction)
    finally:
        loaded.close()


class AnswerParts:
    """The generated text as it streams, split into reasoning and content when the model thinks:
    content to stdout, reasoning to stderr (Output.thinking)."""

    def __init__(self, out: Output, splitter: ReasoningSplitter | None):
        self.out = out
        self.splitter = splitter
        self.segments: list[tuple[str, str]] = []

    def feed(self, text: str, *, final: bool = False) -> None:
        if self.splitter is None:
            parts = [(CONTENT, text)]
        else:
            parts = self.splitter.feed(text) + (self.splitter.finish() if final else [])
        for kind, piece in parts:
            if kind == REASONING:
                self.out.thinking(piece)
            elif kind == CONTENT:
                self.out.end_thinking()
                self.out.text(piece)
        self.segments += parts
        if final:
            self.out.end_thinking()
            self.splitter = None

    def split(self) -> tuple[str | None, str]:
        whole = join(self.segments)
        return whole.reasoning, whole.content


def generate(
    loaded: Pair,
    tokens: list[int],
    settings: GenerationSettings,
    out: Output,
    seed: int,
    mode: str,
    splitter: ReasoningSplitter | None = None,
    prediction: list[int] | None = None,
) -> None:
    """Stream one generation through `out`; on Ctrl-C flush what was generated, then re-raise. The
    first Ctrl-C takes effect after the step under way (specrun.chat.interrupts), a second one at once."""
    generation = loaded.generation(tokens, settings, mode=mode, prediction=prediction)
    pieces: list[str] = []
    parts = AnswerParts(out, splitter)
    started = time.perf_counter()
    interrupts = Interrupts()

    def flush_tail() -> None:
        """Text of a step interrupted before it was yielded, then whatever was held back."""
        assembler = generation.text
        tail = (assembler.text[len("".join(pieces)) :] if assembler is not None else "") + generation.flush_text()
        pieces.append(tail)
        parts.feed(tail, final=True)

    def flush_before_exit() -> None:
        flush_tail()
        out.end_text()

    try:
        with fatal.flushing(flush_before_exit), interrupts.armed():
            for step in generation.run():
                pieces.append(step.text)
                parts.feed(step.text, final=step.finished is not None)
                out.status(status_line(generation.stats, time.perf_counter() - started, generation.label()))
                if interrupts.requested and step.finished is None:
                    raise KeyboardInterrupt
    except KeyboardInterrupt:
        flush_tail()
        generation.stats.stop_reason = "interrupted"
        _finish(loaded, generation.stats, settings, out, parts, mode, generation.label(), seed)
        raise
    parts.feed("", final=True)
    _finish(loaded, generation.stats, settings, out, parts, mode, generation.label(), seed)


def _finish(
    loaded: Pair,
    stats: Stats,
    settings: GenerationSettings,
    out: Output,
    parts: AnswerParts,
    mode: str,
    label: str,
    seed: int,
) -> None:
    out.end_text()
    if stats.stop_reason == "context":
        out.warn(f"stopped: the context of {loaded.n_ctx} tokens is full (raise --ctx-size)")
    if out.json_mode:
        reasoning, text = parts.split()
        out.document(result_document(loaded, stats, settings, text, seed, mode, reasoning))
    else:
        timing = [f"draft {stats.draft_time:.2f} s / verify {stats.verify_time:.2f} s"] if stats.drafted else []
        out.summary(
            " · ".join([*summary_parts(stats), *timing, mode_label(stats, mode, label), loaded.placement.brief()])
        )


def result_document(
    loaded: Pair,
    stats: Stats,
    settings: GenerationSettings,
    text: str,
    seed: int,
    mode: str,
    reasoning: str | None = None,
) -> dict:
    """The --json document: text (a thinking model's answer without its reasoning), the reasoning,
    statistics, models and settings (schema in docs/run.md)."""
    config = loaded.config
    return {
        "text": text,
        "reasoning_content": reasoning,
        "stats": stats.to_dict(),
        "models": {
            "target": str(Path(config.target).resolve()),
            "draft": str(Path(config.draft).resolve()) if config.draft else None,
        },
        "placement": loaded.placement.to_dict(),
        "settings": {
            "mode": mode,
            "max_tokens": settings.max_tokens,
            "temperature": settings.sampling.temperature,
            "top_k": settings.sampling.top_k,
            "top_p": settings.sampling.top_p,
            "min_p": settings.sampling.min_p,
            "seed": seed,
            "draft_max": settings.k_max_for(mode),
            "draft_min": settings.draft_min,
            "draft_p_min": settings.draft_p_min,
            "ngram_min": settings.ngram_min,
            "ngram_max": settings.ngram_max,
            "stop": list(settings.stop),
            "ignore_eos": settings.ignore_eos,
            "constraint": _constraint_document(settings.constraint),
            "ctx_size": loaded.n_ctx,
            "threads": loaded.threads,
            "rollback": loaded.session.rollback(),
        },
    }


def _constraint_document(constraint: Constraint | None) -> dict | None:
    """What the answer was constrained by: its kind and what was given."""
    return None if constraint is None else {"kind": constraint.kind, "source": constraint.source}
