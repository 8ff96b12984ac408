"""Prompts with a JSON schema: compiled when the prompts load, every configuration's runs constrained
by it (plain decoding's included), each answer parsed and validated against it, failures and the
forced tokens reported."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from test_bench import FakeEngine, bench_cli, fake_doc

from specrun.bench import prompts as bench_prompts
from specrun.bench.pair_engine import PairEngine
from specrun.bench.prompts import BenchPrompt
from specrun.bench.render import summary_lines, table_rows
from specrun.bench.runner import (
    CUT_OFF,
    INVALID,
    VALID,
    BenchSettings,
    check_answer,
    configurations,
    run_bench,
)
from specrun.engine import constraint
from specrun.engine.sequence import GenerationSettings
from specrun.errors import EXIT_USAGE, InputError

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}
BOUNDED = {  # the tiny models would write digits forever: a bounded integer makes the answer close
    "type": "object",
    "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9999}, "ok": {"type": "boolean"}},
    "required": ["a", "ok"],
    "additionalProperties": False,
}


def line(**item) -> str:
    return json.dumps(item)


# ---- loading ---------------------------------------------------------------------------------------


def test_a_prompts_schema_is_compiled_when_the_file_loads(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(line(prompt="Give a.", id="s/1", schema=SCHEMA) + "\n" + line(prompt="free text") + "\n")
    constrained, free = bench_prompts.load_file(path)
    assert constrained.constraint is not None and constrained.constraint.kind == "json_schema"
    assert constrained.schema == SCHEMA
    assert constrained.constraint.grammar == constraint.json_schema(SCHEMA).grammar
    assert free.constraint is None and free.schema is None


@pytest.mark.parametrize(
    "schema, expected",
    [
        ({"type": "bogus"}, "line 2: the schema of prompt s/2 is invalid: "),
        ({"type": "integer", "minimum": 5, "maximum": 1}, "line 2: the schema of prompt s/2 is invalid: "),
        ("not an object", 'line 2: "schema" must be a JSON object'),
    ],
)
def test_a_bad_schema_is_one_line_naming_the_prompt(schema, expected):
    lines = [line(prompt="fine", id="s/1", schema=SCHEMA), line(prompt="bad", id="s/2", schema=schema)]
    with pytest.raises(InputError) as caught:
        bench_prompts.parse_lines(lines, "p.jsonl")
    message = caught.value.one_line()
    assert expected in message and "\n" not in message and "1 bad line(s)" in message
    assert caught.value.exit_code == EXIT_USAGE


def test_a_bad_schema_fails_the_command_before_any_model_loads(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(line(prompt="x", id="mine/1", schema={"type": "bogus"}) + "\n")
    result = bench_cli("--target", tmp_path / "absent.gguf", "--prompts", bad, tmp_path=tmp_path)
    assert result.returncode == EXIT_USAGE
    assert "schema of prompt mine/1" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_the_builtin_structured_output_prompts_include_schemas_that_compile():
    structured = [p for p in bench_prompts.builtin() if p.category == "structured-output"]
    constrained = [p for p in structured if p.constraint is not None]
    assert len(constrained) >= 4 and len(structured) - len(constrained) >= 3
    for p in constrained:
        assert p.id.startswith("structured-output/schema-")
        assert p.schema["type"] == "object" and p.schema.get("additionalProperties") is False
        assert constraint.json_schema(p.schema).grammar == p.constraint.grammar
    assert all(p.constraint is None for p in bench_prompts.builtin() if p.category != "structured-output")


# ---- checking answers ------------------------------------------------------------------------------


def test_answers_are_parsed_and_validated():
    assert check_answer('{"a":3}', SCHEMA, cut_off=False).verdict == VALID
    wrong = check_answer('{"a":"3"}', SCHEMA, cut_off=False)
    assert wrong.verdict == INVALID and "at /a" in wrong.error and wrong.validated
    extra = check_answer('{"a":3,"b":1}', SCHEMA, cut_off=False)
    assert extra.verdict == INVALID and "'b'" in extra.error
    broken = check_answer('{"a":', SCHEMA, cut_off=False)
    assert broken.verdict == INVALID and broken.error.startswith("not JSON")
    assert check_answer('{"a":12', SCHEMA, cut_off=True).verdict == CUT_OFF  # the budget ran out, not the schema


def test_without_jsonschema_answers_are_parsed_only(monkeypatch):
    monkeypatch.setitem(sys.modules, "jsonschema", None)
    parsed = check_answer('{"a":"not an integer"}', SCHEMA, cut_off=False)
    assert parsed.verdict == VALID and not parsed.validated
    assert check_answer("{", SCHEMA, cut_off=False).verdict == INVALID


class AnsweringEngine(FakeEngine):
    """Answers `answers[config id]` (JSON text) and counts 3 forced tokens per run; records the
    constraint every run was given."""

    def __init__(self, answers):
        super().__init__()
        self.answers = answers
        self.constraints = []

    def run(self, tokens, config, generation, prediction=None):
        out, _, stats, steps = super().run(tokens, config, generation, prediction)
        self.constraints.append(generation.constraint)
        stats.forced_tokens = 3
        stats.stop_reason = "stop"
        return out, self.answers[config.id], stats, steps


def test_every_run_is_constrained_and_an_invalid_answer_is_reported_by_prompt_and_config():
    schema_prompt = BenchPrompt("s/1", "structured", "Give a.", constraint=constraint.json_schema(SCHEMA))
    configs = configurations(["off", "draft"], [2], [0.0])
    engine = AnsweringEngine({"off-t0": '{"a":1}', "draft-k2-t0": '{"a":"x"}'})
    result = run_bench(
        engine, [schema_prompt], configs, BenchSettings(runs=2, warmup=1, base=GenerationSettings(max_tokens=20))
    )
    assert engine.constraints and all(c is schema_prompt.constraint for c in engine.constraints)
    doc = fake_doc(result)
    rows = {(r["category"], r["config"]): r for r in doc["categories"]}
    assert rows[("structured", "off-t0")]["invalid_answers"] == 0
    assert rows[("structured", "draft-k2-t0")]["invalid_answers"] == 2
    assert rows[("all", "draft-k2-t0")]["forced"] == 3
    checks = doc["correctness"]["schema"]
    assert (checks["prompts"], checks["answers"], checks["valid"], checks["invalid"]) == (1, 4, 2, 2)
    assert {(f["prompt_id"], f["config"]) for f in checks["failures"]} == {("s/1", "draft-k2-t0")}
    assert any("s/1" in w and "draft K=2" in w and "does not match its schema" in w for w in doc["warnings"])
    assert doc["prompt_set"][0]["schema"] == SCHEMA
    assert {run["schema_check"]["verdict"] for run in doc["runs"]} == {VALID, INVALID}
    assert "1 prompt constrained by a JSON schema in every configuration: 2/4 answers" in "\n".join(summary_lines(doc))
    _, cells = table_rows(doc)
    assert any(cell[-1].endswith("2 invalid JSON") for cell in cells)


def test_unconstrained_prompts_report_no_schema_figures():
    engine = AnsweringEngine({"off-t0": "text", "draft-k2-t0": "text"})
    result = run_bench(
        engine,
        [BenchPrompt("q/1", "qa", "Why?")],
        configurations(["off", "draft"], [2], [0.0]),
        BenchSettings(runs=1, warmup=0, base=GenerationSettings(max_tokens=20)),
    )
    doc = fake_doc(result)
    assert all(r["invalid_answers"] is None for r in doc["categories"] + doc["prompts"])
    assert doc["correctness"]["schema"]["prompts"] == 0 and doc["prompt_set"][0]["schema"] is None
    assert not any("JSON schema" in text for text in summary_lines(doc))


# ---- on a tiny model -------------------------------------------------------------------------------


def test_a_bench_on_the_tiny_target_gives_answers_that_match_the_schema(tiny_target, tiny_draft):
    """The tiny random models ramble: the constraint alone makes the answer valid. Speculative and
    plain decoding, both constrained, give the same tokens, and each is the best token the
    constraint allows at its position (no violation), though not the row's own argmax."""
    from specrun.runtime.pair import Pair, PairConfig

    prompt = BenchPrompt("s/1", "structured", "Give a.", constraint=constraint.json_schema(BOUNDED))
    pair = Pair(PairConfig(tiny_target, tiny_draft, ctx_size=256, threads=1))
    try:
        engine = PairEngine(pair, chat=False)
        configs = configurations(["off", "draft"], [3], [0.0])
        result = run_bench(
            engine, [prompt], configs, BenchSettings(runs=1, warmup=0, base=GenerationSettings(max_tokens=64, seed=0))
        )
        for record in result.records:
            check = record.schema_check
            assert check is not None and check.verdict == VALID and check.validated
            answer = json.loads(record.text)
            assert set(answer) == {"a", "ok"} and 0 <= answer["a"] <= 9999 and isinstance(answer["ok"], bool)
            assert record.identity is not None and not record.identity.violations
        assert result.checks and all(check.position is None for check in result.checks)
        doc = fake_doc(result)
        spec = next(r for r in doc["categories"] if r["category"] == "all" and r["mode"] == "draft")
        assert spec["forced"] > 0 and spec["invalid_answers"] == 0 and spec["violations"] == 0
        assert not any("schema" in w for w in doc["warnings"])
        assert any(run["stats"]["forced_tokens"] > 0 for run in doc["runs"])
        tokens, output = engine.prompt_tokens(prompt), result.records[0].tokens
        restricted = engine.output_rows(tokens, output, prompt.constraint)
        assert [int(np.argmax(row)) for row in restricted] == output
        raw = engine.output_rows(tokens, output)
        assert [int(np.argmax(row)) for row in raw] != output  # the constraint, not the model, chose the answer
    finally:
        pair.close()
