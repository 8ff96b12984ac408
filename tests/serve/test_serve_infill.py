"""Fill-in-the-middle on a real server on loopback: /infill as llama.vim calls it (whole and
streamed, `response_fields`, `n_predict: 0` warming the cache, the answer ended by its lines),
/v1/completions with `suffix`, speculation that changes no greedy answer, a model without FIM tokens
refused, bad input refused fast, and a client that leaves freeing its sequence."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from serve_helpers import FLAT_COSTS, WAIT, StepGate, load_pair, served
from tiny_models import write_tiny_gguf

QWEN = ["<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"]
LINES = {"<|fim_middle|>": "a", "a": "Ċ", "Ċ": "a"}  # the middle is "a\na\na…"
EXTRA = [
    {"filename": f"lib{i}.py", "text": f"def helper{i}(x):\n    return x + {i}\n", "time": [1, 2]} for i in range(3)
]
CODE = "def total(items):\n    result = 0\n    for item in items:\n        result += item\n"


@pytest.fixture(scope="module")
def coder(tmp_path_factory):
    root = tmp_path_factory.mktemp("infill")
    return write_tiny_gguf(root / "coder.gguf", special_tokens=QWEN, context_length=2048)


@pytest.fixture(scope="module")
def pair(coder):
    loaded = load_pair(coder, None, ctx_size=2048)
    yield loaded
    loaded.close()


@pytest.fixture(scope="module")
def lines_pair(tmp_path_factory):
    path = write_tiny_gguf(tmp_path_factory.mktemp("lines") / "lines.gguf", special_tokens=QWEN, successors=LINES)
    loaded = load_pair(path, None, ctx_size=512)
    yield loaded
    loaded.close()


@pytest.fixture(scope="module")
def server(pair):
    with served(pair, costs=FLAT_COSTS, mode="off") as running:
        yield running


def infill(url: str, **fields) -> httpx.Response:
    body = {"input_prefix": CODE, "input_suffix": "\n    return result\n", "temperature": 0.0, **fields}
    return httpx.post(url + "/infill", json=body, timeout=WAIT)


def llama_vim(**fields) -> dict:
    """A request as llama.vim sends it (its fields, its response_fields)."""
    return {
        "input_extra": EXTRA,
        "prompt": "    ",
        "n_predict": 16,
        "n_indent": 4,
        "top_k": 40,
        "top_p": 0.99,
        "samplers": ["top_k", "top_p", "infill"],
        "stream": False,
        "cache_prompt": True,
        "t_max_prompt_ms": 500,
        "t_max_predict_ms": 1000,
        "response_fields": ["content", "timings/prompt_n", "timings/predicted_n", "truncated", "tokens_cached"],
        **fields,
    }


def test_an_infill_request_gets_llama_servers_answer(server):
    response = infill(server.url, n_predict=8)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert isinstance(answer["content"], str) and answer["stop"] is True
    assert 1 <= answer["tokens_predicted"] <= 8 and answer["stop_type"] in ("eos", "limit", "word")
    timings = answer["timings"]
    assert timings["prompt_n"] + timings["cache_n"] == answer["tokens_evaluated"]
    assert timings["predicted_n"] == answer["tokens_predicted"]


def test_response_fields_are_returned_under_their_paths(server):
    answer = infill(server.url, **llama_vim(temperature=0.0)).json()
    assert set(answer) == {"content", "timings/prompt_n", "timings/predicted_n", "truncated", "tokens_cached"}
    assert answer["truncated"] is False and answer["timings/predicted_n"] <= 16


def test_a_warm_up_reads_the_chunks_and_the_next_request_reads_only_the_rest(server):
    warm = httpx.post(
        server.url + "/infill",
        json={
            "input_prefix": "",
            "input_suffix": "",
            "input_extra": EXTRA[::-1],
            "prompt": "",
            "n_predict": 0,
            "samplers": [],
            "t_max_prompt_ms": 1,
            "t_max_predict_ms": 1,
            "response_fields": [""],
        },
        timeout=WAIT,
    )
    assert warm.status_code == 200 and warm.json() == {}
    answer = infill(server.url, input_extra=EXTRA[::-1], n_predict=4).json()
    chunk_tokens = answer["tokens_evaluated"] - infill(server.url, n_predict=4).json()["tokens_evaluated"]
    assert chunk_tokens > 20
    assert answer["timings"]["cache_n"] >= chunk_tokens  # the chunks were read by the warm-up
    assert answer["timings"]["prompt_n"] < answer["tokens_evaluated"] - chunk_tokens + 1


def test_a_warm_up_answers_nothing(server):
    answer = infill(server.url, n_predict=0).json()
    assert answer["content"] == "" and answer["tokens_predicted"] == 0 and answer["stop_type"] == "limit"


def test_the_answer_ends_before_a_line_indented_less_than_the_cursor(lines_pair):
    with served(lines_pair, costs=FLAT_COSTS, mode="off") as running:
        whole = infill(running.url, n_predict=9, input_suffix="\n\nzzz\n").json()
        assert whole["content"] == "a\na\na\na\na" and whole["stop_type"] == "limit"
        cut = infill(running.url, n_predict=9, n_indent=1, input_suffix="\n\nzzz\n").json()
        assert cut["content"] == "a" and cut["stop_type"] == "eos" and cut["tokens_predicted"] == 3
        at_suffix = infill(running.url, n_predict=9, input_suffix="\n\na\n").json()
        assert at_suffix["content"] == "a"  # the line after the cursor came again: the middle is done


def test_a_streamed_infill_sends_its_pieces_then_the_whole_answers_fields(server):
    body = {"input_prefix": CODE, "input_suffix": "\n", "temperature": 0.0, "n_predict": 6, "stream": True}
    with httpx.stream("POST", server.url + "/infill", json=body, timeout=WAIT) as response:
        assert response.status_code == 200
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1]["stop"] is True and "timings" in events[-1]
    streamed = "".join(e["content"] for e in events[:-1])
    whole = infill(server.url, input_suffix="\n", n_predict=6).json()
    assert streamed == whole["content"] and all(e["stop"] is False for e in events[:-1])


def test_completions_with_a_suffix_fill_in_the_middle(server):
    body = {"prompt": CODE, "suffix": "\n    return result\n", "max_tokens": 8, "temperature": 0.0}
    answer = httpx.post(server.url + "/v1/completions", json=body, timeout=WAIT).json()
    same = infill(server.url, n_predict=8, n_indent=0).json()
    text = answer["choices"][0]["text"]
    assert text.startswith(same["content"])  # /infill may end sooner, at a line; the tokens are the same
    plain = httpx.post(server.url + "/v1/completions", json={**body, "suffix": ""}, timeout=WAIT).json()
    assert plain["usage"]["prompt_tokens"] < answer["usage"]["prompt_tokens"]
    with httpx.stream("POST", server.url + "/v1/completions", json={**body, "stream": True}, timeout=WAIT) as response:
        events = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    assert "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1]) == text


@pytest.mark.parametrize("mode", ["ngram", "auto"])
def test_speculation_changes_no_greedy_middle(pair, server, mode):
    fields = {"input_extra": EXTRA, "n_predict": 24, "prompt": "    ", "input_suffix": "\n" + CODE}
    plain = infill(server.url, **fields).json()["content"]
    with served(pair, costs=FLAT_COSTS, mode=mode) as running:
        assert infill(running.url, **fields).json()["content"] == plain


def test_a_model_without_fim_tokens_is_a_400_naming_the_field(tiny_target):
    plain = load_pair(tiny_target, None)
    try:
        with served(plain, costs=FLAT_COSTS, mode="off") as running:
            refused = infill(running.url)
            assert refused.status_code == 400
            error = refused.json()["error"]
            assert error["param"] == "input_prefix" and "cannot fill in the middle" in error["message"]
            body = {"prompt": "x", "suffix": "y", "max_tokens": 2}
            refused = httpx.post(running.url + "/v1/completions", json=body, timeout=WAIT)
            assert refused.status_code == 400 and refused.json()["error"]["param"] == "suffix"
    finally:
        plain.close()


@pytest.mark.parametrize(
    "fields, param",
    [
        ({"input_extra": [{"filename": "a.py", "text": 5}]}, "input_extra.0.text"),
        ({"input_extra": [{"filename": "a.py"}]}, "input_extra.0.text"),
        ({"input_extra": [{"text": "x", "filename": 3}]}, "input_extra.0.filename"),
        ({"input_extra": [{"text": "x"}] * 5000}, "input_extra"),
        ({"input_extra": [{"text": "x" * 400_000}] * 2}, "input_extra"),
        ({"n_predict": -2}, "n_predict"),
        ({"n_indent": "4"}, "n_indent"),
        ({"input_prefix": None}, "input_prefix"),
    ],
)
def test_bad_input_is_a_400_naming_its_field_within_a_second(server, fields, param):
    start = time.perf_counter()
    refused = infill(server.url, **fields)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["param"] == param
    assert time.perf_counter() - start < 5.0  # bounded: refused before the prompt is tokenized


def test_with_cache_reuse_a_keystroke_reads_the_cursor_line_not_the_suffix(pair):
    suffix = "\n" + CODE * 3
    for reuse, most in ((0, None), (32, 6)):
        with served(pair, costs=FLAT_COSTS, mode="off", cache_reuse=reuse) as running:
            for typed in ("    res", "    resu", "    resul"):
                answer = infill(running.url, prompt=typed, input_suffix=suffix, input_extra=EXTRA, n_predict=2).json()
            timings = answer["timings"]
            read = timings["prompt_n"]
            assert read + timings["cache_n"] == answer["tokens_evaluated"]
            if most is None:
                assert read > 100  # the suffix after the changed line, read again
            else:
                assert 2 <= read <= most, timings  # the typed characters' tokens and the last one


def test_a_client_that_leaves_frees_its_sequence(pair):
    gate = StepGate()
    with served(pair, gate=gate, costs=FLAT_COSTS, mode="off", parallel=1) as running:
        worker = running.service.worker
        body = {"input_prefix": CODE, "input_suffix": "\n", "n_predict": 400, "stream": True, "temperature": 0.0}
        with httpx.Client(timeout=WAIT) as http:
            with http.stream("POST", running.url + "/infill", json=body):
                assert worker.wait_for(lambda: len(worker.requests()) == 1, WAIT)
                gate.allow(2)
                assert worker.wait_for(lambda: worker.metrics.steps >= 2, WAIT)
        assert worker.wait_for(lambda: all(h.cancelled for h in worker.requests()), WAIT)
        gate.allow(1)
        assert worker.wait_for(lambda: worker.snapshot()["active"] == 0, WAIT)
        assert not running.service.engine.slots.busy


def test_the_openai_sdks_insertion_reaches_the_fim_prompt(server):
    from openai import OpenAI

    client = OpenAI(base_url=server.url + "/v1", api_key="none")
    answer = client.completions.create(
        model="coder", prompt=CODE, suffix="\n    return result\n", max_tokens=8, temperature=0
    )
    same = infill(server.url, n_predict=8, n_indent=0).json()
    assert answer.choices[0].text.startswith(same["content"]) and answer.usage.prompt_tokens == same["tokens_evaluated"]


def test_a_whole_large_file_as_the_prefix_is_cut_to_its_budget_not_refused(server):
    big = "".join(f"value_{i} = compute({i})\n" for i in range(60_000))  # 1.5 MB, far beyond the context in tokens
    start = time.perf_counter()
    answer = infill(server.url, input_prefix=big, input_suffix=big, n_predict=2)
    assert answer.status_code == 200, answer.text
    assert answer.json()["tokens_evaluated"] <= 2048 - 2  # the code shares the context the answer leaves
    assert time.perf_counter() - start < 30.0


def test_n_probs_gives_llama_servers_completion_probabilities_as_completions_give_logprobs(server):
    whole = infill(server.url, n_predict=6, n_indent=0, n_probs=3).json()
    probs = whole["completion_probabilities"]
    assert len(probs) == whole["tokens_predicted"]
    for entry in probs:
        assert set(entry) == {"id", "token", "bytes", "logprob", "top_logprobs"} and len(entry["top_logprobs"]) == 3
        assert entry["top_logprobs"][0]["logprob"] >= entry["logprob"] - 1e-9
    body = {"prompt": CODE, "suffix": "\n    return result\n", "max_tokens": 6, "temperature": 0.0, "logprobs": 3}
    same = httpx.post(server.url + "/v1/completions", json=body, timeout=WAIT).json()["choices"][0]["logprobs"]
    mine, theirs = [e["logprob"] for e in probs], same["token_logprobs"][: len(probs)]
    assert mine[1:] == pytest.approx(theirs[1:], abs=1e-6)  # decoded one token at a time in both
    assert mine[0] == pytest.approx(theirs[0], abs=2e-2)  # read with the prompt, in batches of what was uncached
    body = {"input_prefix": CODE, "input_suffix": "\n", "temperature": 0.0, "n_predict": 4, "stream": True}
    body["n_probs"] = 1
    with httpx.stream("POST", server.url + "/infill", json=body, timeout=WAIT) as response:
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    streamed = [p for e in events[:-1] for p in e.get("completion_probabilities", [])]
    assert len(streamed) == events[-1]["tokens_predicted"] and all(len(p["top_logprobs"]) == 1 for p in streamed)
    assert "completion_probabilities" not in infill(server.url, n_predict=2).json()  # only when asked
    assert infill(server.url, n_predict=2, post_sampling_probs=True).status_code == 400
