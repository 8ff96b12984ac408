"""`specrun run --predict FILE` drafts from the file and never changes the answer; a bad file, or a
bad `serve --lookup-pool`, is one line and exit 2."""

from __future__ import annotations

import pytest
from cli_helpers import run_json, specrun

from specrun.engine.model import Model
from specrun.runtime.chat_format import ChatFormat

GREEDY = ["--temp", "0", "--raw", "--ignore-eos", "-n", "32", "--draft", "none"]


@pytest.mark.slow
def test_a_prediction_drafts_and_the_answer_stands(tiny_target, tmp_path):
    plain = run_json("one two three", "--target", str(tiny_target), "--spec", "off", *GREEDY, "--json")
    predicted = tmp_path / "before.txt"
    predicted.write_text("one two three four five six seven eight nine ten " * 4, encoding="utf-8")
    spec = run_json(
        "one two three", "--target", str(tiny_target), "--spec", "ngram", *GREEDY, "--predict", str(predicted), "--json"
    )
    assert spec["text"] == plain["text"]


@pytest.mark.parametrize(
    "make, said",
    [
        (lambda tmp: tmp / "missing.txt", "file not found"),
        (lambda tmp: tmp, "is a directory"),
        (lambda tmp: (tmp / "bin.dat").write_bytes(b"\xff\xfe\xfa") and tmp / "bin.dat", "not UTF-8"),
    ],
)
def test_a_bad_prediction_file_is_one_line_and_exit_2(tiny_target, tmp_path, make, said):
    result = specrun("run", "hi", "--target", str(tiny_target), "--predict", str(make(tmp_path)))
    assert result.returncode == 2 and said in result.stderr and "Traceback" not in result.stderr


def test_an_unknown_lookup_pool_setting_is_a_usage_error(tiny_target):
    result = specrun("serve", "-m", str(tiny_target), "-md", "none", "--port", "0", "--lookup-pool", "maybe")
    assert result.returncode == 2 and "--lookup-pool" in result.stderr and "Traceback" not in result.stderr


def test_message_boundaries_are_where_the_rendered_prefix_ends(tiny_target):
    model = Model(tiny_target)
    try:
        chat = ChatFormat(model, warn=lambda _: None)
        messages = [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": "first answer"},
            {"role": "user", "content": "second question"},
        ]
        tokens = chat.prompt(messages).tokens
        found = chat.boundaries(messages, tokens)
        assert len(found) == 2 and 0 < found[0] < found[1] < len(tokens)
        for n, end in zip((1, 3), found):
            head = chat.tokenize(chat.render(messages[:n], add_generation_prompt=False))
            assert tokens[:end] == head
        assert chat.boundaries(messages[:1], chat.prompt(messages[:1]).tokens) == []
    finally:
        model.close()
