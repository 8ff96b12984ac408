"""scripts/shaped_gguf.py writes random-weight models with real Qwen2.5 shapes that llama.cpp loads and runs."""

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


@pytest.mark.parametrize("qtype", ["q8_0", "q4_0"])
def test_tiny_shape_loads_and_generates(tmp_path, qtype):
    import llama_cpp

    out = tmp_path / "tiny.gguf"
    subprocess.run(
        [sys.executable, str(SCRIPT), "--shape", "tiny-qwen2", "--type", qtype, str(out)], check=True, timeout=120
    )
    assert not (tmp_path / "tiny.gguf.partial").exists()
    model = llama_cpp.Llama(model_path=str(out), n_ctx=256, logits_all=True, verbose=False)
    try:
        assert model.metadata["general.architecture"] == "qwen2"
        assert model.n_vocab() == shaped.SHAPES["tiny-qwen2"].n_vocab
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
