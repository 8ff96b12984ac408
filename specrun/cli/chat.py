"""`specrun chat`: an interactive conversation on a terminal, or scripted turns from a pipe."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from .. import defaults
from ..chat.display import JsonlDisplay, PlainDisplay, TerminalDisplay
from ..chat.input import JsonlInput, LineInput, TerminalInput
from ..chat.repl import Interrupts, run_session
from ..chat.session import ChatSession
from ..chat.slash import ALIASES, COMMANDS
from ..errors import EXIT_USAGE, InputError
from ..runtime.pair import Pair
from ..terminal import Output, isatty
from . import options as opt
from .resolve import resolve_models
from .settings import generation_settings, pair_config, pick_seed, spec_mode

ShowDrafts = Annotated[
    bool, typer.Option("--show-drafts", help="Colour the text that came from accepted drafts (terminal only).", rich_help_panel=opt.OUTPUT)
]
Jsonl = Annotated[
    bool,
    typer.Option("--jsonl", help='Read one JSON message per stdin line ({"role": "user", "content": "..."}); write each answer as a JSON line.', rich_help_panel=opt.OUTPUT),
]


def chat(
    target: opt.Target = None,
    draft: opt.Draft = None,
    pair: opt.PairName = None,
    registry: opt.Registry = None,
    max_tokens: opt.MaxTokens = defaults.CHAT_MAX_TOKENS,
    temperature: opt.Temperature = defaults.TEMPERATURE,
    top_k: opt.TopK = defaults.TOP_K,
    top_p: opt.TopP = defaults.TOP_P,
    min_p: opt.MinP = defaults.MIN_P,
    seed: opt.Seed = None,
    stop: opt.Stop = None,
    ignore_eos: opt.IgnoreEos = False,
    spec: opt.Spec = None,
    draft_max: opt.DraftMax = None,
    draft_min: opt.DraftMin = defaults.DRAFT_MIN,
    draft_p_min: opt.DraftPMin = defaults.DRAFT_P_MIN,
    ngram_min: opt.NgramMin = defaults.NGRAM_MIN,
    ngram_max: opt.NgramMax = defaults.NGRAM_MAX,
    ctx_size: opt.CtxSize = defaults.CTX_SIZE,
    threads: opt.Threads = 0,
    gpu_layers: opt.GpuLayers = None,
    draft_gpu_layers: opt.DraftGpuLayers = None,
    system: opt.System = None,
    show_drafts: ShowDrafts = False,
    jsonl: Jsonl = False,
    quiet: opt.Quiet = False,
) -> None:
    """Chat with a model: live speed and acceptance on a terminal; one turn per line from a pipe."""
    out = Output(quiet=quiet)
    models = resolve_models(target, draft, pair, registry, draft_max)
    terminal = not jsonl and isatty(sys.stdin)
    config = pair_config(models, ctx_size=ctx_size, threads=threads, gpu_layers=gpu_layers, draft_gpu_layers=draft_gpu_layers)
    settings = generation_settings(
        models.draft_max, max_tokens=max_tokens, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=None,
        draft_min=draft_min, draft_p_min=draft_p_min, stop=stop, ignore_eos=ignore_eos,
        ngram_min=ngram_min, ngram_max=ngram_max,
    )
    seed = pick_seed(seed)
    if terminal and not quiet:
        out.warn("loading models…")
    loaded = Pair(config, warn=out.warn)
    try:
        if loaded.target_model.chat_template() is None:
            raise InputError(f"{models.target.name} has no chat template in its metadata", "chat needs one; `specrun run --raw` feeds text as is")
        session = ChatSession(loaded, settings, mode=spec_mode(spec, draft), system=system, seed=seed,
                              recommended_k=models.recommended_k)
        if terminal:
            display = TerminalDisplay(loaded.target_model, show_drafts=show_drafts, quiet=quiet)
            reader = TerminalInput(list(COMMANDS) + list(ALIASES), before_prompt=display.before_prompt)
            display.banner(session)
            run_session(session, reader.read, display, Interrupts(sys.stdin.fileno()))
        else:
            display = JsonlDisplay(quiet=quiet) if jsonl else PlainDisplay(quiet=quiet)
            reader = JsonlInput() if jsonl else LineInput()
            run_session(session, reader.read, display, None)
    finally:
        loaded.close()
    if not terminal and display.errors:
        raise typer.Exit(EXIT_USAGE)


def register(app: typer.Typer) -> None:
    """Add `chat` to the app (once, however often it is called)."""
    if any(info.name == "chat" for info in app.registered_commands):
        return
    app.command(name="chat")(chat)
