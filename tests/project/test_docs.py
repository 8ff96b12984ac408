"""The README, CHANGELOG and docs/ stay true to the code.

- every option of every command has help and is named somewhere in the documentation;
- every relative link leads to a file that exists, and every #anchor to a heading of that file
  (GitHub's slugs);
- every `specrun …` command quoted in a code span or a shell code block names a command that
  exists and only options that command has (checked against the Typer app, no model is run).
"""

from __future__ import annotations

import pytest
from doc_pages import (
    PAGES,
    broken_links,
    command_problems,
    commands,
    documentation,
    links,
    quoted_commands,
    rel,
    slug,
)
from paths import ROOT


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


@pytest.mark.parametrize("path", PAGES, ids=rel)
def test_relative_links_resolve(path):
    problems = broken_links(path)
    assert not problems, "\n".join(problems)


def test_there_are_pages_and_links_to_check():
    assert (ROOT / "docs").is_dir() and len(PAGES) > 3
    assert sum(len(links(p)) for p in PAGES) > 20


# -- 3. quoted commands ------------------------------------------------------------------------------


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
