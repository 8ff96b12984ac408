"""The compatibility report: llama.cpp's rules, in its order, on tiny generated GGUFs and the real pair."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from conftest import real_model
from tiny_models import write_tiny_gguf

from specrun.errors import IncompatibleModelsError, ModelFileError
from specrun.models.compat import check_pair, require_draftable

RULES = ["vocab type", "add BOS", "add EOS", "BOS id", "EOS id", "vocab size", "token text"]
# A vocabulary padded by 100 tokens at the end: the small one's specials at 264..266, then padding.
PADDED = {264: "<|endoftext|>", 265: "<|im_start|>", 266: "<|im_end|>", 364: "<pad_a>", 365: "<pad_b>", 366: "<pad_c>"}


@pytest.fixture(scope="module")
def vocab_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("vocab")


def test_same_vocabulary_is_compatible(tiny_target, tiny_draft):
    report = check_pair(tiny_target, tiny_draft)
    assert report.compatible and report.first_failure is None
    assert [r.name for r in report.rules] == RULES
    assert all(r.ok for r in report.rules)
    assert report.first_diff is None
    info = {i.name: i for i in report.info}
    assert info["architecture"].target == "llama" and info["architecture"].same
    assert info["context length"].target == 512
    assert info["fill in the middle"].target == "no (no FIM tokens)"
    assert info["chat template"].same
    json.dumps(report.to_dict())
    assert require_draftable(tiny_target, tiny_draft).drafting == "token"


def test_vocab_size_beyond_128_fails(vocab_dir, tiny_target):
    big = write_tiny_gguf(vocab_dir / "big.gguf", extra_tokens=200, bos_id=264, eos_id=264)
    small = write_tiny_gguf(vocab_dir / "small.gguf", bos_id=264, eos_id=264)
    report = check_pair(small, big)
    assert not report.compatible
    assert report.first_failure == "vocab size: difference 200, at most 128 allowed"
    size = report.rules[RULES.index("vocab size")]
    assert (size.target, size.draft) == (267, 467)


def test_vocab_size_within_128_passes(vocab_dir):
    padded = write_tiny_gguf(
        vocab_dir / "padded.gguf", extra_tokens=100, bos_id=264, eos_id=264, token_overrides=PADDED
    )
    small = write_tiny_gguf(vocab_dir / "small2.gguf", bos_id=264, eos_id=264)
    report = check_pair(padded, small)
    assert report.compatible, report.first_failure
    assert report.rules[RULES.index("vocab size")].detail == "difference 100, at most 128 allowed"


def test_one_token_text_differs(vocab_dir, tiny_target):
    other = write_tiny_gguf(vocab_dir / "tok.gguf", token_overrides={100: "zebra"})
    report = check_pair(tiny_target, other)
    assert not report.compatible
    assert (report.first_diff.id, report.first_diff.target, report.first_diff.draft, report.first_diff.count) == (
        100,
        "'d'",
        "'zebra'",
        1,
    )
    assert report.first_failure == "token text: token 100 differs: target 'd', draft 'zebra' (1 of 262 tokens differ)"
    assert all(r.ok for r in report.rules if r.name != "token text")


def test_tokens_below_id_5_are_not_compared(vocab_dir, tiny_target):
    other = write_tiny_gguf(vocab_dir / "low.gguf", token_overrides={2: "zebra"})
    assert check_pair(tiny_target, other).compatible


def test_bos_id_differs(vocab_dir, tiny_target):
    other = write_tiny_gguf(vocab_dir / "bos.gguf", bos_id=265)
    report = check_pair(tiny_target, other)
    assert report.first_failure == "BOS id: target 264, draft 265"
    assert report.drafting == "text"  # the tokens differ, the text does not
    assert require_draftable(tiny_target, other).drafting == "text"


def test_a_draft_that_cannot_share_tokens_or_text_is_refused(tiny_target, tiny_lossy):
    report = check_pair(tiny_target, tiny_lossy)
    assert not report.compatible and report.round_trips == (True, False) and report.drafting is None
    with pytest.raises(IncompatibleModelsError) as err:
        require_draftable(tiny_target, tiny_lossy)
    assert err.value.exit_code == 3
    assert (
        report.first_failure in err.value.message
        and "through text" in err.value.message
        and "\n" not in err.value.one_line()
    )


def test_add_bos_flag_differs_before_ids(vocab_dir, tiny_target):
    other = write_tiny_gguf(vocab_dir / "addbos.gguf", add_bos=True, bos_id=265)
    report = check_pair(tiny_target, other)
    assert report.first_failure == "add BOS: target False, draft True"
    assert [r.name for r in report.rules if not r.ok] == ["add BOS", "BOS id"]


def test_template_and_architecture_do_not_block(vocab_dir, tiny_target):
    other = write_tiny_gguf(vocab_dir / "tpl.gguf", chat_template="{{ messages }}")
    report = check_pair(tiny_target, other)
    assert report.compatible
    assert not {i.name: i for i in report.info}["chat template"].same


def test_bad_files_raise_model_file_errors(tmp_path, tiny_target):
    (tmp_path / "x.gguf").write_text("nope")
    with pytest.raises(ModelFileError, match="not a GGUF"):
        check_pair(tiny_target, tmp_path / "x.gguf")
    with pytest.raises(ModelFileError, match="does not exist"):
        check_pair(tmp_path / "missing.gguf", tiny_target)


def test_llama_logs_are_silent(tiny_target, tiny_other):
    """A fresh process: llama.cpp would otherwise print its loader log to stderr."""
    code = textwrap.dedent(f"""
        from specrun.models.compat import check_pair
        assert check_pair({str(tiny_target)!r}, {str(tiny_other)!r}).compatible
    """)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"}
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


# ---- the real models -----------------------------------------------------------------------------


@pytest.mark.real
def test_real_default_pair_is_compatible():
    target, draft = real_model("qwen2.5-coder-1.5b"), real_model("qwen2.5-coder-0.5b")
    report = check_pair(target, draft)
    assert report.compatible
    assert report.rules[RULES.index("vocab size")].target == 151936
    assert report.seconds < 2.0


@pytest.mark.real
def test_real_qwen_draft_against_smollm2_is_incompatible():
    qwen, smol = real_model("qwen2.5-coder-0.5b"), real_model("smollm2-135m")
    report = check_pair(qwen, smol)
    assert not report.compatible
    assert report.first_failure == "BOS id: target 151643, draft 1"
    assert report.rules[RULES.index("vocab size")].draft == 49152
