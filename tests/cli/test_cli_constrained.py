"""`specrun run --json-schema/--grammar/--regex`: the answer meets the constraint, `--json` says
what constrained it and how many tokens it forced, and a bad constraint is one line and exit 2
before any model loads."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
from cli_helpers import run_json, specrun

SCHEMA = {
    "type": "object",
    "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 99}, "tag": {"enum": ["one", "two"]}},
    "required": ["id", "tag"],
    "additionalProperties": False,
}
GREEDY = ["--temp", "0", "--raw", "-n", "64", "--draft", "none"]


@pytest.mark.parametrize("spec", ["off", "ngram"])
def test_a_json_schema_answer_validates_and_reports_its_forced_tokens(tiny_target, tmp_path, spec):
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(SCHEMA), encoding="utf-8")
    result = run_json(
        "record:", "--target", str(tiny_target), "--spec", spec, *GREEDY, "--json-schema", str(schema_file)
    )
    jsonschema.validate(json.loads(result["text"]), SCHEMA)
    assert result["settings"]["constraint"]["kind"] == "json_schema"
    assert result["stats"]["stop_reason"] == "stop"
    assert (result["stats"]["forced_tokens"] > 0) == (spec != "off")


def test_an_inline_schema_a_regex_and_a_grammar_constrain_the_answer(tiny_target):
    inline = run_json("x", "--target", str(tiny_target), *GREEDY, "--json-schema", json.dumps(SCHEMA))
    jsonschema.validate(json.loads(inline["text"]), SCHEMA)
    matched = run_json("x", "--target", str(tiny_target), *GREEDY, "--regex", "[a-f]{3}-[0-9]{2}")
    assert re.fullmatch("[a-f]{3}-[0-9]{2}", matched["text"])


def test_a_gbnf_grammar_file_constrains_the_answer(tiny_target, tmp_path):
    grammar = tmp_path / "answer.gbnf"
    grammar.write_text('root ::= ("yes" | "no") "!"\n', encoding="utf-8")
    result = run_json("x", "--target", str(tiny_target), *GREEDY, "--grammar", str(grammar))
    assert result["text"] in ("yes!", "no!") and result["settings"]["constraint"]["kind"] == "gbnf"


@pytest.mark.parametrize(
    "flags, said",
    [
        (["--json-schema", '{"type": "strin"}'], "strin"),
        (["--json-schema", "{not json"], "not valid JSON"),
        (["--json-schema", "/no/such/schema.json"], "file not found"),
        (["--regex", "("], "regex"),
        (["--regex", "a", "--json-schema", "{}"], "given together"),
    ],
)
def test_a_bad_constraint_is_one_line_and_exit_2(tiny_target, flags, said):
    result = specrun("run", "hi", "--target", "/no/such/model.gguf", *flags)
    assert result.returncode == 2 and said in result.stderr and "Traceback" not in result.stderr
    assert "model.gguf" not in result.stderr  # refused before the missing model is looked for


def test_a_bad_grammar_file_is_one_line_and_exit_2(tiny_target, tmp_path):
    grammar = tmp_path / "bad.gbnf"
    grammar.write_text("root ::= (", encoding="utf-8")
    result = specrun("run", "hi", "--target", str(tiny_target), "--grammar", str(grammar))
    assert result.returncode == 2 and "GBNF" in result.stderr and "Traceback" not in result.stderr
