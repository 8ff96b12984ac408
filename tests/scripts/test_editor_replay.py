"""scripts/editor_replay.py against a real server: llama.vim's requests at each pause of a block
typed back, a warm-up when the chunks change, every request's time and timings, and a summary
that leaves the cold first request out."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from paths import SCRIPTS
from script_module import script_module
from serve_helpers import FLAT_COSTS, load_pair, served
from tiny_models import write_tiny_gguf

QWEN = ["<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"]


def test_pauses_are_each_lines_start_and_middle_in_a_buffer_without_the_rest_of_the_block():
    lines = ["def f():", "    x = compute_something(1)", "    return x", "", "print(f())"]
    with script_module("editor_replay.py", "editor_replay") as replay:
        steps = list(replay.pauses(lines, 1, 3))
        assert [typed for _, _, typed in steps] == ["    ", "    x = compute_", "    "]  # a short line: no middle
        buffer, at, typed = steps[1]
        assert buffer == ["def f():", "    x = compute_", "", "print(f())"] and at == 1
        body = replay.request(buffer, at, typed, [], 0.0)
        assert body["input_prefix"] == "def f():\n" and body["prompt"] == "    x = compute_"
        assert body["input_suffix"] == "\n\nprint(f())\n" and body["n_indent"] == 4
        blank = replay.request(*steps[0], [], -1)
        assert blank["prompt"] == "" and blank["n_indent"] == 0 and "temperature" not in blank


@pytest.mark.slow
def test_a_replay_against_a_server_records_every_request(tmp_path):
    model = write_tiny_gguf(tmp_path / "coder.gguf", special_tokens=QWEN, context_length=8192)
    pair = load_pair(model, None, ctx_size=8192)
    try:
        with served(pair, costs=FLAT_COSTS, mode="auto", cache_reuse=64) as running:
            out = tmp_path / "editor.json"
            result = subprocess.run(
                [
                    sys.executable,
                    str(SCRIPTS / "editor_replay.py"),
                    str(out),
                    f"a={running.url}",
                    f"b={running.url}",
                    "--lines",
                    "132,136",
                ],
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert result.returncode == 0, result.stderr
    finally:
        pair.close()
    doc = json.loads(out.read_text())
    assert set(doc["requests"]) == {"a", "b"} and len(doc["requests"]["a"]) >= 6
    assert len(doc["warmups_s"]["a"]) == 2  # at the start, and when a chunk is added halfway
    later = doc["requests"]["b"][1:]
    assert all(r["prompt_n"] <= r["prompt_tokens"] for r in later)
    assert doc["summary"]["a"]["requests"] == len(doc["requests"]["a"]) - 1
    assert "median" in result.stdout
