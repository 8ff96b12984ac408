"""The tokenizer over HTTP as llama-server and vLLM serve it (/tokenize, /detokenize,
/tokenizer_info, /apply-template) and the sizes /v1/models gives: what scoring harnesses and
prompt builders read, each equal to what the engine itself reads."""

from __future__ import annotations

import httpx
import pytest
from serve_helpers import FLAT_COSTS, WAIT, load_pair, served

TEXT = "the quick brown fox\njumps over the lazy dog"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a fox."}]


@pytest.fixture(scope="module")
def pair(tiny_target):
    loaded = load_pair(tiny_target, None)
    yield loaded
    loaded.close()


@pytest.fixture(scope="module")
def url(pair):
    with served(pair, costs=FLAT_COSTS) as running:
        yield running.url


def post(url: str, path: str, body: dict, status: int = 200) -> dict:
    response = httpx.post(url + path, json=body, timeout=WAIT)
    assert response.status_code == status, response.text
    return response.json()


def test_llama_server_fields_tokenize_as_the_model_does_and_detokenize_back(url, pair):
    model = pair.target_model
    plain = post(url, "/tokenize", {"content": TEXT})
    assert plain["tokens"] == model.tokenize(TEXT, add_special=False, parse_special=True)
    assert plain["count"] == len(plain["tokens"]) and plain["max_model_len"] == pair.n_ctx
    special = post(url, "/tokenize", {"content": TEXT, "add_special": True})["tokens"]
    assert special == model.tokenize(TEXT, add_special=True, parse_special=True)
    assert post(url, "/detokenize", {"tokens": plain["tokens"]})["content"] == TEXT
    pieces = post(url, "/tokenize", {"content": TEXT, "with_pieces": True})["tokens"]
    assert [p["id"] for p in pieces] == plain["tokens"] and "".join(p["piece"] for p in pieces) == TEXT


def test_content_mixes_strings_and_token_ids_in_order(url, pair):
    model = pair.target_model
    tokens = post(url, "/tokenize", {"content": ["the fox", 7, " and dog"], "add_special": True})["tokens"]
    head = model.tokenize("the fox", add_special=True, parse_special=True)
    tail = model.tokenize(" and dog", add_special=False, parse_special=True)
    assert tokens == head + [7] + tail


def test_vllm_fields_tokenize_and_detokenize_as_a_remote_tokenizer_reads_them(url, pair):
    model = pair.target_model
    tokens = post(url, "/tokenize", {"prompt": TEXT, "add_special_tokens": False})["tokens"]
    assert tokens == model.tokenize(TEXT, add_special=False, parse_special=True)
    with_bos = post(url, "/tokenize", {"prompt": TEXT})["tokens"]  # vLLM adds the specials by default
    assert with_bos == model.tokenize(TEXT, add_special=True, parse_special=True)
    assert post(url, "/detokenize", {"tokens": tokens})["prompt"] == TEXT


def test_tokenizer_info_names_the_special_tokens_as_they_tokenize(url, pair):
    info = httpx.get(url + "/tokenizer_info", timeout=WAIT).json()
    model = pair.target_model
    assert info["eos_token_id"] == model.eos and info["vocab_size"] == model.n_vocab
    assert info["model_max_length"] == pair.n_ctx and info["chat_template"] == model.chat_template()
    # a remote tokenizer finds the EOS id by tokenizing its text without specials added
    assert post(url, "/tokenize", {"prompt": info["eos_token"], "add_special_tokens": False})["tokens"] == [model.eos]
    assert info["bos_token_id"] == (model.bos if model.bos >= 0 else None)


def test_messages_tokenize_to_the_prompt_a_chat_request_reads(url):
    tokens = post(url, "/tokenize", {"messages": MESSAGES})["tokens"]
    chat = post(url, "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 1, "temperature": 0})
    assert len(tokens) == chat["usage"]["prompt_tokens"]
    text = post(url, "/apply-template", {"messages": MESSAGES})["prompt"]
    assert post(url, "/detokenize", {"tokens": tokens})["content"].endswith(text)
    opened = post(url, "/tokenize", {"messages": MESSAGES, "add_generation_prompt": False})["tokens"]
    assert len(opened) < len(tokens) and tokens[: len(opened)] == opened


def test_models_give_the_context_and_vocabulary_sizes(url, pair):
    entry = httpx.get(url + "/v1/models", timeout=WAIT).json()["data"][0]
    assert entry["max_model_len"] == pair.n_ctx == entry["meta"]["n_ctx"]
    assert entry["meta"]["n_vocab"] == pair.target_model.n_vocab


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/detokenize", {"tokens": [1, 10**6]}, "tokens"),
        ("/detokenize", {"tokens": [-1]}, "tokens"),
        ("/tokenize", {"content": ["a", 10**6]}, "content"),
        ("/tokenize", {"content": "a", "prompt": "b"}, None),
        ("/tokenize", {}, None),
        ("/detokenize", {"tokens": list(range(262_145))}, "tokens"),
    ],
)
def test_bad_tokenizer_requests_are_a_400_naming_the_field(url, path, body, field):
    error = post(url, path, body, 400)["error"]
    assert error["type"] == "invalid_request_error"
    if field is not None:
        assert error["param"] == field or error["message"].startswith(field), error
