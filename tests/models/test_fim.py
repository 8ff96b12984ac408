"""Fill-in-the-middle prompts from each family's own tokens: the markers found by the GGUF keys or by
their text, the layout each family documents (byte for byte, as the tokens render), the repo-level
form with Qwen2.5-Coder's tokens, the budgets, and a model without FIM tokens refused."""

from __future__ import annotations

import pytest
from tiny_models import write_tiny_gguf

from specrun.engine.fim_tokens import FimTokens
from specrun.engine.model import Model, read_vocabulary
from specrun.errors import InputError
from specrun.models.fim import Chunk, build_fim_prompt, missing_fim, within_budgets

QWEN = ["<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"]
STARCODER = ["<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>"]
DEEPSEEK = ["<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"]
CODELLAMA = ["▁<PRE>", "▁<SUF>", "▁<MID>", "▁<EOT>"]
CODESTRAL = ["[SUFFIX]", "[PREFIX]", "[MIDDLE]"]
KEYED = ["<a_pre>", "<a_suf>", "<a_mid>"]  # unknown texts: found only through the GGUF keys

PREFIX = "def add(a, b):\n    "
SUFFIX = "\n\nprint(add(1, 2))\n"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("fim")
    files = {
        "qwen": write_tiny_gguf(root / "qwen.gguf", special_tokens=QWEN),
        "starcoder": write_tiny_gguf(root / "starcoder.gguf", special_tokens=STARCODER),
        "deepseek": write_tiny_gguf(root / "deepseek.gguf", special_tokens=DEEPSEEK),
        "codellama": write_tiny_gguf(root / "codellama.gguf", vocab="spm", special_tokens=CODELLAMA),
        "codestral": write_tiny_gguf(root / "codestral.gguf", vocab="spm", special_tokens=CODESTRAL),
        "plain": write_tiny_gguf(root / "plain.gguf"),
    }
    keyed = write_tiny_gguf(root / "keyed.gguf", special_tokens=KEYED)
    ids = {text.decode(): i for i, text in enumerate(read_vocabulary(keyed).texts)}
    names = ("pre", "suf", "mid")
    files["keyed"] = write_tiny_gguf(
        root / "keyed-with-keys.gguf",
        special_tokens=KEYED,
        metadata={f"tokenizer.ggml.fim_{n}_token_id": ids[t] for n, t in zip(names, KEYED, strict=True)},
    )
    loaded = {name: Model(path) for name, path in files.items()}
    yield files, loaded
    for model in loaded.values():
        model.close()


def rendered(model: Model, tokens: list[int]) -> str:
    return b"".join(model.piece(t, special=True) for t in tokens).decode()


def prompt(model: Model, **parts) -> list[int]:
    fim = model.fim
    assert fim is not None
    parts.setdefault("n_ctx", 8192)
    parts.setdefault("n_predict", 64)
    tokenize = lambda text: model.tokenize(text, add_special=False, parse_special=False)  # noqa: E731
    bos = model.bos if model.add_bos else None
    return build_fim_prompt(fim, tokenize, bos=bos, **parts).tokens


@pytest.mark.parametrize(
    "family, layout",
    [
        ("qwen", "<|fim_prefix|>{p}<|fim_suffix|>{s}<|fim_middle|>"),
        ("starcoder", "<fim_prefix>{p}<fim_suffix>{s}<fim_middle>"),
        ("deepseek", "<｜fim▁begin｜>{p}<｜fim▁hole｜>{s}<｜fim▁end｜>"),
        ("keyed", "<a_pre>{p}<a_suf>{s}<a_mid>"),
        # CodeLlama's "<PRE> {prefix} <SUF>{suffix} <MID>": the prefix read as text is (a space before
        # it), the suffix without that space; the markers' own "▁" is their space.
        ("codellama", "<s>▁<PRE> {p}▁<SUF>{s}▁<MID>"),
        # Codestral: suffix first, then the prefix, and the middle follows with no marker.
        ("codestral", "<s>[SUFFIX] {s}[PREFIX] {p}"),
    ],
)
def test_each_family_gets_its_documented_layout(models, family, layout):
    _, loaded = models
    model = loaded[family]
    text = rendered(model, prompt(model, prefix=PREFIX, suffix=SUFFIX))
    assert text == layout.format(p=PREFIX, s=SUFFIX)


def test_the_cursor_line_follows_the_prefix(models):
    model = models[1]["qwen"]
    text = rendered(model, prompt(model, prefix="x = 1\n", prompt="y = ", suffix="\n"))
    assert text == "<|fim_prefix|>x = 1\ny = <|fim_suffix|>\n<|fim_middle|>"


def test_the_repo_level_form_names_each_chunk_and_the_file(models):
    model = models[1]["qwen"]
    extra = [Chunk("util.py", "def two():\n    return 2\n"), Chunk("main.py", "import util\n")]
    text = rendered(model, prompt(model, prefix=PREFIX, suffix=SUFFIX, extra=extra))
    assert text == (
        "<|repo_name|>myproject\n"
        "<|file_sep|>util.py\ndef two():\n    return 2\n"
        "<|file_sep|>main.py\nimport util\n"
        "<|file_sep|>filename\n"
        f"<|fim_prefix|>{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>"
    )


def test_chunks_without_repo_tokens_follow_a_plain_separator(models):
    model = models[1]["starcoder"]
    text = rendered(model, prompt(model, prefix="a", suffix="b", extra=[Chunk("x.py", "x = 1")]))
    assert text == "\n\n--- snippet ---\n\nx = 1<fim_prefix>a<fim_suffix>b<fim_middle>"


def test_the_prefix_keeps_its_end_the_suffix_its_start_and_the_chunks_their_newest(models):
    model = models[1]["qwen"]
    fim = model.fim
    tokenize = lambda text: model.tokenize(text, add_special=False, parse_special=False)  # noqa: E731
    long_prefix = "".join(f"line{i} = {i}\n" for i in range(2000))
    long_suffix = "".join(f"after{i} = {i}\n" for i in range(2000))
    built = build_fim_prompt(fim, tokenize, prefix=long_prefix, suffix=long_suffix, n_ctx=4096, n_predict=64)
    tokens = built.tokens
    pre, suf = tokens.index(fim.pre), tokens.index(fim.suf)
    assert suf - pre - 1 == 1536 and rendered(model, tokens[pre + 1 : suf]).endswith("line1999 = 1999\n")
    assert len(tokens) - suf - 2 == 510 and rendered(model, tokens[suf + 1 : -1]).startswith("after0 = 0\n")
    many = [Chunk(f"f{i}.py", f"v{i} = {i}\n") for i in range(800)]
    built = build_fim_prompt(fim, tokenize, prefix="a", suffix="b", extra=many, n_ctx=4096, n_predict=64)
    assert len(built.tokens) == 4096 - 64 - 1  # the chunks take what the code and the answer leave
    assert built.extra > 2000
    assert rendered(model, built.tokens[: built.extra]).endswith("<|file_sep|>filename\n")


def test_the_markers_are_read_from_the_keys_and_by_their_text_without_weights(models):
    files, _ = models
    qwen = read_vocabulary(files["qwen"]).fim
    assert qwen is not None and qwen.repo_level and qwen.describe() == "prefix-suffix-middle, repo-level"
    codestral = read_vocabulary(files["codestral"]).fim
    assert codestral is not None and codestral.suffix_first and codestral.mid is None
    assert read_vocabulary(files["keyed"]).fim is not None
    assert read_vocabulary(files["plain"]).fim is None
    assert models[1]["plain"].fim is None


def test_the_fim_pad_and_repo_markers_end_an_answer(models):
    model = models[1]["qwen"]
    fim: FimTokens = model.fim
    assert model.is_eog(fim.pad) and model.is_eog(fim.sep)


def test_a_model_without_fim_tokens_is_refused_with_the_fix():
    error = missing_fim("tiny")
    assert isinstance(error, InputError) and "cannot fill in the middle" in error.message
    assert "Qwen2.5-Coder" in error.hint


def test_cut_before_tokenizing_the_parts_keep_the_tokens_their_budgets_take(models):
    model = models[1]["qwen"]
    fim = model.fim
    tokenize = lambda text: model.tokenize(text, add_special=False, parse_special=False)  # noqa: E731
    prefix = "".join(f"line{i} = {i}\n" for i in range(5000))
    suffix = "".join(f"after{i} = {i}\n" for i in range(5000))
    cut = within_budgets(prefix, suffix, model.longest_piece())
    assert len(cut[0]) < len(prefix) and len(cut[1]) < len(suffix)
    whole = build_fim_prompt(fim, tokenize, prefix=prefix, suffix=suffix, n_ctx=8192, n_predict=8)
    part = build_fim_prompt(fim, tokenize, prefix=cut[0], suffix=cut[1], n_ctx=8192, n_predict=8)
    assert part.tokens == whole.tokens
