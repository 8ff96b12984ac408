"""Log-probabilities out of the server: the target's own log-softmax at every answer token, the
same in every speculation mode and equal to llama-cpp-python's for the same prompt and file,
in OpenAI's chat and completion shapes, whole and streamed, as the official client parses them."""

from __future__ import annotations

import httpx
import llama_cpp
import numpy as np
import openai
import pytest
from serve_helpers import FLAT_COSTS, WAIT, load_pair, served

from specrun.engine.llama import Context

CHEAP_DRAFTS = {n: 0.001 for n in FLAT_COSTS}  # with FLAT_COSTS: under auto, drafting pays
PROMPT = "abc abc abc abc abc abc"
TOKENS = 24
ATOL = 2e-3  # batched and single-token kernels round differently


@pytest.fixture(scope="module")
def pair(tiny_target, tiny_draft):
    loaded = load_pair(tiny_target, tiny_draft)
    yield loaded
    loaded.close()


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=WAIT)


def completion(url: str, **options):
    return client(url).completions.create(model="tiny", prompt=PROMPT, max_tokens=TOKENS, logprobs=3, **options)


def as_text(tokens: list[str]) -> str:
    """Completion tokens back to text: "bytes:\\xNN…" tokens are parts of characters."""
    raw = b"".join(bytes.fromhex(t[6:].replace("\\x", "")) if t.startswith("bytes:") else t.encode() for t in tokens)
    return raw.decode("utf-8", "replace")


def log_softmax(row) -> np.ndarray:
    values = np.asarray(row, dtype=np.float64)
    shifted = values - values.max()
    return shifted - np.log(np.exp(shifted).sum())


def recomputed(pair, prompt: list[int], answer: list[int]) -> list[float]:
    """Each answer token's log-probability, read one token at a time from a fresh context."""
    ctx = Context(pair.target_model, n_ctx=512, n_threads=1)
    try:
        row = ctx.feed(0, prompt, "last")
        out = []
        for token in answer:
            out.append(float(log_softmax(row)[token]))
            row = ctx.feed(0, [token], "last")
        return out
    finally:
        ctx.close()


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_every_mode_reports_the_targets_own_log_probabilities(pair, temperature):
    prompt = pair.target_model.tokenize(PROMPT, add_special=True, parse_special=True)
    answers = {}
    for mode in ("off", "ngram", "draft", "auto"):
        with served(pair, costs=FLAT_COSTS, draft_costs=CHEAP_DRAFTS, mode=mode, draft_max=4) as running:
            answer = completion(running.url, temperature=temperature, seed=5, extra_body={"return_tokens": True})
            timings = answer.model_extra["timings"]
        tokens = answer.choices[0].model_extra["tokens"]
        logprobs = answer.choices[0].logprobs
        assert len(logprobs.token_logprobs) == len(tokens) == TOKENS
        np.testing.assert_allclose(logprobs.token_logprobs, recomputed(pair, prompt, tokens), atol=ATOL)
        for chosen, top in zip(logprobs.token_logprobs, logprobs.top_logprobs):
            assert len(top) == 3 and max(top.values()) >= chosen - ATOL
        answers[mode] = (tokens, logprobs.token_logprobs, timings.get("draft_n", 0))
    if temperature == 0:
        plain_tokens, plain_logprobs, _ = answers["off"]
        for mode, (tokens, logprobs, _) in answers.items():
            assert tokens == plain_tokens, mode
            np.testing.assert_allclose(logprobs, plain_logprobs, atol=ATOL)
    assert any(drafted for _, _, drafted in answers.values())  # some mode drafted: the rows came from verify passes


def test_log_probabilities_equal_llama_cpp_pythons_own(pair, tiny_target):
    with served(pair, costs=FLAT_COSTS, draft_costs=CHEAP_DRAFTS, mode="auto") as running:
        ours = completion(running.url, temperature=0).choices[0].logprobs
    llama = llama_cpp.Llama(
        model_path=str(tiny_target), n_ctx=512, logits_all=True, verbose=False, n_threads=1, flash_attn=True
    )
    try:
        theirs = llama.create_completion(PROMPT, max_tokens=TOKENS, temperature=0, logprobs=3)["choices"][0]["logprobs"]
    finally:
        llama.close()
    np.testing.assert_allclose(ours.token_logprobs, theirs["token_logprobs"], atol=ATOL)
    for mine, other in zip(ours.top_logprobs, theirs["top_logprobs"]):  # their keys drop partial characters
        assert all(any(abs(value - ours_) < ATOL for ours_ in mine.values()) for value in other.values())


def test_chat_logprobs_come_whole_and_streamed_in_openais_shape(pair):
    messages = [{"role": "user", "content": PROMPT}]
    ask = {"model": "tiny", "messages": messages, "max_tokens": 12, "temperature": 0}
    ask |= {"logprobs": True, "top_logprobs": 2}
    with served(pair, costs=FLAT_COSTS, draft_costs=CHEAP_DRAFTS, mode="auto") as running:
        api = client(running.url)
        whole = api.chat.completions.create(**ask)
        chunks = list(api.chat.completions.create(**ask, stream=True))
        plain = api.chat.completions.create(**{**ask, "logprobs": None, "top_logprobs": None})
    content = whole.choices[0].logprobs.content
    assert len(content) == whole.usage.completion_tokens == 12
    assert (
        b"".join(bytes(entry.bytes) for entry in content)
        .decode("utf-8", "replace")
        .startswith(whole.choices[0].message.content)
    )
    for entry in content:
        assert bytes(entry.bytes).decode("utf-8", "replace") == entry.token
        assert len(entry.top_logprobs) == 2 and entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [e.token for e in streamed] == [e.token for e in content]
    np.testing.assert_allclose([e.logprob for e in streamed], [e.logprob for e in content], atol=ATOL)
    assert plain.choices[0].logprobs is None


def test_completion_logprobs_stream_with_offsets_into_the_text(pair):
    with served(pair, costs=FLAT_COSTS, draft_costs=CHEAP_DRAFTS, mode="auto") as running:
        whole = completion(running.url, temperature=0, extra_body={"return_tokens": True})
        chunks = list(completion(running.url, temperature=0, stream=True))
    logprobs = whole.choices[0].logprobs
    ids = whole.choices[0].model_extra["tokens"]
    text = whole.choices[0].text
    model = pair.target_model
    after_part = False  # a token after part of a character: the character's U+FFFD comes first
    for listed, token, offset in zip(logprobs.tokens, ids, logprobs.text_offset):
        raw = model.piece(token, special=True)
        assert as_text([listed]).encode("utf-8", "replace") == raw or "\ufffd" in as_text([listed])
        whole_text = model.piece(token) == raw and not listed.startswith("bytes:")  # written in the text as listed
        if whole_text and not after_part:
            assert text[offset : offset + len(listed)] == listed
        after_part = listed.startswith("bytes:")
    assert logprobs.text_offset[0] == 0 and logprobs.text_offset == sorted(logprobs.text_offset)
    assert logprobs.text_offset[-1] <= len(text)
    streamed = [c.choices[0].logprobs for c in chunks if c.choices and c.choices[0].logprobs]
    assert [t for s in streamed for t in s.tokens] == logprobs.tokens
    assert [o for s in streamed for o in s.text_offset] == logprobs.text_offset


def test_echo_scores_the_prompt_as_plain_decoding_reads_it_token_by_token(pair):
    prompt = pair.target_model.tokenize(PROMPT, add_special=True, parse_special=True)
    with served(pair, costs=FLAT_COSTS, draft_costs=CHEAP_DRAFTS, mode="auto") as running:
        api = client(running.url)
        scored = api.completions.create(model="tiny", prompt=PROMPT, max_tokens=0, echo=True, logprobs=1)
        again = api.completions.create(model="tiny", prompt=PROMPT, max_tokens=0, echo=True, logprobs=1)
        one_more = api.completions.create(model="tiny", prompt=prompt, max_tokens=1, echo=True, logprobs=1)
    choice = scored.choices[0]
    assert choice.text == PROMPT and choice.finish_reason == "length"
    logprobs = choice.logprobs
    assert logprobs.token_logprobs[0] is None and logprobs.top_logprobs[0] is None
    expected = recomputed(pair, prompt[:1], prompt[1:])
    np.testing.assert_allclose(logprobs.token_logprobs[1:], expected, atol=ATOL)
    assert sum(logprobs.token_logprobs[1:]) == pytest.approx(sum(expected), abs=ATOL * len(expected))
    assert again.choices[0].logprobs.token_logprobs == logprobs.token_logprobs  # a cached prompt is scored alike
    extended = one_more.choices[0].logprobs  # the prompt as token ids, and the answer's first token after it
    assert len(extended.token_logprobs) == len(prompt) + 1
    np.testing.assert_allclose(extended.token_logprobs[1:-1], logprobs.token_logprobs[1:], atol=ATOL)
    assert one_more.choices[0].text.startswith(PROMPT)


def test_several_prompts_are_choices_in_order(pair):
    texts = ["abc abc", "the fox", "xyz xyz xyz"]
    ids = [pair.target_model.tokenize(t, add_special=True, parse_special=True) for t in texts]
    with served(pair, costs=FLAT_COSTS, mode="auto", parallel=2) as running:
        api = client(running.url)
        by_text = api.completions.create(model="tiny", prompt=texts, max_tokens=4, temperature=0)
        by_ids = api.completions.create(model="tiny", prompt=ids, max_tokens=4, temperature=0, echo=True, logprobs=0)
        alone = [api.completions.create(model="tiny", prompt=t, max_tokens=4, temperature=0) for t in texts]
    assert [c.index for c in by_text.choices] == [0, 1, 2]
    assert [c.text for c in by_text.choices] == [a.choices[0].text for a in alone]
    assert by_text.usage.prompt_tokens == sum(a.usage.prompt_tokens for a in alone)
    for choice, text, answer in zip(by_ids.choices, texts, alone):
        assert choice.text == text + answer.choices[0].text
        assert choice.logprobs.token_logprobs[0] is None and len(choice.logprobs.token_logprobs) > 4


@pytest.mark.parametrize(
    "body, field",
    [
        ({"prompt": [1, 10**7]}, "prompt"),
        ({"prompt": [[1, 2], [10**7]]}, "prompt"),
        ({"prompt": ["a", "b"], "stream": True}, "stream"),
        ({"prompt": "a", "echo": True, "suffix": "b"}, "echo"),
        ({"prompt": ["a"] * 257}, "prompt"),
    ],
)
def test_bad_scoring_requests_are_a_400_naming_the_field(pair, body, field):
    with served(pair, costs=FLAT_COSTS) as running:
        response = httpx.post(running.url + "/v1/completions", json={"max_tokens": 1, **body}, timeout=WAIT)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == field


def test_a_streamed_echo_comes_first_with_its_scores(pair):
    with served(pair, costs=FLAT_COSTS, draft_costs=CHEAP_DRAFTS, mode="auto") as running:
        api = client(running.url)
        whole = api.completions.create(model="tiny", prompt=PROMPT, max_tokens=3, echo=True, logprobs=1, temperature=0)
        chunks = list(
            api.completions.create(
                model="tiny", prompt=PROMPT, max_tokens=3, echo=True, logprobs=1, temperature=0, stream=True
            )
        )
    pieces = [c.choices[0] for c in chunks if c.choices and (c.choices[0].text or c.choices[0].logprobs)]
    assert pieces[0].text.startswith(PROMPT) and pieces[0].logprobs.token_logprobs[0] is None
    assert "".join(p.text for p in pieces) == whole.choices[0].text
    streamed = [lp for p in pieces for lp in p.logprobs.token_logprobs]
    assert streamed[0] is None and whole.choices[0].logprobs.token_logprobs[0] is None
    np.testing.assert_allclose(streamed[1:], whole.choices[0].logprobs.token_logprobs[1:], atol=ATOL)
