"""scripts/structured_workload.py: the bench's schema prompts sent as response_format json_schema
requests to a fake OpenAI-compatible server in a thread; answers validated, totals and the decode
rate from the server's timings reported, and an invalid answer named with exit code 1."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from script_module import script_module


@pytest.fixture(scope="module")
def workload():
    with script_module("structured_workload.py", "structured_workload_script") as module:
        yield module


def fake_server(answer: str):
    """A server answering every chat request with `answer`, 10 tokens decoded in 100 ms; it keeps the bodies."""
    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            seen.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            body = json.dumps(
                {
                    "choices": [{"message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}],
                    "usage": {"completion_tokens": 12},
                    "timings": {"predicted_n": 10, "predicted_ms": 100.0},
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


def test_the_builtin_file_holds_schema_prompts(workload):
    prompts = workload.schema_prompts(workload.PROMPTS)
    assert len(prompts) >= 4 and all(isinstance(p["schema"], dict) for p in prompts)


def test_every_schema_prompt_is_sent_as_json_schema_and_valid_answers_pass(workload, tmp_path, capsys):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        json.dumps({"id": "x/1", "prompt": "give a", "schema": schema}) + "\n" + json.dumps({"prompt": "free"}) + "\n",
        encoding="utf-8",
    )
    server, seen = fake_server('{"a": 3}')
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        code = workload.main(
            ["--url", url, "--prompts", str(prompts), "--warmup", "1", "--out", str(tmp_path / "o.json")]
        )
    finally:
        server.shutdown()
    assert code == 0
    assert len(seen) == 2 and seen[1]["response_format"]["json_schema"]["schema"] == schema
    assert seen[1]["messages"][-1]["content"] == "give a" and seen[1]["temperature"] == 0
    result = json.loads((tmp_path / "o.json").read_text())
    assert result["tokens"] == 12 and result["decode_tokens_per_s"] == pytest.approx(100.0) and not result["invalid"]
    assert "100.0 tok/s" in capsys.readouterr().out


def test_an_answer_that_does_not_validate_is_named_and_fails(workload, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "x/1", "prompt": "p", "schema": {"type": "array"}}) + "\n", encoding="utf-8")
    server, _ = fake_server('{"a": 3}')
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        code = workload.main(
            ["--url", url, "--prompts", str(prompts), "--warmup", "0", "--out", str(tmp_path / "o.json")]
        )
    finally:
        server.shutdown()
    assert code == 1 and json.loads((tmp_path / "o.json").read_text())["invalid"] == ["x/1"]
