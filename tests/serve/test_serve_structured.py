"""Constrained answers on a real server on loopback serving tiny models: `response_format` (JSON
object, JSON schema), llama-server's `grammar` and `json_schema`; answers that parse and validate,
equal to the library's, and every bad constraint a 400 `invalid_schema` naming its field, whether
compiling it refused it or the engine did when the request started."""

from __future__ import annotations

import json
import socket
from urllib.parse import urlparse

import httpx
import jsonschema
import pytest
from serve_helpers import FLAT_COSTS, WAIT, StepGate, load_pair, served

from specrun.engine import constraint as constraints
from specrun.engine import sequence
from specrun.engine.constraint import ConstraintError
from specrun.engine.sampling import SamplingParams
from specrun.engine.sequence import GenerationSettings

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
HI = [{"role": "user", "content": "hi"}]
SCHEMA = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean"},
        "colour": {"enum": ["red", "green", "blue"]},
        "n": {"type": "integer", "minimum": 0, "maximum": 99},
    },
    "required": ["ok", "colour", "n"],
    "additionalProperties": False,
}
YES_NO = 'root ::= ("yes" | "no")'
LARK = 'start: ("ab" | "a")+ "."'
CHEAP_DRAFTS = {n: 0.001 for n in FLAT_COSTS}


def nested(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema}
    return schema


def schema_format(schema: dict | None = None, **extra) -> dict:
    spec = {"name": "answer", **extra}
    if schema is not None:
        spec["schema"] = schema
    return {"type": "json_schema", "json_schema": spec}


@pytest.fixture(scope="module")
def pair(tiny_target, tiny_draft):
    loaded = load_pair(tiny_target, tiny_draft)
    yield loaded
    loaded.close()


@pytest.fixture(scope="module")
def server(pair):
    """Prompt lookup drafts: forced tokens lead its drafts."""
    with served(pair, costs=FLAT_COSTS, mode="ngram") as running:
        yield running


def post(url: str, path: str, body: dict) -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=WAIT)


def answer(url: str, path: str, **fields) -> dict:
    """A whole greedy answer: its text, finish reason and timings."""
    body = {"max_tokens": 48, "temperature": 0, **fields}
    if path == CHAT:
        body.setdefault("messages", HI)
    else:
        body.setdefault("prompt", "hello")
    response = post(url, path, body)
    assert response.status_code == 200, response.text
    data = response.json()
    choice = data["choices"][0]
    text = choice["message"]["content"] if path == CHAT else choice["text"]
    return {"text": text, "finish": choice["finish_reason"], "timings": data["timings"], "tokens": choice.get("tokens")}


def refused(response: httpx.Response, param: str, code: str | None = "invalid_schema") -> dict:
    """A 400 in OpenAI's envelope naming `param` (and with `code`, unless None)."""
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param, error
    assert code is None or error["code"] == code, error
    return error


def healthy(running) -> None:
    health = httpx.get(running.url + "/health", timeout=WAIT).json()
    assert health["status"] == "ok" and health["active"] == 0
    assert running.service.worker.wait_for(lambda: not running.service.engine.slots.busy, WAIT)


# -- answers --------------------------------------------------------------------------------------


@pytest.mark.parametrize("prompt", ["hello", "answer"])
def test_a_json_object_answer_is_a_json_object(server, prompt):
    got = answer(server.url, COMPLETIONS, prompt=prompt, response_format={"type": "json_object"})
    assert got["finish"] == "stop" and isinstance(json.loads(got["text"]), dict)
    assert "forced_n" in got["timings"]


@pytest.mark.parametrize(
    "path, fields",
    [
        (CHAT, {"response_format": schema_format(SCHEMA, strict=True, description="a reply")}),
        (COMPLETIONS, {"response_format": schema_format(SCHEMA)}),
        (CHAT, {"json_schema": SCHEMA}),
        (COMPLETIONS, {"json_schema": SCHEMA, "prompt": "the quick brown fox"}),
    ],
)
def test_a_json_schema_answer_validates_against_its_schema(server, path, fields):
    got = answer(server.url, path, **fields)
    assert got["finish"] == "stop", got
    jsonschema.validate(json.loads(got["text"]), SCHEMA)
    assert " " not in got["text"]  # llguidance writes JSON without whitespace between tokens
    assert got["timings"]["forced_n"] > 0  # keys and their quotes come without the model's choice


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
@pytest.mark.parametrize("grammar", [YES_NO, 'start: "yes" | "no"'])
def test_a_grammar_answer_is_one_it_allows(server, path, grammar):
    for prompt in ("hello", "the quick brown fox", "def f(x):"):
        fields = {"messages": [{"role": "user", "content": prompt}]} if path == CHAT else {"prompt": prompt}
        got = answer(server.url, path, grammar=grammar, **fields)
        assert got["text"] in ("yes", "no") and got["finish"] == "stop", got


def test_a_json_schema_without_a_schema_is_any_json_object(server):
    got = answer(server.url, COMPLETIONS, response_format=schema_format())
    assert got["finish"] == "stop" and isinstance(json.loads(got["text"]), dict)


def test_an_answer_cut_by_max_tokens_ends_with_length(server):
    whole = answer(server.url, CHAT, json_schema=SCHEMA)
    cut = answer(server.url, CHAT, json_schema=SCHEMA, max_tokens=5)
    assert cut["finish"] == "length" and whole["text"].startswith(cut["text"]) and cut["text"] != whole["text"]


def test_a_text_format_and_an_empty_grammar_change_nothing(server):
    plain = answer(server.url, CHAT)
    for fields in ({"response_format": {"type": "text"}}, {"grammar": ""}, {"grammar": "", "json_schema": None}):
        got = answer(server.url, CHAT, **fields)
        assert got["text"] == plain["text"] and "forced_n" not in got["timings"]


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_a_streamed_constrained_answer_parses_and_equals_the_whole_one(server, path):
    fields = {"response_format": schema_format(SCHEMA), "max_tokens": 48, "temperature": 0}
    body = {**fields, **({"messages": HI} if path == CHAT else {"prompt": "hello"})}
    whole = answer(server.url, path, **fields)
    pieces, final = [], None
    with httpx.stream("POST", server.url + path, json={**body, "stream": True}, timeout=WAIT) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[len("data: ") :])
            choice = chunk["choices"][0]
            pieces.append((choice["delta"].get("content") if path == CHAT else choice["text"]) or "")
            final = chunk
    text = "".join(pieces)
    assert text == whole["text"] and final["choices"][0]["finish_reason"] == "stop"
    jsonschema.validate(json.loads(text), SCHEMA)
    assert final["timings"]["forced_n"] == whole["timings"]["forced_n"]


# -- what fails how -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path, fields, param, said",
    [
        (CHAT, {"response_format": schema_format({"type": "strin"})}, "response_format", "strin"),
        (COMPLETIONS, {"response_format": schema_format({"type": "strin"})}, "response_format", "strin"),
        (CHAT, {"json_schema": {"type": "strin"}}, "json_schema", "strin"),
        (COMPLETIONS, {"json_schema": {"type": "strin"}}, "json_schema", "strin"),
        (CHAT, {"grammar": 'root ::= ("yes" | '}, "grammar", "GBNF"),
        (COMPLETIONS, {"grammar": "root ::= missing"}, "grammar", "missing"),
        (CHAT, {"grammar": "start: /(/"}, "grammar", "regex"),
        (CHAT, {"response_format": schema_format(nested(40))}, "response_format", "deeper"),
        (COMPLETIONS, {"json_schema": nested(40)}, "json_schema", "deeper"),
        (CHAT, {"json_schema": {"$ref": "#/nowhere"}}, "json_schema", "nowhere"),
        (CHAT, {"json_schema": {"type": "string", "pattern": "("}}, "json_schema", "regex"),
    ],
)
def test_a_bad_constraint_is_a_400_invalid_schema_naming_its_field(server, path, fields, param, said):
    body = {"max_tokens": 4, **fields, **({"messages": HI} if path == CHAT else {"prompt": "hi"})}
    error = refused(post(server.url, path, body), param)
    assert said in error["message"] and param in error["message"]
    refused(post(server.url, path, {**body, "stream": True}), param)


@pytest.mark.parametrize(
    "fields, named",
    [
        ({"response_format": {"type": "json_object"}, "grammar": YES_NO}, ["response_format", "grammar"]),
        ({"response_format": schema_format(SCHEMA), "json_schema": SCHEMA}, ["response_format", "json_schema"]),
        ({"grammar": YES_NO, "json_schema": {}}, ["grammar", "json_schema"]),
        (
            {"response_format": {"type": "json_object"}, "grammar": YES_NO, "json_schema": {}},
            ["response_format", "grammar", "json_schema"],
        ),
    ],
)
def test_two_constraints_at_once_are_a_400_naming_both(server, fields, named):
    for path, prompt in ((CHAT, {"messages": HI}), (COMPLETIONS, {"prompt": "hi"})):
        error = refused(post(server.url, path, {**prompt, **fields}), named[-1], "conflicting_parameters")
        assert all(name in error["message"] for name in named), error


@pytest.mark.parametrize(
    "response_format, param, code",
    [
        ({"type": "json_schema", "json_schema": {"name": "a b"}}, "response_format.json_schema.name", None),
        ({"type": "json_schema", "json_schema": {"name": "x" * 65}}, "response_format.json_schema.name", None),
        ({"type": "json_schema", "json_schema": {"schema": {}}}, "response_format.json_schema.name", "missing"),
        ({"type": "json_schema"}, "response_format.json_schema", "missing"),
        (
            {"type": "json_schema", "json_schema": {"name": "a", "strict": "yes"}},
            "response_format.json_schema.strict",
            None,
        ),
        (
            {"type": "json_schema", "json_schema": {"name": "a", "schema": []}},
            "response_format.json_schema.schema",
            None,
        ),
        ({"type": "xml"}, "response_format", "invalid_response_format"),
        ({}, "response_format", "invalid_response_format"),
        ("json_object", "response_format", "invalid_response_format"),
    ],
)
def test_a_response_format_is_checked_strictly(server, response_format, param, code):
    error = refused(post(server.url, CHAT, {"messages": HI, "response_format": response_format}), param, code)
    assert param in error["message"]


@pytest.mark.parametrize("grammar", [1, ["root ::= x"], "root ::= \udc00"])
def test_a_grammar_must_be_text(server, grammar):
    body = json.dumps({"prompt": "hi", "grammar": grammar}).encode()
    response = httpx.post(server.url + COMPLETIONS, content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["param"] == "grammar", response.text


def test_a_grammar_the_vocabulary_cannot_match_is_a_400_when_the_request_starts(server):
    """The grammar compiles, but names a special token this model lacks: the engine refuses it as
    the request starts, and the client gets that 400 (whole or streamed), not a 500."""
    for stream in (False, True):
        body = {"prompt": "hi", "max_tokens": 4, "grammar": "start: <|no_such_token|>", "stream": stream}
        error = refused(post(server.url, COMPLETIONS, body), "grammar")
        assert "no_such_token" in error["message"]
    healthy(server)
    assert answer(server.url, CHAT, grammar=YES_NO)["text"] in ("yes", "no")


def test_a_constraint_error_at_admission_names_the_field_it_came_from(pair, monkeypatch):
    def refusing(constraint, model):
        raise ConstraintError("the json schema cannot be matched: too much", "fix it")

    with served(pair, costs=FLAT_COSTS, mode="off") as running:
        monkeypatch.setattr(sequence, "Matcher", refusing)
        for path, fields, param in (
            (CHAT, {"response_format": {"type": "json_object"}}, "response_format"),
            (COMPLETIONS, {"response_format": schema_format(SCHEMA)}, "response_format"),
            (CHAT, {"json_schema": SCHEMA, "stream": True}, "json_schema"),
        ):
            body = {"max_tokens": 4, **fields, **({"messages": HI} if path == CHAT else {"prompt": "hi"})}
            error = refused(post(running.url, path, body), param)
            assert error["message"] == "the json schema cannot be matched: too much (fix it)"
        healthy(running)
        assert answer(running.url, CHAT)["finish"] in ("stop", "length")
        metrics = httpx.get(running.url + "/metrics").text
        assert 'specrun_requests_total{endpoint="chat",outcome="invalid"} 2.0' in metrics


def test_a_client_that_leaves_before_a_constrained_stream_opens_is_cancelled(pair):
    gate = StepGate()
    with served(pair, gate=gate, costs=FLAT_COSTS, mode="off", parallel=1) as running:
        worker = running.service.worker
        body = json.dumps({"messages": HI, "max_tokens": 400, "stream": True, "json_schema": SCHEMA}).encode()
        url = urlparse(running.url)
        with socket.create_connection((url.hostname, url.port), timeout=WAIT) as raw:
            raw.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            assert worker.wait_for(lambda: len(worker.requests()) == 1, WAIT)
        assert worker.wait_for(lambda: worker.requests() and worker.requests()[0].cancelled, WAIT)
        gate.open()
        assert worker.wait_for(lambda: not worker.requests(), WAIT)
        healthy(running)


def test_the_openapi_document_describes_the_constraint_fields(server):
    document = httpx.get(server.url + "/openapi.json", timeout=WAIT).json()
    schemas = document["components"]["schemas"]
    for name in ("ChatRequest", "CompletionRequest"):
        properties = schemas[name]["properties"]
        assert {"response_format", "grammar", "json_schema"} <= set(properties)
    spec = schemas["JsonSchemaSpec"]
    assert spec["required"] == ["name"] and spec["additionalProperties"] is True  # other fields are ignored
    assert set(spec["properties"]) == {"name", "description", "schema", "strict"}
    assert spec["properties"]["name"]["pattern"] == "^[a-zA-Z0-9_-]{1,64}$"
    kinds = {schemas[ref.rsplit("/", 1)[1]]["properties"]["type"]["const"] for ref in _refs(schemas["ChatRequest"])}
    assert kinds == {"text", "json_object", "json_schema"}


def _refs(request: dict) -> list[str]:
    union = request["properties"]["response_format"]["anyOf"][0]["oneOf"]
    return [member["$ref"] for member in union]


# -- the same answers as the library --------------------------------------------------------------


@pytest.mark.parametrize("mode", ["off", "ngram", "draft"])
def test_greedy_constrained_answers_equal_the_librarys(pair, mode):
    cases = [
        (COMPLETIONS, "hello", {"response_format": {"type": "json_object"}}, constraints.json_object()),
        (COMPLETIONS, "abc abc", {"json_schema": SCHEMA}, constraints.json_schema(SCHEMA)),
        (CHAT, "the quick brown fox", {"response_format": schema_format(SCHEMA)}, constraints.json_schema(SCHEMA)),
        (CHAT, "hello", {"grammar": YES_NO}, constraints.grammar(YES_NO)),
        (COMPLETIONS, "def f(x):", {"grammar": LARK}, constraints.grammar(LARK)),
    ]
    library = []
    for path, prompt, _, constraint in cases:
        if path == CHAT:
            tokens = pair.chat_format.prompt([{"role": "user", "content": prompt}]).tokens
        else:
            tokens = pair.target_model.tokenize(prompt, add_special=True, parse_special=True)
        settings = GenerationSettings(max_tokens=40, sampling=SamplingParams(temperature=0), constraint=constraint)
        generation = pair.generation(tokens, settings, mode=mode)
        made = [t for step in generation.run() for t in step.tokens]
        library.append((made, generation.stats.stop_reason))
    with served(pair, costs=FLAT_COSTS, draft_costs=CHEAP_DRAFTS, mode=mode) as running:
        for (path, prompt, fields, _), (made, stop_reason) in zip(cases, library):
            where = {"messages": [{"role": "user", "content": prompt}]} if path == CHAT else {"prompt": prompt}
            got = answer(running.url, path, max_tokens=40, return_tokens=True, **where, **fields)
            assert got["tokens"] == made, (path, prompt, fields)
            assert got["finish"] == ("length" if stop_reason == "max_tokens" else "stop")
