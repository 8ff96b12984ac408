"""The documentation pages as the docs tests read them: their prose, code spans and shell blocks,
links and anchors (GitHub's slugs), and every `specrun …` command they quote, checked against the
Typer app without running a model."""

from __future__ import annotations

import re
import shlex
import unicodedata
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import typer
from paths import ROOT

from specrun.cli.app import _register_optional, app

PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]


SHELL_LANGUAGES = {"", "sh", "bash", "shell", "console", "text"}
# Shell words that end one command and may start another; a redirection ends the command too.


SEPARATORS = {"|", "||", "&&", ";", "&", "(", ")"}


REDIRECTIONS = {">", ">>", "<", "<<", ">&", "<&", "&>", ">|"}


COMMAND_WORD = re.compile(r"[a-z][a-z0-9-]*")


ENV_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


NUMBER = re.compile(r"-\d+(\.\d+)?")


def rel(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


@cache
def cli():
    _register_optional()
    return typer.main.get_command(app)


def commands() -> dict:
    return cli().commands


def option_names(command) -> set[str]:
    names = {"--help"}
    for param in command.params:
        if param.param_type_name == "option":
            names.update(param.opts)
            names.update(param.secondary_opts)
    return names


# -- reading markdown -------------------------------------------------------------------------------


@dataclass
class Page:
    path: Path
    prose: str  # the text outside fenced code blocks
    fences: list[tuple[str, str]]  # (language, body) of each fenced code block
    indented: list[str]  # the lines of indented code blocks

    @property
    def name(self) -> str:
        return rel(self.path)


@cache
def page(path: Path) -> Page:
    """A page split into prose, fenced code blocks and indented code blocks (four spaces after a
    blank line, or continuing such a block)."""
    prose: list[str] = []
    fences: list[tuple[str, str]] = []
    indented: list[str] = []
    fence: tuple[str, str] | None = None
    body: list[str] = []
    previous_blank = True
    in_indented = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if fence is not None:
            if line.strip() and set(line.strip()) == {fence[0][0]} and len(line.strip()) >= len(fence[0]):
                fences.append((fence[1], "\n".join(body)))
                fence = None
            else:
                body.append(line)
            prose.append("")
            continue
        opening = re.match(r"^\s*(```+|~~~+)\s*([\w+-]*)", line)
        if opening:
            fence, body, in_indented = (opening.group(1), opening.group(2).lower()), [], False
            prose.append("")
            continue
        blank = not line.strip()
        if line.startswith("    ") and not blank and (previous_blank or in_indented):
            indented.append(line[4:])
            in_indented = True
            prose.append("")
        else:
            in_indented = in_indented and blank
            prose.append(line)
        previous_blank = blank
    return Page(path, "\n".join(prose), fences, indented)


def code_spans(text: str) -> list[str]:
    """Inline code spans (backtick runs of equal length), across line breaks as Markdown allows."""
    spans = []
    for match in re.finditer(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", text, re.S):
        spans.append(" ".join(match.group(2).split()))
    return spans


def without_code(text: str) -> str:
    return re.sub(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", " ", text, flags=re.S)


# -- 1. every option is documented ------------------------------------------------------------------


def documentation() -> str:
    return "\n".join(path.read_text(encoding="utf-8") for path in PAGES)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (hyphens and underscores kept),
    spaces to hyphens; inline code, emphasis and links reduced to their text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # [text](url) → text
    text = text.replace("`", "")
    text = re.sub(r"<[^>]+>", "", text)
    text = text.strip().lower()
    kept = []
    for ch in text:
        if ch in "-_ " or ch.isalnum() or unicodedata.category(ch).startswith("M"):
            kept.append(ch)
    return "".join(kept).replace(" ", "-")


@cache
def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in page(path).prose.splitlines():
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        base = slug(match.group(1))
        n = seen.get(base, 0)
        out.add(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    return out


def links(path: Path) -> list[str]:
    """The targets of inline links and images in a page's prose (code spans and blocks left out)."""
    text = without_code(page(path).prose)
    return [m.group(1) for m in re.finditer(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", text)]


def broken_links(path: Path) -> list[str]:
    problems = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.exists():
            problems.append(f"{rel(path)}: link to {target}: {file_part} does not exist")
            continue
        if anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{rel(path)}: link to {target}: no heading with anchor #{anchor} in {rel(resolved)}")
    return problems


def logical_lines(block: str) -> list[str]:
    """A shell block's commands: `\\` continuations joined, blank lines dropped."""
    out, current = [], ""
    for line in block.splitlines():
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        current += line
        if current.strip():
            out.append(current)
        current = ""
    if current.strip():
        out.append(current)
    return out


def strip_placeholders(text: str) -> str:
    """`[PAIR|MODEL]`-style placeholders go; `[--flag VALUE]` keeps its flag; innermost first."""
    while True:
        new = re.sub(r"\[([^\[\]]*)\]", lambda m: m.group(1) if m.group(1).startswith("-") else " ", text)
        if new == text:
            return text
        text = new


def words(text: str) -> list[str]:
    lexer = shlex.shlex(strip_placeholders(text), posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        return list(lexer)
    except ValueError:  # an unbalanced quote: fall back to plain words
        return strip_placeholders(text).split()


def specrun_commands(text: str) -> list[list[str]]:
    """Every `specrun ARGS…` in a line of shell: at a command's start (after any VAR=value), up to the
    next shell operator or redirection."""
    found = []
    tokens = words(text)
    i = 0
    at_start = True
    while i < len(tokens):
        token = tokens[i]
        if token in SEPARATORS:
            at_start = True
            i += 1
            continue
        if at_start and ENV_ASSIGNMENT.match(token):
            i += 1
            continue
        if at_start and (token == "specrun" or token.endswith("/specrun")):
            j = i + 1
            while j < len(tokens) and tokens[j] not in SEPARATORS and tokens[j] not in REDIRECTIONS:
                j += 1
            found.append(tokens[i + 1 : j])
            i = j
            at_start = False
            continue
        at_start = False
        i += 1
    return found


def quoted_commands(path: Path) -> list[tuple[str, list[str]]]:
    """(the quoted text, its arguments after `specrun`) for every command a page quotes."""
    doc = page(path)
    sources = list(code_spans(doc.prose))
    for language, body in doc.fences:
        if language in SHELL_LANGUAGES:
            sources += logical_lines(body)
    sources += logical_lines("\n".join(doc.indented))
    out = []
    for source in sources:
        for args in specrun_commands(source):
            out.append((source, args))
    return out


def command_problems(source: str, args: list[str]) -> list[str]:
    if not args:
        return []
    top = option_names(cli())
    first = args[0]
    if first.startswith("-"):
        return [f"unknown option {first} of specrun itself"] if first.split("=")[0] not in top else []
    if not COMMAND_WORD.fullmatch(first):
        return []  # a message quoting the program (`specrun drafts: skipped …`), not a command
    if first not in commands():
        return [f"no command `specrun {first}`"]
    known = option_names(commands()[first])
    problems = []
    for word in args[1:]:
        if word == "--":
            break
        if not word.startswith("-") or word == "-" or NUMBER.fullmatch(word):
            continue
        flag = word.split("=", 1)[0]
        if flag not in known:
            problems.append(f"`specrun {first}` has no option {flag}")
    return problems
