"""`specrun chat`: an interactive conversation on a terminal, or scripted turns from a pipe."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from .. import defaults
from ..chat.display import JsonlDisplay, PlainDisplay, TerminalDisplay
from ..chat.input import JsonlInput, LineInput, TerminalInput
from ..chat.interrupts import Interrupts
from ..chat.repl import run_session
from ..chat.session import ChatSession
from ..chat.slash import ALIASES, COMMANDS
from ..errors import EXIT_USAGE
from ..runtime.chat_format import thinking_variables
from ..terminal import Output, isatty
from . import options as opt
from .options import flag_groups
from .settings import answer_settings, check_runtime, open_pair, pick_seed, resolve, spec_mode

ShowDrafts = Annotated[
    bool,
    typer.Option(
        "--show-drafts",
        help="Colour the text that came from accepted drafts (terminal only).",
        rich_help_panel=opt.OUTPUT,
    ),
]
Jsonl = Annotated[
    bool,
    typer.Option(
        "--jsonl",
        help='Read one JSON message per stdin line ({"role": "user", "content": "..."}); write each answer as a JSON '
        "line.",
        rich_help_panel=opt.OUTPUT,
    ),
]


@flag_groups
def chat(
    flags: opt.GenerateFlags = opt.GenerateFlags(),
    max_tokens: opt.MaxTokens = defaults.CHAT_MAX_TOKENS,
    show_drafts: ShowDrafts = False,
    jsonl: Jsonl = False,
    quiet: opt.Quiet = False,
) -> None:
    """Chat with a model: live speed and acceptance on a terminal; one turn per line from a pipe."""
    framing, hide_thinking = flags.framing, flags.framing.hide_thinking
    out = Output(quiet=quiet)
    check_runtime(flags.runtime)
    resolved = resolve(flags.models)
    terminal = not jsonl and isatty(sys.stdin)
    settings = answer_settings(flags, max_tokens=max_tokens, draft_max=flags.speculation.draft_max, seed=None)
    seed = pick_seed(flags.sampling.seed)
    if terminal and not quiet:
        out.warn("loading models…")
    loaded = open_pair(resolved, flags.runtime, out.warn)
    try:
        session = ChatSession(
            loaded,
            settings,
            mode=spec_mode(flags.speculation.spec, flags.models.draft),
            system=framing.system,
            seed=seed,
            recommended_k=resolved.recommended_k,
            variables=thinking_variables(framing.think),
        )
        if terminal:
            display = TerminalDisplay(
                loaded.target_model, show_drafts=show_drafts, quiet=quiet, hide_thinking=hide_thinking
            )
            reader = TerminalInput(list(COMMANDS) + list(ALIASES), before_prompt=display.before_prompt)
            display.banner(session)
            run_session(session, reader.read, display, Interrupts(sys.stdin.fileno()))
        else:
            display = JsonlDisplay(quiet=quiet) if jsonl else PlainDisplay(quiet=quiet, hide_thinking=hide_thinking)
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
