"""Slash commands typed at the chat prompt: each one a small handler that returns what to say.

Bad arguments become a one-line reply; nothing here raises to the user.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import SpecrunError
from .session import ChatSession

COMMANDS = {
    "/help": "list commands and keys",
    "/stats": "totals for this session",
    "/reset": "forget the conversation (keeps the system prompt; /save still writes what came before)",
    "/system": "TEXT: set the system prompt ('/system none' clears it, '/system' shows it)",
    "/spec": "MODE: speculation mode: off, draft, ngram, hybrid, text, mtp or auto; '/spec' shows it",
    "/k": "N: most draft tokens per step (K, in every mode; auto picks up to it); 0 turns drafting off",
    "/temp": "X: sampling temperature (0: greedy)",
    "/save": "FILE: write the transcript (.md or .json), atomically; refuses to replace an existing FILE",
    "/save!": "FILE: the same, replacing FILE if it exists",
    "/exit": "leave (also /quit, Ctrl-D)",
}
ALIASES = {"/quit": "/exit", "/q": "/exit", "/?": "/help", "/temperature": "/temp"}

KEYS = [
    ("Enter", "send the message"),
    ('"""', 'a line starting with """ opens a multi-line message; a line ending with """ closes it'),
    ("//text", "send a message that starts with '/'"),
    ("Up / Down", "earlier inputs (line editing as in readline)"),
    ("Ctrl-C", "stop the answer (it stays in the history); at the prompt: clear the line, or exit when empty"),
    ("Ctrl-D", "exit at an empty prompt"),
]


def help_text() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = ["commands:"] + [f"  {name:<{width}}  {text}" for name, text in COMMANDS.items()]
    lines += ["keys:"] + [f"  {key:<9} {text}" for key, text in KEYS]
    return "\n".join(lines)


@dataclass
class Reply:
    """What a slash command has to say; `exit` ends the session."""

    text: str = ""
    error: bool = False
    exit: bool = False


def is_command(line: str) -> bool:
    return line.startswith("/") and not line.startswith("//")


def run_command(session: ChatSession, line: str) -> Reply:
    """Execute one slash command; bad arguments become a one-line reply, never an exception."""
    name, _, arg = line.strip().partition(" ")
    name = ALIASES.get(name.lower(), name.lower())
    arg = arg.strip()
    handler = _HANDLERS.get(name)
    if handler is None:
        close = difflib.get_close_matches(name, list(COMMANDS) + list(ALIASES), n=1)
        hint = f"did you mean {ALIASES.get(close[0], close[0])}? " if close else ""
        return Reply(
            f"unknown command {name} ({hint}/help lists them; //text sends text starting with '/')", error=True
        )
    try:
        return handler(session, arg)
    except SpecrunError as error:
        return Reply(error.one_line(), error=True)


def _stats(session: ChatSession, arg: str) -> Reply:
    t = session.totals.to_dict()
    if not t["turns"]:
        return Reply("no answers yet")
    fmt = lambda v, spec="": "—" if v is None else format(v, spec)  # noqa: E731
    rate = t["acceptance_rate"]
    lines = [
        f"answers       {t['turns']} ({t['interrupted']} interrupted)",
        f"generated     {t['generated_tokens']} tokens in {t['total_time_s']:.2f} s",
        f"decode speed  {fmt(t['decode_tokens_per_s'], '.1f')} tok/s",
        f"first token   {fmt(t['mean_time_to_first_token_s'], '.2f')} s on average",
        f"prompt        {t['prefilled_tokens']} tokens prefilled, {t['reused_prompt_tokens']} reused from the cache",
        f"drafts        {t['accepted']}/{t['drafted']} accepted"
        + (f" ({100 * rate:.1f}%)" if rate is not None else ""),
        f"tokens/step   {fmt(t['mean_tokens_per_step'], '.2f')} over {t['steps']} target passes",
        f"mode          {session.mode}, K={session.k}, temperature {session.settings.sampling.temperature:g}",
    ]
    for name, counts in sorted(t["by_drafter"].items(), key=lambda item: -item[1]["steps"]):
        share = f", {100 * counts['accepted'] / counts['drafted']:.0f}% accepted" if counts["drafted"] else ""
        lines.append(f"  {name:<11} {counts['steps']} steps, {counts['accepted']}/{counts['drafted']} drafted{share}")
    return Reply("\n".join(lines))


def _reset(session: ChatSession, arg: str) -> Reply:
    session.reset()
    kept = " (system prompt kept)" if session.system else ""
    return Reply(f"conversation cleared{kept}; the transcript keeps the earlier turns for /save")


def _system(session: ChatSession, arg: str) -> Reply:
    if not arg:
        return Reply(
            f"system prompt: {session.system!r}" if session.system else "no system prompt (/system TEXT sets one)"
        )
    session.set_system(None if arg.lower() == "none" else arg)
    return Reply(
        "system prompt cleared" if session.system is None else "system prompt set; it applies from the next answer"
    )


def _spec(session: ChatSession, arg: str) -> Reply:
    if not arg:
        return Reply(f"speculation mode: {session.mode} (K={session.k})")
    session.set_mode(arg.lower())
    return Reply(f"speculation mode: {session.mode} (K={session.k})")


def _k(session: ChatSession, arg: str) -> Reply:
    try:
        k = int(arg)
    except ValueError:
        return Reply(
            f"/k needs a whole number ≥ 0, got {arg!r}" if arg else f"K={session.k} (/k N changes it)", error=bool(arg)
        )
    if k < 0:
        return Reply("/k needs a whole number ≥ 0", error=True)
    session.set_k(k)
    return Reply(f"K={k}" + (" (drafting off)" if k == 0 else ""))


def _temp(session: ChatSession, arg: str) -> Reply:
    try:
        value = float(arg)
    except ValueError:
        current = session.settings.sampling.temperature
        return Reply(
            f"/temp needs a number ≥ 0, got {arg!r}" if arg else f"temperature {current:g} (/temp X changes it)",
            error=bool(arg),
        )
    if not value >= 0 or value == float("inf"):
        return Reply("/temp needs a number ≥ 0", error=True)
    session.set_temperature(value)
    return Reply(f"temperature {value:g}" + (" (greedy)" if value == 0 else ""))


def _save(session: ChatSession, arg: str, replace: bool = False) -> Reply:
    if not arg:
        return Reply(f"/save{'!' if replace else ''} needs a file name ending in .md or .json", error=True)
    return Reply(f"saved {session.save(arg, replace=replace)}")


_HANDLERS: dict[str, Callable[[ChatSession, str], Reply]] = {
    "/help": lambda session, arg: Reply(help_text()),
    "/stats": _stats,
    "/reset": _reset,
    "/system": _system,
    "/spec": _spec,
    "/k": _k,
    "/temp": _temp,
    "/save": _save,
    "/save!": lambda session, arg: _save(session, arg, replace=True),
    "/exit": lambda session, arg: Reply(exit=True),
}
