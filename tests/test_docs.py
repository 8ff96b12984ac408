"""The README, CHANGELOG and docs/ stay true to the code.

- every option of every command has help and is named somewhere in the documentation;
- every relative link leads to a file that exists, and every #anchor to a heading of that file
  (GitHub's slugs);
- every `specrun …` command quoted in a code span or a shell code block names a command that
  exists and only options that command has (checked against the Typer app, no model is run).
"""

from __future__ import annotations

import re
import shlex
import unicodedata
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
import typer

from specrun.cli.app import _register_optional, app

ROOT = Path(__file__).resolve().parent.parent
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


def test_every_command_has_a_page_or_a_mention():
    text = documentation()
    for name in commands():
        assert f"specrun {name}" in text, f"`specrun {name}` is named nowhere in README.md, CHANGELOG.md or docs/"


@pytest.mark.parametrize("name", sorted(commands()))
def test_every_option_has_help_and_is_documented(name):
    command = commands()[name]
    text = documentation()
    for param in command.params:
        if param.param_type_name != "option" or param.hidden:
            continue
        assert param.help, f"specrun {name} {param.opts[0]} has no help"
        for flag in param.opts + param.secondary_opts:
            if flag == "--help":
                continue
            named = f"`{flag}" in text or f"{flag}`" in text or f", {flag}" in text or f"/ {flag}" in text
            assert named, f"specrun {name} {flag} is not named in README.md, CHANGELOG.md or docs/*.md"


# -- 2. links ---------------------------------------------------------------------------------------


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


@pytest.mark.parametrize("path", PAGES, ids=rel)
def test_relative_links_resolve(path):
    problems = broken_links(path)
    assert not problems, "\n".join(problems)


def test_there_are_pages_and_links_to_check():
    assert (ROOT / "docs").is_dir() and len(PAGES) > 3
    assert sum(len(links(p)) for p in PAGES) > 20


# -- 3. quoted commands ------------------------------------------------------------------------------


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


@pytest.mark.parametrize("path", PAGES, ids=rel)
def test_quoted_commands_parse(path):
    problems = []
    for source, args in quoted_commands(path):
        for problem in command_problems(source, args):
            problems.append(f"{rel(path)}: `{source.strip()}`: {problem}")
    assert not problems, "\n".join(problems)


def test_the_pages_quote_commands_of_every_kind():
    quoted = {args[0] for p in PAGES for _, args in quoted_commands(p) if args}
    assert set(commands()) <= quoted, f"never quoted: {sorted(set(commands()) - quoted)}"


# -- the checks fail on broken examples ------------------------------------------------------------


def test_the_checks_catch_what_they_should(tmp_path):
    bad = tmp_path / "bad.md"
    (tmp_path / "other.md").write_text("# Other page\n\n## A `code` heading: here\n")
    bad.write_text(
        "# Bad\n\n"
        "[missing](nowhere.md) [anchor](other.md#not-there) [good](other.md#a-code-heading-here) [self](#bad)\n\n"
        "Run `specrun run --no-such-flag -n 4` or `specrun frobnicate`.\n\n"
        "```bash\n"
        "FOO=1 specrun bench --spec off,auto \\\n    --runs 2 --bogus | tee out.txt\n"
        "```\n\n"
        "```python\nimport specrun  # not shell: not checked\n```\n\n"
        "    cat x | .venv/bin/specrun serve --parallel 2 --nope > log\n"
    )
    link_problems = broken_links(bad)
    assert any("nowhere.md does not exist" in p for p in link_problems), link_problems
    assert any("#not-there" in p for p in link_problems), link_problems
    assert len(link_problems) == 2, link_problems
    found = [problem for source, args in quoted_commands(bad) for problem in command_problems(source, args)]
    assert "`specrun run` has no option --no-such-flag" in found, found
    assert "no command `specrun frobnicate`" in found, found
    assert "`specrun bench` has no option --bogus" in found, found
    assert "`specrun serve` has no option --nope" in found, found
    assert len(found) == 4, found


def test_slugs_follow_github():
    assert slug("Beyond one machine: `specrun worker` and `--rpc`") == "beyond-one-machine-specrun-worker-and---rpc"
    assert slug("`specrun pull [PAIR|MODEL|hf:SPEC]`") == "specrun-pull-pairmodelhfspec"
    assert slug("Drafts of another vocabulary (`--spec text`)") == "drafts-of-another-vocabulary---spec-text"
    assert slug("Offline replay of `auto`") == "offline-replay-of-auto"
