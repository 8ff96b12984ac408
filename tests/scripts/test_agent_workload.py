"""scripts/agent_workload.py: its fixed conversations, played interleaved against a fake OpenAI-compatible
server in a thread (it streams a few chunks, then usage and llama-server's `timings`, and keeps every
request), and its errors: one line on stderr and exit code 1."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from paths import SCRIPTS
from script_module import script_module

SCRIPT = SCRIPTS / "agent_workload.py"
DATA = SCRIPTS / "data" / "agent_workload.json"
CHARS_PER_TOKEN = 4


@pytest.fixture(scope="module")
def workload():
    with script_module("agent_workload.py", "agent_workload_script") as module:
        yield module


def answer_pieces(number: int, messages: list[dict]) -> list[str]:
    """The fake server's answer to its `number`th request: it names the request and its last message."""
    return [f"answer {number} ", f"to {len(messages)} messages: ", "```python\n", f"x = {number}\n```"]


class FakeServer:
    """An OpenAI-compatible chat endpoint streaming canned answers; `status` other than 200 answers with
    OpenAI's error envelope instead."""

    def __init__(self, status: int = 200):
        self.status = status
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
                if server.status != 200:
                    error = json.dumps({"error": {"message": "the model fell over", "type": "server_error"}})
                    self.send_response(server.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(error)))
                    self.end_headers()
                    self.wfile.write(error.encode())
                    return
                number = len(server.requests)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()

                def send(event):
                    self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())

                send({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})  # no token yet
                pieces = answer_pieces(number, body["messages"])
                for piece in pieces:
                    send({"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]})
                send({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
                prompt = sum(len(m["content"]) for m in body["messages"]) // CHARS_PER_TOKEN
                send(
                    {
                        "choices": [],
                        "usage": {"prompt_tokens": prompt, "completion_tokens": 11, "total_tokens": prompt + 11},
                        "timings": {"cache_n": 10 * number, "prompt_n": prompt - 10 * number, "draft_n": 8},
                    }
                )
                self.wfile.write(b"data: [DONE]\n\n")

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


def free_port() -> int:
    """A port nothing listens on: one the system just gave out and took back."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_data_file_holds_three_conversations_of_the_intended_sizes(workload):
    data = json.loads(DATA.read_text(encoding="utf-8"))
    conversations = workload.load_conversations(DATA)
    assert [c.name for c in conversations] == ["edit", "refactor", "tool"]
    assert len({c.system for c in conversations}) == 1
    assert 100 <= len(data["system"]) / CHARS_PER_TOKEN <= 200
    files = {c["name"]: c["files"] for c in data["conversations"]}
    assert 200 <= len(files["edit"]["inventory.py"]) / CHARS_PER_TOKEN <= 400
    assert 1000 <= len(files["refactor"]["sync_orders.py"]) / CHARS_PER_TOKEN <= 1500
    for conversation in conversations:
        assert 3 <= len(conversation.turns) <= 4
        assert all("{file:" not in turn for turn in conversation.turns)
        assert all("```python block" in turn and "complete" in turn for turn in conversation.turns)
    for entry, conversation in zip(data["conversations"], conversations):
        for text in entry["files"].values():
            compile(text, entry["name"], "exec")  # the code shown is real Python
            assert text in conversation.turns[0]  # the first turn shows every file whole
    tool = conversations[2].turns
    assert "FAILED tests/test_durations.py" in tool[0] and "FAILED" in tool[1] and "grep -n" in tool[2]


def test_interleaved_takes_one_turn_of_each_conversation_in_turn(workload):
    a = workload.Conversation("a", "s", ("a1", "a2", "a3"))
    b = workload.Conversation("b", "s", ("b1", "b2"))
    c = workload.Conversation("c", "s", ("c1", "c2", "c3", "c4"))
    order = [(conv.name, index) for conv, index in workload.interleaved([a, b, c])]
    assert order == [("a", 0), ("b", 0), ("c", 0), ("a", 1), ("b", 1), ("c", 1), ("a", 2), ("c", 2), ("c", 3)]
    assert [(conv.name, i) for conv, i in workload.interleaved([a, b, c], turns=1)] == [("a", 0), ("b", 0), ("c", 0)]


def test_run_resends_each_history_interleaved_and_writes_json(workload, tmp_path, capsys):
    out = tmp_path / "run.json"
    argv = ["--max-tokens", "7", "--temperature", "0.5", "--seed", "3", "--api-key", "k", "--label", "fake"]
    with FakeServer() as server:
        code = workload.main(["--url", server.url, "--out", str(out), "--model", "m", *argv])
    assert code == 0
    conversations = workload.load_conversations(DATA)
    expected = [(c.name, i) for c, i in workload.interleaved(conversations)]
    first_turns = {c.turns[0]: c for c in conversations}
    seen = []
    for request in server.requests:
        body = request["body"]
        assert request["path"] == "/v1/chat/completions" and request["auth"] == "Bearer k"
        assert body["max_tokens"] == 7 and body["temperature"] == 0.5 and body["seed"] == 3
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True} and body["model"] == "m"
        messages = body["messages"]
        conversation = first_turns[messages[1]["content"]]
        turn = (len(messages) - 1) // 2  # system, then user and assistant by turns, then the new user message
        seen.append((conversation.name, turn))
        assert messages[0] == {"role": "system", "content": conversation.system}
        assert [m["role"] for m in messages[1:]] == ["user", "assistant"] * turn + ["user"]
        assert [m["content"] for m in messages[1::2]] == list(conversation.turns[: turn + 1])
        # the earlier answers of this conversation come back verbatim: the server's numbers for them
        earlier = [n for n, (name, _) in enumerate(seen[:-1], 1) if name == conversation.name]
        answers = ["".join(answer_pieces(n, server.requests[n - 1]["body"]["messages"])) for n in earlier]
        assert [m["content"] for m in messages[2::2]] == answers
    assert seen == expected

    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]  # no temporary file left beside it
    document = json.loads(out.read_text())
    assert document["label"] == "fake" and document["url"] == server.url
    assert document["settings"]["max_tokens"] == 7 and document["settings"]["seed"] == 3
    records = document["records"]
    assert [(r["conversation"], r["turn"] - 1) for r in records] == expected
    for number, record in enumerate(records, 1):
        assert 0 <= record["ttft_s"] <= record["total_s"]
        assert record["cache_n"] == 10 * number and record["draft_n"] == 8 and record["draft_n_accepted"] is None
        assert record["completion_tokens"] == 11 and record["completion_tokens_from"] == "usage"
        assert record["answer"] == "".join(answer_pieces(number, server.requests[number - 1]["body"]["messages"]))
        assert record["prompt_tokens"] == record["prompt_n"] + record["cache_n"]
    assert document["summary"] == workload.summarize(records)

    stdout, stderr = capsys.readouterr()
    assert "| conversation | turn | prompt tokens | cache_n | TTFT s | total s | completion tokens |" in stdout
    assert "| edit | 1 |" in stdout and "- makespan:" in stdout and "- mean TTFT, later turns:" in stdout
    assert f"- drafted tokens: {8 * len(records)}, accepted: -" in stdout  # the fake server reports no acceptances
    assert len(stderr.splitlines()) == len(records)  # a progress line per request


def test_turns_limits_each_conversation(workload, capsys):
    with FakeServer() as server:
        assert workload.main(["--url", server.url + "/v1/", "--turns", "1"]) == 0
    assert len(server.requests) == 3 and all(len(r["body"]["messages"]) == 2 for r in server.requests)
    assert all(r["path"] == "/v1/chat/completions" and r["auth"] is None for r in server.requests)
    assert "seed" not in server.requests[0]["body"] and server.requests[0]["body"]["max_tokens"] == 96
    assert server.requests[0]["body"]["temperature"] == 0


def record(conversation, turn, ttft, start, total, **fields):
    base = {"conversation": conversation, "turn": turn, "ttft_s": ttft, "start_s": start, "total_s": total}
    base.update(end_s=start + total, completion_tokens=10, prompt_tokens=100, cache_n=None)
    base.update(prompt_n=None, draft_n=None, draft_n_accepted=None)
    return {**base, **fields}


def test_summary_means_and_makespan(workload):
    records = [
        record("a", 1, 0.5, 0.0, 1.0, cache_n=0),
        record("b", 1, 0.7, 1.1, 2.0, cache_n=0),
        record("a", 2, 0.1, 3.2, 1.0, cache_n=90, draft_n=20, draft_n_accepted=15),
        record("b", 2, 0.3, 4.3, 1.5, cache_n=60),
        record("a", 3, None, 5.9, 0.2),  # no content came: counted nowhere in the means
    ]
    summary = workload.summarize(records)
    assert summary["first_turn_ttft_mean_s"] == pytest.approx(0.6) and summary["first_turns"] == 2
    assert summary["later_turn_ttft_mean_s"] == pytest.approx(0.2) and summary["later_turns"] == 2
    assert summary["makespan_s"] == pytest.approx(6.1)
    assert summary["completion_tokens"] == 50 and summary["prompt_tokens"] == 500 and summary["cache_n"] == 150
    assert summary["later_turn_cache_share"] == pytest.approx(0.75)
    assert summary["draft_n"] == 20 and summary["acceptance_rate"] == pytest.approx(0.75)
    assert "- drafted tokens: 20, accepted: 15 (75%)" in workload.format_table(records, summary)
    table = workload.format_table(records, summary, title="t")
    assert "| a | 3 | 100 | - | - | 0.200 | 10 |" in table
    assert "- mean TTFT, first turns: 0.600 s (2 turns)" in table and "- makespan: 6.100 s (5 requests)" in table
    empty = workload.summarize([])
    assert empty["makespan_s"] == 0.0 and empty["first_turn_ttft_mean_s"] is None


def test_stream_without_usage_or_timings_counts_chunks(workload):
    lines = [
        b": a comment\n",
        b'data: {"choices": [{"delta": {"reasoning_content": "hm"}}]}\n',
        b"\n",
        b'data:{"choices": [{"delta": {"content": "a"}}]}\r\n',
        b'data: {"choices": [{"delta": {"content": "b"}, "finish_reason": "stop"}]}\n',
        b'data: {"choices": [], "usage": {"prompt_tokens": 9, "prompt_tokens_details": {"cached_tokens": 4}}}\n',
        b"data: [DONE]\n",
        b'data: {"choices": [{"delta": {"content": "after the end"}}]}\n',
    ]
    answer = workload.read_events(lines, started=0.0)
    assert answer.text == "ab" and answer.finish_reason == "stop" and answer.ttft_s <= answer.total_s
    assert answer.completion_tokens == 3 and answer.completion_tokens_from == "chunks"
    assert answer.prompt_tokens == 9 and answer.server == {"cache_n": 4}
    with pytest.raises(workload.WorkloadError, match="not JSON"):
        workload.read_events([b"data: {oops\n"], started=0.0)
    with pytest.raises(workload.WorkloadError, match="out of memory"):
        workload.read_events([b'data: {"error": {"message": "out of memory"}}\n'], started=0.0)


def test_unreachable_server_is_one_line_and_exit_1(workload, capsys):
    url = f"http://127.0.0.1:{free_port()}"
    assert workload.main(["--url", url, "--turns", "1"]) == 1
    stdout, stderr = capsys.readouterr()
    assert stdout == "" and len(stderr.splitlines()) == 1
    assert stderr.startswith("agent_workload: error: cannot reach " + url) and "Traceback" not in stderr


def test_unreachable_server_from_the_command_line(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    out = tmp_path / "run.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--url", url, "--out", str(out)], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 1 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and url in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()


def test_error_answer_names_the_status_and_message(workload, capsys):
    with FakeServer(status=500) as server:
        assert workload.main(["--url", server.url]) == 1
    assert len(server.requests) == 1
    stderr = capsys.readouterr().err
    assert len(stderr.splitlines()) == 1
    assert f"{server.url}/v1/chat/completions answered 500" in stderr and "the model fell over" in stderr


@pytest.mark.parametrize(
    "argv",
    [[], ["--url", "ftp://host"], ["--url", "http://h", "--max-tokens", "0"], ["--url", "http://h", "--turns", "x"]],
)
def test_bad_flags_exit_2(workload, argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        workload.main(argv)
    assert exit_.value.code == 2
    assert "usage:" in capsys.readouterr().err
