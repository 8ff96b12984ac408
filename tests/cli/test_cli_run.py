"""`specrun run` as shell scripts use it: prompts from arguments and pipes, --json, exit codes, bad
input as one line, a closed pipe, Ctrl-C."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
import time

import pytest
from cli_helpers import env as cli_env
from cli_helpers import popen, run_json, specrun
from tiny_models import write_tiny_gguf

from specrun import defaults

GREEDY = ["--temp", "0", "--raw", "--ignore-eos"]


def models(tiny_target, tiny_draft):
    return ["--target", tiny_target, "--draft", tiny_draft]


def test_argument_prompt_streams_text_and_summarises_on_stderr(tiny_target, tiny_draft):
    result = specrun("run", "hello", *models(tiny_target, tiny_draft), "-n", "12", *GREEDY, "--spec", "draft")
    assert result.returncode == 0
    assert result.stdout and "Traceback" not in result.stderr
    assert "12 tok · " in result.stderr and "accept" in result.stderr


def test_quiet_drops_the_summary(tiny_target):
    result = specrun("run", "hello", "--target", tiny_target, "--draft", "none", "-n", "5", "--quiet", *GREEDY)
    assert result.returncode == 0 and result.stderr == ""


@pytest.mark.slow
def test_speculative_json_equals_plain_json_text(tiny_target, tiny_draft):
    spec = run_json(
        *models(tiny_target, tiny_draft), "-n", "48", *GREEDY, "--spec", "draft", stdin="def fibonacci(n):\n"
    )
    plain = run_json("--target", tiny_target, "--draft", "none", "-n", "48", *GREEDY, stdin="def fibonacci(n):\n")
    assert spec["text"] == plain["text"]
    assert spec["stats"]["drafted"] > 0 and spec["stats"]["acceptance_rate"] is not None
    assert plain["stats"]["drafted"] == 0


ODD_CONTENT = "a\u0000b \u2028 \U0001f327\ufe0f \x7f \U0010ffff é"  # NUL, separators, emoji, DEL, the last code point


@pytest.mark.slow
def test_nul_and_every_code_point_reach_the_model_through_run_and_chat(tiny_target):
    """The whole message is rendered and tokenized, NUL included (C strings would cut it there):
    the prompt `run` and `chat` feed has as many tokens as the rendered conversation."""
    from specrun.engine.model import Model
    from specrun.runtime.chat_format import ChatFormat

    model = Model(tiny_target)
    try:
        rendered = ChatFormat(model, print).prompt([{"role": "user", "content": ODD_CONTENT}])
        cut = ChatFormat(model, print).prompt([{"role": "user", "content": ODD_CONTENT.split("\0")[0]}])
    finally:
        model.close()
    assert "\0" in rendered.text and len(cut.tokens) < len(rendered.tokens)
    doc = run_json("-", "--target", tiny_target, "--draft", "none", "-n", "2", "--temp", "0", stdin=ODD_CONTENT)
    assert doc["stats"]["prompt_tokens"] == len(rendered.tokens)
    line = json.dumps({"role": "user", "content": ODD_CONTENT}) + "\n"
    chat = specrun("chat", "--jsonl", "--target", tiny_target, "--draft", "none", "-n", "2", "--temp", "0", stdin=line)
    assert chat.returncode == 0, chat.stderr
    assert f"prompt {len(rendered.tokens)} tok" in chat.stderr


def test_json_schema(tiny_target, tiny_draft):
    doc = run_json("x", *models(tiny_target, tiny_draft), "-n", "8", *GREEDY, "--seed", "3")
    assert set(doc) == {"text", "reasoning_content", "stats", "models", "settings", "placement"}
    assert doc["reasoning_content"] is None  # the tiny models' template has no think tags
    assert set(doc["stats"]) >= {
        "prompt_tokens",
        "generated_tokens",
        "time_to_first_token_s",
        "decode_tokens_per_s",
        "total_time_s",
        "drafted",
        "accepted",
        "acceptance_rate",
        "mean_tokens_per_step",
        "acceptance_by_position",
        "draft_time_s",
        "verify_time_s",
        "stop_reason",
    }
    assert doc["models"]["target"].endswith("target.gguf") and doc["models"]["draft"].endswith("draft.gguf")
    assert doc["settings"]["seed"] == 3 and doc["settings"]["temperature"] == 0.0
    assert doc["stats"]["generated_tokens"] == 8


@pytest.mark.slow
def test_stdin_and_argument_are_joined(tiny_target):
    joined = run_json("second", "--target", tiny_target, "--draft", "none", "-n", "1", *GREEDY, stdin="first\n")
    explicit = run_json("first\nsecond", "--target", tiny_target, "--draft", "none", "-n", "1", *GREEDY)
    alone = run_json("second", "--target", tiny_target, "--draft", "none", "-n", "1", *GREEDY)
    assert joined["stats"]["prompt_tokens"] == explicit["stats"]["prompt_tokens"] > alone["stats"]["prompt_tokens"]
    dash = run_json("-", "--target", tiny_target, "--draft", "none", "-n", "1", *GREEDY, stdin="first\nsecond")
    assert dash["stats"]["prompt_tokens"] == explicit["stats"]["prompt_tokens"]


@pytest.mark.parametrize("mode", ["off", "draft", "ngram", "hybrid"])
@pytest.mark.slow
def test_seeded_sampling_is_reproducible_in_fixed_modes(tiny_target, tiny_draft, mode):
    args = (
        "x",
        *models(tiny_target, tiny_draft),
        "-n",
        "20",
        "--temp",
        "1.0",
        "--seed",
        "42",
        "--raw",
        "--ignore-eos",
        "--spec",
        mode,
    )
    assert run_json(*args)["text"] == run_json(*args)["text"]


def test_draft_none_means_plain_decoding_and_auto_is_the_default(tiny_target, tiny_draft):
    plain = run_json("x", "--target", tiny_target, "--draft", "none", "-n", "10", *GREEDY)
    assert plain["settings"]["mode"] == "off" and plain["stats"]["drafted"] == 0
    auto = run_json("x", *models(tiny_target, tiny_draft), "-n", "10", *GREEDY)
    assert auto["settings"]["mode"] == "auto" and auto["stats"]["policy"]["choices"]
    assert auto["text"] == plain["text"]


def test_unknown_spec_mode_is_a_usage_error(tiny_target):
    one_line_error(specrun("run", "x", "--target", tiny_target, "--spec", "turbo"), 2, "auto")


@pytest.mark.slow
def test_ngram_range_reaches_the_lookup_and_the_json(tiny_target):
    args = ("--target", tiny_target, "--draft", "none", "-n", "24", *GREEDY, "--raw")
    plain = run_json("ab ab ab ab", *args)
    doc = run_json("ab ab ab ab", *args, "--spec", "ngram", "--ngram-min", "2", "--ngram-max", "3")
    assert doc["settings"]["ngram_min"] == 2 and doc["settings"]["ngram_max"] == 3
    assert doc["text"] == plain["text"]


def test_ngram_min_above_max_is_a_usage_error(tiny_target):
    one_line_error(
        specrun("run", "x", "--target", tiny_target, "--ngram-min", "5", "--ngram-max", "3"), 2, "--ngram-max"
    )


def one_line_error(result, code: int, *words: str) -> None:
    assert result.returncode == code, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for word in words:
        assert word in lines[0]


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda d: d / "missing.gguf", ["does not exist"]),
        (lambda d: d, ["directory"]),
        (lambda d: (d / "notes.gguf").write_text("hello") and d / "notes.gguf", ["not a GGUF"]),
    ],
    ids=["missing", "directory", "not-gguf"],
)
def test_bad_model_paths_exit_2_with_one_line(tmp_path, make, words):
    one_line_error(specrun("run", "hi", "--target", make(tmp_path), "--draft", "none"), 2, *words)


def test_truncated_gguf_exits_2(tmp_path, tiny_target):
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(tiny_target.read_bytes()[:100_000])
    one_line_error(specrun("run", "hi", "--target", truncated, "--draft", "none"), 2, "truncated")


def test_prompt_longer_than_context_exits_2(tiny_target):
    result = specrun("run", "word " * 2000, "--target", tiny_target, "--draft", "none", "-c", "256", "--raw")
    one_line_error(result, 2, "--ctx-size")


def test_no_prompt_exits_2(tiny_target):
    one_line_error(specrun("run", "--target", tiny_target, "--draft", "none"), 2, "no prompt")


def test_incompatible_pair_exits_3_before_loading_weights(tiny_target, tiny_lossy, tmp_path):
    one_line_error(specrun("run", "hi", "--target", tiny_target, "--draft", tiny_lossy), 3, "cannot draft")
    # A draft whose vocabulary shares neither tokens nor text with the target's is refused on the vocabulary.
    other = write_tiny_gguf(tmp_path / "bos.gguf", bos_id=3, token_overrides={0xF0: "[lost]"})
    one_line_error(specrun("run", "hi", "--target", tiny_target, "--draft", other), 3, "BOS")


def test_a_template_that_refuses_the_conversation_is_one_line_and_exit_2(tmp_path):
    template = (
        "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
        "{{ messages[0]['content'] }}"
    )
    strict = write_tiny_gguf(tmp_path / "strict.gguf", chat_template=template)
    result = specrun("run", "hi", "--system", "be brief", "--target", strict, "--draft", "none", "-n", "2")
    one_line_error(result, 2, "the chat template of strict.gguf refused the conversation: System role not supported")
    assert specrun("run", "hi", "--target", strict, "--draft", "none", "-n", "2").returncode == 0


def test_unknown_option_is_a_usage_error(tiny_target):
    result = specrun("run", "hi", "--target", tiny_target, "--no-such-flag")
    assert result.returncode == 2 and "Traceback" not in result.stderr


def test_debug_env_shows_traceback(tmp_path):
    result = specrun("run", "hi", "--target", tmp_path / "missing.gguf", "--draft", "none", env={"SPECRUN_DEBUG": "1"})
    assert result.returncode != 0 and "Traceback" in result.stderr


LONG = ["--draft", "none", "-n", "6000", "-c", "8192", "--temp", "0", "--raw", "--ignore-eos"]


def test_closed_pipe_ends_quietly(tiny_target):
    proc = popen(
        "run",
        "hi",
        "--target",
        tiny_target,
        *LONG,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    proc.stdout.read(10)
    proc.stdout.close()  # like `| head -c 10`
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert b"Traceback" not in err and b"Error" not in err


@pytest.mark.slow
def test_ctrl_c_flushes_partial_text_and_summary_then_exits_130(tiny_target):
    """The signal is sent while specrun cannot have finished: its stdout pipe is shrunk to one page
    and left unread until nearly full, so the run is blocked writing (or will be within a few
    tokens), far from its 6000 tokens, whatever the timing."""
    proc = popen(
        "run",
        "hi",
        "--target",
        tiny_target,
        *LONG,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    reader = proc.stdout.fileno()
    size = fcntl.fcntl(reader, F_SETPIPE_SZ, 4096)
    deadline = time.monotonic() + 60
    while _unread(reader) < size - 64:
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before filling the pipe"
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert len(out) > size - 64  # what waited in the pipe, then the text held back, all flushed
    generated = int(re.search(r"(\d+) tok · ", err.decode()).group(1))
    assert generated < 6000
    plain = subprocess.run(
        [
            sys.executable,
            "-m",
            "specrun",
            "run",
            "hi",
            "--target",
            str(tiny_target),
            *LONG[:2],
            "-n",
            str(generated),
            *LONG[4:],
        ],
        capture_output=True,
        env=cli_env(),
        timeout=120,
    )
    assert plain.stdout == out  # exactly the text of the tokens generated before the signal, byte for byte
    assert b"Traceback" not in err


F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


def _unread(fd: int) -> int:
    """Bytes waiting in a pipe."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


def test_live_status_line_on_a_terminal(tiny_target, tiny_draft):
    """With stderr a terminal (stdout piped), a status line with tok/s and acceptance is redrawn."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "specrun",
            "run",
            "hi",
            *models(tiny_target, tiny_draft),
            "-n",
            "40",
            *GREEDY,
            "--spec",
            "draft",
        ],
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
    assert proc.returncode == 0
    assert "\r\x1b[K" in screen and "tok/s" in screen and "accept" in screen
    assert b"\x1b" not in out  # stdout stays clean text


def test_a_command_module_that_fails_to_import_is_reported_not_hidden():
    """A bug in a command group must not make its command vanish: it is an internal error, exit 1."""
    code = "import sys; sys.modules['specrun.cli.chat'] = None; from specrun.cli.app import main; main(['--help'])"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), timeout=60)
    assert result.returncode == 1
    assert (
        "internal error" in result.stderr and "specrun.cli.chat" in result.stderr and "Traceback" not in result.stderr
    )


@pytest.mark.slow
def test_draft_max_is_the_cap_in_every_mode_and_auto_says_its_default(tiny_target, tiny_draft):
    auto = run_json("abc abc abc", *models(tiny_target, tiny_draft), "-n", "8", *GREEDY)
    assert auto["settings"]["mode"] == "auto" and auto["settings"]["draft_max"] == defaults.AUTO_K_MAX
    capped = run_json("abc abc abc", *models(tiny_target, tiny_draft), "-n", "8", *GREEDY, "--draft-max", "3")
    assert capped["settings"]["draft_max"] == 3 and len(capped["stats"]["drafted_by_position"]) <= 3
    fixed = run_json("abc", *models(tiny_target, tiny_draft), "-n", "8", *GREEDY, "--spec", "draft")
    assert fixed["settings"]["draft_max"] == 4


def test_a_child_started_in_another_folder_runs_this_checkouts_specrun(tmp_path):
    from cli_helpers import CHECKOUT

    result = subprocess.run(
        [sys.executable, "-c", "import specrun; print(specrun.__file__)"],
        cwd=tmp_path,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(CHECKOUT / "specrun" / "__init__.py")


@pytest.mark.parametrize("mode", ["off", "draft"])
def test_ctrl_c_inside_a_step_ends_after_it_so_the_text_printed_is_that_of_the_tokens_counted(
    tiny_target, tiny_draft, monkeypatch, mode
):
    """SIGINT arrives while a token is being committed (between its append and its text): the run
    stops after that step, and the text printed is exactly the text of the tokens it reports."""
    import io

    from specrun.cli.run import generate
    from specrun.engine.sampling import SamplingParams
    from specrun.engine.sequence import GenerationSettings
    from specrun.engine.text import TextAssembler
    from specrun.runtime.pair import Pair, PairConfig
    from specrun.terminal import Output

    loaded = Pair(PairConfig(tiny_target, tiny_draft, ctx_size=512, threads=1), warn=lambda line: None)
    tokens = loaded.prompt_tokens("hi there", chat=False)

    def run(max_tokens: int) -> tuple[str, int]:
        stdout = io.StringIO()
        out = Output(stdout=stdout, stderr=io.StringIO())
        settings = GenerationSettings(max_tokens=max_tokens, sampling=SamplingParams(temperature=0.0), ignore_eos=True)
        try:
            generate(loaded, tokens, settings, out, 1, mode)
        except KeyboardInterrupt:
            pass
        return stdout.getvalue(), int(re.search(r"(\d+) tok · ", out.err.getvalue()).group(1))

    feed, calls = TextAssembler.feed, []

    def feed_then_signal(self, piece):
        calls.append(piece)
        if len(calls) == 12:
            os.kill(os.getpid(), signal.SIGINT)  # Python raises it at its next instruction, here
        return feed(self, piece)

    previous = signal.getsignal(signal.SIGINT)
    try:
        with monkeypatch.context() as patch:
            patch.setattr(TextAssembler, "feed", feed_then_signal)
            text, generated = run(200)
        assert signal.getsignal(signal.SIGINT) is previous
        assert 12 <= generated < 200
        plain_text, plain_generated = run(generated)
        assert plain_generated == generated and text == plain_text
    finally:
        signal.signal(signal.SIGINT, previous)
        loaded.close()
