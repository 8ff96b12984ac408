"""`specrun serve` as a command: it says where it listens, stops cleanly on SIGTERM (0) and Ctrl-C
(130), and refuses bad flags or a busy port with one line and its exit code."""

from __future__ import annotations

import signal
import socket

import httpx
import openai
import pytest
from cli_helpers import specrun
from serve_helpers import WAIT, start, stop


def test_serve_answers_then_stops_on_sigterm_with_exit_0(tiny_target, tiny_draft):
    process, url, lines = start("-m", str(tiny_target), "-md", str(tiny_draft), "-c", "512", "-t", "1")
    try:
        api = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=WAIT)
        answer = api.chat.completions.create(
            model="x", messages=[{"role": "user", "content": "hi"}], max_tokens=8, temperature=0
        )
        assert answer.usage.completion_tokens == 8
        assert url.startswith("http://127.0.0.1:") and "--spec auto" in lines[-1] and "--parallel 4" in lines[-1]
    finally:
        code, err = stop(process, signal.SIGTERM)
    assert code == 0, err
    assert "stopped after 1 answered requests" in err and "Traceback" not in err


def test_ctrl_c_stops_the_server_with_exit_130(tiny_target):
    process, url, _ = start("-m", str(tiny_target), "-md", "none", "-c", "512", "-t", "1", "-q")
    assert httpx.get(url + "/health").json()["status"] == "ok"
    code, err = stop(process, signal.SIGINT)
    assert code == 130 and "Traceback" not in err


@pytest.mark.slow
def test_without_ctx_size_a_request_gets_the_models_trained_context(tmp_path):
    from tiny_models import write_tiny_gguf

    target = write_tiny_gguf(tmp_path / "long.gguf", seed=0, context_length=2048)
    process, url, lines = start("-m", str(target), "-md", "none", "-t", "1", "--parallel", "1")
    try:
        said = "".join(lines)
        assert "context 2048 tokens a request: the model's trained context" in said, said
        api = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=WAIT)
        answer = api.completions.create(model="x", prompt="x " * 500, max_tokens=1, temperature=0)
        assert answer.usage.prompt_tokens > 512  # more than the tiny model's own test context
        with pytest.raises(openai.BadRequestError, match=r"the context holds 2048 .*--ctx-size"):
            api.completions.create(model="x", prompt="x " * 1500, max_tokens=1)
    finally:
        stop(process, signal.SIGTERM)


@pytest.mark.slow
def test_listening_beyond_loopback_without_a_key_warns(tiny_target):
    process, url, lines = start("-m", str(tiny_target), "-md", "none", "-c", "512", "-t", "1", "--host", "0.0.0.0")
    try:
        assert any("without --api-key" in line for line in lines)
    finally:
        stop(process, signal.SIGTERM)
    process, url, lines = start(
        "-m", str(tiny_target), "-md", "none", "-c", "512", "-t", "1", "--host", "0.0.0.0", "--api-key", "k"
    )
    try:
        assert not any("without --api-key" in line for line in lines)
        assert httpx.get(url + "/v1/models").status_code == 401
    finally:
        stop(process, signal.SIGTERM)


def test_a_port_in_use_is_one_line_and_exit_1(tiny_target):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        result = specrun("serve", "-m", tiny_target, "-md", "none", "--port", str(port))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"specrun: error: port {port} on 127.0.0.1 is in use (stop the other server or pass another --port)"
    ]


@pytest.mark.slow
def test_bad_flags_are_usage_errors(tiny_target):
    result = specrun("serve", "-m", tiny_target, "--schedule", "lifo", "--port", "0")
    assert result.returncode == 2 and "srpt, fcfs" in result.stderr and "Traceback" not in result.stderr
    result = specrun("serve", "-m", tiny_target, "-md", "none", "--spec", "draft", "--port", "0")
    assert result.returncode == 2 and "needs a draft model" in result.stderr
    assert specrun("serve", "--parallel", "0").returncode == 2


def test_draft_max_0_serves_without_drafts(tiny_target, tiny_draft):
    process, url, lines = start(
        "-m", str(tiny_target), "-md", str(tiny_draft), "-c", "512", "-t", "1", "--spec", "ngram", "--draft-max", "0"
    )
    try:
        api = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=WAIT)
        answer = api.completions.create(model="x", prompt="abc abc abc abc abc abc", max_tokens=24, temperature=0)
        assert answer.model_extra["timings"]["draft_n"] == 0
    finally:
        stop(process, signal.SIGTERM)
