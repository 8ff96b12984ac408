"""scripts/shaped_gguf.py writes random-weight models with real shapes (Qwen2.5, Llama 3.1 8B and
EAGLE-3 and DFlash heads for it) that llama.cpp loads and runs."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import numpy as np
import pytest
from paths import SCRIPTS

pytest.importorskip("gguf", reason="the gguf package writes the models: pip install -e '.[test]'")

SCRIPT = SCRIPTS / "shaped_gguf.py"


def load_script():
    spec = importlib.util.spec_from_file_location("shaped_gguf", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["shaped_gguf"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


shaped = load_script()


@pytest.mark.parametrize("shape, qtype", [("tiny-qwen2", "q8_0"), ("tiny-qwen2", "q4_0"), ("tiny-llama", "q8_0")])
def test_tiny_shape_loads_and_generates(tmp_path, shape, qtype):
    import llama_cpp

    out = tmp_path / "tiny.gguf"
    subprocess.run([sys.executable, str(SCRIPT), "--shape", shape, "--type", qtype, str(out)], check=True, timeout=120)
    assert not (tmp_path / "tiny.gguf.partial").exists()
    model = llama_cpp.Llama(model_path=str(out), n_ctx=256, logits_all=True, verbose=False)
    try:
        assert model.metadata["general.architecture"] == shaped.SHAPES[shape].arch
        assert model.n_vocab() == shaped.SHAPES[shape].n_vocab
        tokens = model.tokenize(b"the cat sat on the mat", add_bos=False)
        model.eval(tokens)
        logits = np.array(model.scores[: model.n_tokens])
        assert np.isfinite(logits).all()
        assert len(set(logits.argmax(axis=1))) > 1, "every position predicts the same token: the weights collapsed"
        generated = list(zip(range(4), model.generate(tokens, temp=0.0, reset=True)))
        assert len(generated) == 4
    finally:
        model.close()


def test_large_shapes_share_every_token_id_below_the_smaller_vocabulary():
    big, big_types = shaped.vocabulary(shaped.SHAPES["qwen2.5-7b"].n_vocab)
    small, small_types = shaped.vocabulary(shaped.SHAPES["qwen2.5-0.5b"].n_vocab)
    assert (len(big), len(small)) == (152064, 151936)
    assert big[: len(small)] == small and big_types[: len(small)] == small_types
    for special in shaped.SPECIALS:
        assert big.index(special) == small.index(special) < 300


def test_plans_follow_the_real_models():
    plan_7b = {name: dims for name, dims, _ in shaped.tensor_plan(shaped.SHAPES["qwen2.5-7b"])}
    plan_05b = {name: dims for name, dims, _ in shaped.tensor_plan(shaped.SHAPES["qwen2.5-0.5b"])}
    assert plan_7b["blk.27.attn_k.weight"] == (512, 3584)  # 4 KV heads of 128
    assert plan_7b["blk.0.ffn_down.weight"] == (3584, 18944)
    assert plan_7b["output.weight"] == (152064, 3584)
    assert "output.weight" not in plan_05b and "blk.24.attn_norm.weight" not in plan_05b  # tied, 24 layers
    assert plan_05b["blk.23.attn_v.bias"] == (128,)  # 2 KV heads of 64
    assert len(plan_7b) == 1 + 28 * 12 + 2


def write(tmp_path, shape: str) -> str:
    out = tmp_path / f"{shape}.gguf"
    subprocess.run([sys.executable, str(SCRIPT), "--shape", shape, str(out)], check=True, timeout=120)
    return str(out)


@pytest.mark.parametrize("kind", ["eagle3", "dflash"])
def test_tiny_heads_draft_for_their_target_through_specrun(tmp_path, kind):
    """A head shape and the llama target it names load as a pair, and the head drafts (random
    weights: its drafts are seldom accepted, but every step asks it)."""
    from cli_helpers import run_json

    head = shaped.SHAPES[f"tiny-{kind}"]
    assert head.arch == kind and head.target == "tiny-llama"
    target, draft = write(tmp_path, "tiny-llama"), write(tmp_path, f"tiny-{kind}")
    common = ("the cat sat", "--target", target, "--temp", "0", "-n", "12", "--ignore-eos", "--raw", "--threads", "1")
    plain = run_json(*common, "--draft", "none")
    doc = run_json(*common, "--draft", draft, "--spec", kind)
    assert doc["text"] == plain["text"]
    assert doc["stats"]["generated_tokens"] == 12 and doc["stats"]["by_drafter"][kind]["drafted"] > 0


def test_a_head_refuses_the_qwen2_target(tmp_path):
    """specrun names the reason when a head meets a target that does not hand out layer inputs."""
    from cli_helpers import specrun

    target, draft = write(tmp_path, "tiny-qwen2"), write(tmp_path, "tiny-eagle3")
    result = specrun("run", "hi", "--target", target, "--draft", draft, "--spec", "eagle3", "-n", "2", "--raw")
    assert result.returncode != 0 and "layer inputs" in result.stderr


def test_head_plans_follow_the_published_heads():
    llama = {name: dims for name, dims, _ in shaped.tensor_plan(shaped.SHAPES["llama3.1-8b"])}
    assert llama["blk.31.attn_k.weight"] == (1024, 4096) and "blk.0.attn_q.bias" not in llama
    assert llama["output.weight"] == (128256, 4096) and len(llama) == 1 + 32 * 9 + 2
    eagle3 = {name: dims for name, dims, _ in shaped.tensor_plan(shaped.SHAPES["eagle3-llama3.1-8b"])}
    assert eagle3["fc.weight"] == (4096, 3 * 4096)  # three target layers, fused to the head's width
    assert eagle3["blk.0.attn_q.weight"] == (4096, 8192) and eagle3["blk.0.attn_k.weight"] == (1024, 8192)
    assert eagle3["blk.0.ffn_down.weight"] == (4096, 14336) and "blk.1.attn_norm.weight" not in eagle3
    dflash = {name: dims for name, dims, _ in shaped.tensor_plan(shaped.SHAPES["dflash-llama3.1-8b"])}
    assert dflash["fc.weight"] == (4096, 5 * 4096) and dflash["blk.4.attn_q_norm.weight"] == (128,)
    assert "blk.5.attn_norm.weight" not in dflash
    for plan in (eagle3, dflash):
        assert "token_embd.weight" not in plan and "output.weight" not in plan  # the target's, lent
    for name, shape in shaped.SHAPES.items():
        if shape.is_head:
            shaped.check_head(shape)
            assert max(shape.target_layers) < shaped.SHAPES[shape.target].n_layer, name
    assert shaped.SHAPES["eagle3-llama3.1-8b"].target_layers == (2, 16, 29)
    assert shaped.SHAPES["dflash-llama3.1-8b"].block_size == 16


def test_a_head_must_fit_its_target():
    from dataclasses import replace

    eagle3 = shaped.SHAPES["tiny-eagle3"]
    with pytest.raises(ValueError, match="not all layers"):
        shaped.check_head(replace(eagle3, target_layers=(0, 1, 2)))
    with pytest.raises(ValueError, match="qwen2"):
        shaped.check_head(replace(eagle3, target="tiny-qwen2"))
    with pytest.raises(ValueError, match="exactly three"):
        shaped.check_head(replace(eagle3, target_layers=(0, 1)))


def test_the_list_names_every_shape_with_its_target_and_block():
    result = subprocess.run([sys.executable, str(SCRIPT), "--list"], capture_output=True, text=True, check=True)
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()}
    assert set(rows) == set(shaped.SHAPES)
    assert rows["dflash-llama3.1-8b"] == ["dflash", "llama3.1-8b", "16"]
    assert rows["qwen2.5-7b"] == ["qwen2", "-", "-"]
