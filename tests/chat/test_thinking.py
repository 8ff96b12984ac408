"""Thinking models in run, chat, bench and the library: --think/--no-think reach the template, the
reasoning goes to stderr (dimmed on a terminal) or nowhere (--hide-thinking), the answer to stdout,
and --json / --jsonl / the library keep them apart. The `thinker` models answer a known text
(conftest: THINKER_ANSWER), so every assertion is about real generation through llama.cpp."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import subprocess
import sys

import pytest
from cli_helpers import env as cli_env
from cli_helpers import run_json, specrun
from conftest import THINKER_CONTENT, THINKER_REASONING

PLAIN = ["--draft", "none", "--temp", "0", "-n", "20", "-t", "1"]
DIM = "\x1b[2m"


def test_run_puts_the_answer_on_stdout_and_the_reasoning_on_stderr(thinker):
    result = specrun("run", "hi", "--target", thinker, *PLAIN)
    assert result.returncode == 0, result.stderr
    assert result.stdout == THINKER_CONTENT
    assert f"{THINKER_REASONING}\n" in result.stderr and DIM not in result.stderr  # stderr is not a terminal: plain
    assert "<think>" not in result.stdout + result.stderr


def test_hide_thinking_drops_the_reasoning(thinker):
    result = specrun("run", "hi", "--target", thinker, *PLAIN, "--hide-thinking")
    assert result.returncode == 0, result.stderr
    assert result.stdout == THINKER_CONTENT and THINKER_REASONING not in result.stderr


def test_raw_mode_does_not_split(thinker):
    result = specrun("run", "<|im_start|>assistant\n", "--target", thinker, *PLAIN, "--raw", "--quiet")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "<think>\tHm!</think> Yes"


def test_json_carries_the_reasoning_apart(thinker):
    doc = run_json("hi", "--target", thinker, *PLAIN)
    assert (doc["text"], doc["reasoning_content"]) == (THINKER_CONTENT, THINKER_REASONING)
    assert doc["stats"]["stop_reason"] == "eog"


@pytest.mark.slow
def test_think_and_no_think_reach_the_template(thinker):
    """Qwen3's template closes an empty reasoning in the prompt when enable_thinking is false."""
    from specrun.engine.model import Model

    default, on, off = (
        run_json("hi", "--target", thinker, *PLAIN, *flag)["stats"]["prompt_tokens"]
        for flag in ([], ["--think"], ["--no-think"])
    )
    model = Model(thinker)
    try:
        closed = len(model.tokenize("<think>\n\n</think>\n\n", add_special=False, parse_special=True))
    finally:
        model.close()
    assert default == on and off == on + closed


def test_a_terminal_shows_the_reasoning_dimmed(thinker):
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "specrun", "run", "hi", "--target", str(thinker), *PLAIN],
        stdout=subprocess.PIPE,
        stderr=follower,
        stdin=subprocess.DEVNULL,
        env=cli_env(),
    )
    os.close(follower)
    out, _ = proc.communicate(timeout=120)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    screen = b"".join(chunks).decode("utf-8", "replace")
    assert proc.returncode == 0 and out.decode() == THINKER_CONTENT
    assert (
        "".join(re.findall(r"\x1b\[2m(.*?)\x1b\[22m", screen)) == THINKER_REASONING
    )  # each piece dimmed as it streams
    # meanwhile the status line is drawn (and cleared) on the line below, never over the reasoning
    during = screen[screen.index(DIM) : screen.rindex("\x1b[22m")]
    assert during.count("\x1b[K") == during.count("\x1b7\x1bD\r\x1b[K") > 0


def test_piped_chat_splits_every_turn(thinker):
    result = subprocess.run(
        [sys.executable, "-m", "specrun", "chat", "--target", str(thinker), *PLAIN],
        input="hi\nagain\n",
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{THINKER_CONTENT}\n{THINKER_CONTENT}\n"
    assert result.stderr.count(f"{THINKER_REASONING}\n") == 2


def test_jsonl_chat_gives_the_reasoning_as_a_field(thinker):
    result = subprocess.run(
        [sys.executable, "-m", "specrun", "chat", "--target", str(thinker), *PLAIN, "--jsonl", "--hide-thinking"],
        input='{"role": "user", "content": "hi"}\n',
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "role": "assistant",
        "content": THINKER_CONTENT,
        "reasoning_content": THINKER_REASONING,
    }


@pytest.fixture(scope="module")
def thinker_pair(thinker):
    from specrun.runtime.pair import Pair, PairConfig

    loaded = Pair(PairConfig(thinker, thinker, ctx_size=512, threads=1), warn=lambda line: None)
    yield loaded
    loaded.close()


def test_a_session_keeps_the_reasoning_with_the_answer_and_the_template_drops_it_later(thinker_pair):
    from specrun.chat.session import ChatSession
    from specrun.engine.sampling import SamplingParams
    from specrun.engine.sequence import GenerationSettings

    session = ChatSession(
        thinker_pair, GenerationSettings(max_tokens=20, sampling=SamplingParams(temperature=0)), seed=1, mode="off"
    )
    for content in ("hi", "again"):
        turn = session.prepare(content)
        list(turn.steps())
        answer = turn.finish()
        assert (answer.text, answer.reasoning, answer.raw) == (
            THINKER_CONTENT,
            THINKER_REASONING,
            "<think>\tHm!</think> Yes",
        )
    assert session.messages[1] == {
        "role": "assistant",
        "content": THINKER_CONTENT,
        "reasoning_content": THINKER_REASONING,
    }
    rendered = thinker_pair.chat_format.render(session.messages + [{"role": "user", "content": "x"}])
    assert THINKER_REASONING not in rendered  # Qwen3's template keeps only the latest turn's reasoning


def test_the_terminal_display_routes_reasoning_and_colours_content_from_drafts(thinker_pair):
    """With --show-drafts the draft colours follow the raw text while the reasoning is cut out of
    it: what stdout gets is the content, whole, some of it marked as drafted (the draft is the
    target itself, so its drafts are accepted)."""
    from specrun.chat.display import TerminalDisplay
    from specrun.chat.repl import run_session
    from specrun.chat.session import ChatSession
    from specrun.engine.sampling import SamplingParams
    from specrun.engine.sequence import GenerationSettings

    out, err = io.StringIO(), io.StringIO()
    display = TerminalDisplay(thinker_pair.target_model, show_drafts=True, quiet=True, stdout=out, stderr=err)
    shown: list[tuple[str, bool]] = []
    original = display._content
    display._content = lambda pieces: (shown.extend(pieces), original(pieces))
    session = ChatSession(
        thinker_pair,
        GenerationSettings(max_tokens=20, sampling=SamplingParams(temperature=0), draft_max=4),
        seed=1,
        mode="draft",
    )
    inputs = iter(["hi", None])
    run_session(session, lambda: next(inputs), display, None)
    assert out.getvalue() == f"{THINKER_CONTENT}\n"
    assert f"{THINKER_REASONING}\n" in err.getvalue()
    assert "".join(text for text, _ in shown) == THINKER_CONTENT and any(drafted for _, drafted in shown)


def test_the_library_splits_the_answer(thinker_pair):
    import specrun

    result = specrun.generate(thinker_pair, "hi", mode="off", max_tokens=20, temperature=0)
    assert (result.text, result.reasoning) == (THINKER_CONTENT, THINKER_REASONING)
    off = specrun.generate(thinker_pair, "hi", mode="off", max_tokens=20, temperature=0, think=False)
    assert off.stats.prompt_tokens > result.stats.prompt_tokens
    raw = "".join(step.text for step in specrun.stream(thinker_pair, "hi", mode="off", max_tokens=20, temperature=0))
    split = specrun.split_reasoning(raw, thinker_pair.chat_format.tags)
    assert (split.content, split.reasoning) == (THINKER_CONTENT, THINKER_REASONING)


def test_an_opening_template_starts_the_answer_inside_the_reasoning(opening_thinker):
    doc = run_json("hi", "--target", opening_thinker, *PLAIN)
    assert (doc["text"], doc["reasoning_content"]) == (THINKER_CONTENT, THINKER_REASONING)


@pytest.mark.slow
def test_bench_think_flags_reach_the_prompts(thinker, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "hi", "id": "hi"}\n')

    def tokens(*flags) -> int:
        out = tmp_path / "b.json"
        result = specrun(
            "bench",
            "--target",
            thinker,
            "--draft",
            "none",
            "--spec",
            "off",
            "--prompts",
            prompts,
            "--runs",
            "1",
            "--warmup",
            "0",
            "--max-tokens",
            "4",
            "-t",
            "1",
            "--json",
            out,
            "--quiet",
            *flags,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr
        doc = json.loads(out.read_text())
        return doc["prompt_set"][0]["prompt_tokens"]

    assert tokens("--no-think") > tokens("--think")
