"""`specrun run --fim-prefix FILE --fim-suffix FILE` writes the middle from the model's FIM prompt,
the same with speculation as without; a model without FIM tokens, or a prompt given too, is one line
and exit 2."""

from __future__ import annotations

import pytest
from cli_helpers import run_json, specrun
from tiny_models import write_tiny_gguf

QWEN = ["<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>"]
GREEDY = ["--temp", "0", "-n", "12", "--draft", "none"]


@pytest.fixture(scope="module")
def coder(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("fim-cli") / "coder.gguf", special_tokens=QWEN)


def code_files(tmp_path):
    prefix, suffix = tmp_path / "before.py", tmp_path / "after.py"
    prefix.write_text("def add(a, b):\n    ", encoding="utf-8")
    suffix.write_text("\n\nprint(add(1, 2))\n", encoding="utf-8")
    return prefix, suffix


@pytest.mark.slow
def test_the_middle_is_written_from_the_fim_prompt_and_speculation_keeps_it(coder, tmp_path):
    prefix, suffix = code_files(tmp_path)
    fim = ["--fim-prefix", str(prefix), "--fim-suffix", str(suffix)]
    plain = run_json("--target", str(coder), "--spec", "off", *fim, *GREEDY)
    spec = run_json("--target", str(coder), "--spec", "ngram", *fim, *GREEDY)
    assert plain["text"] == spec["text"] and plain["stats"]["generated_tokens"] >= 1
    # the prefix's and the suffix's tokens and three markers
    assert plain["stats"]["prompt_tokens"] > 10


def test_a_model_without_fim_tokens_is_one_line_and_exit_2(tiny_target, tmp_path):
    prefix, _ = code_files(tmp_path)
    result = specrun("run", "--target", str(tiny_target), "--draft", "none", "--fim-prefix", str(prefix))
    assert result.returncode == 2 and "cannot fill in the middle" in result.stderr and "Traceback" not in result.stderr


def test_a_prompt_besides_the_fim_files_is_refused(coder, tmp_path):
    prefix, _ = code_files(tmp_path)
    result = specrun("run", "hi", "--target", str(coder), "--fim-prefix", str(prefix))
    assert result.returncode == 2 and "take no prompt" in result.stderr
