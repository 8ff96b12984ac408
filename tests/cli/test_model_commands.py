"""`specrun pairs`, `pull`, `check` and `drafts` through typer, with errors mapped as the CLI maps them."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import typer
from model_fixtures import (  # noqa: F401 - isolated_fixture provides `isolated`
    bundle_toml,
    fake_hub,
    isolated_fixture,
    make_chunk_dists,
    populate_hf_cache,
    write_registry,
)
from tiny_models import write_tiny_gguf

from specrun.cli import models as model_commands
from specrun.errors import SpecrunError


def invoke(capsys, *args: str) -> tuple[int, str, str]:
    """Run the commands in-process; a SpecrunError becomes its exit code and one line, as in main()."""
    app = typer.Typer(add_completion=False)

    @app.callback()
    def _root() -> None:
        """specrun"""

    model_commands.register(app)
    try:
        result = app(args=list(args), prog_name="specrun", standalone_mode=False)
        code = result if isinstance(result, int) else 0
    except SpecrunError as err:
        print(f"specrun: error: {err.one_line()}", file=__import__("sys").stderr)
        code = err.exit_code
    except typer.Exit as done:
        code = done.exit_code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def world(isolated, tmp_path, monkeypatch, tiny_target, tiny_draft, tiny_other):
    """A registry over tiny models: a path pair (default), a bundle model, and an HF-only model."""
    payload = tiny_draft.read_bytes()
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    prefix = f"cmdchunk-{abs(hash(str(tmp_path))) % 10**8}"
    make_chunk_dists(site, payload, prefix, 2)
    reg = write_registry(
        tmp_path / "reg.toml",
        f'[[model]]\nname = "tt"\nparams = "1M"\nsize = {tiny_target.stat().st_size}\npath = "{tiny_target}"\n'
        f'[[model]]\nname = "chunky"\nsize = {len(payload)}\nbundle = {bundle_toml(prefix, 2, payload)}\n'
        '[[model]]\nname = "remote"\nhf = { repo = "o/remote", file = "r.gguf" }\n'
        '[[pair]]\nname = "tt+chunky"\ntarget = "tt"\ndraft = "chunky"\ndefault = true\nverified = true\nnote = '
        '"tiny"\n'
        '[[pair]]\nname = "tt+remote"\ntarget = "tt"\ndraft = "remote"\n',
    )
    return reg


def test_pairs_json_lists_default_and_availability(capsys, world):
    code, out, err = invoke(capsys, "pairs", "--json", "--registry", str(world))
    assert code == 0 and err == ""
    doc = json.loads(out)
    by_name = {p["name"]: p for p in doc["pairs"]}
    first, second = doc["pairs"][0], by_name["tt+remote"]
    assert first["name"] == "tt+chunky" and first["default"] and first["verified"] and first["available"]
    assert first["target"]["where"] == "file" and first["target"]["path"]
    assert first["infill"] == ""  # the tiny target has no FIM tokens; a target not on disk is not known yet
    assert second["infill"] is None or second["target"]["path"]
    assert first["draft"]["where"] == "pip bundle" and first["draft"]["offline"] and first["draft"]["path"] is None
    assert not second["available"] and not by_name["qwen2.5-coder-1.5b+0.5b"]["default"]
    assert second["draft"]["where"] == "Hugging Face" and second["draft"]["hf"] == "hf:o/remote/r.gguf"
    assert str(world) in doc["registry_files"]
    assert {m["name"] for m in doc["models"]} >= {"tt", "chunky", "remote", "qwen2.5-coder-1.5b"}


def test_pairs_table(capsys, world):
    code, out, _ = invoke(capsys, "pairs", "--registry", str(world), "--long")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("PAIR")
    assert lines[1].startswith("tt+chunky *") and "yes (file; pip bundle, assembled on first use)" in lines[1]
    assert lines[0].split()[-1] == "INFILL" and lines[1].split()[-1] == "no"
    assert "tiny" in lines[2]
    assert any("tt+remote" in line and "no (specrun pull tt+remote)" in line for line in lines)


def test_pull_assembles_once_and_prints_paths(capsys, world, tiny_draft, tiny_target):
    code, out, err = invoke(capsys, "pull", "tt+chunky", "--registry", str(world))
    assert code == 0
    target, draft = out.splitlines()
    assert Path(target) == tiny_target
    assert Path(draft).read_bytes() == tiny_draft.read_bytes()
    sha = hashlib.sha256(tiny_draft.read_bytes()).hexdigest()
    assert "assembling chunky" in err and "tt: already present\n" in err and f"chunky: sha256 {sha}\n" in err
    code, out2, err2 = invoke(capsys, "pull", "--registry", str(world))  # default pair, again: nothing to do
    assert code == 0 and out2 == out
    assert f"chunky: already present, sha256 {sha}" in err2 and "assembling" not in err2
    code, out3, _ = invoke(capsys, "pull", "chunky", "--json", "--registry", str(world))
    assert json.loads(out3)["pulled"] == [{"name": "chunky", "path": draft, "was": "present", "sha256": [sha]}]


def test_pull_errors(capsys, world):
    code, _, err = invoke(capsys, "pull", "tt+chunk", "--registry", str(world))
    assert code == 2 and "unknown pair or model 'tt+chunk'" in err and "'tt+chunky'" in err
    code, _, err = invoke(capsys, "pull", "remote", "--registry", str(world))
    assert code == 1 and "o/remote/r.gguf" in err and "specrun pull remote" in err
    code, _, err = invoke(capsys, "pull", "hf:o/remote", "--registry", str(world))
    assert code == 2 and "malformed" in err


def test_a_registry_model_named_like_a_path_is_refused_before_anything_is_written(
    capsys, isolated, tmp_path, tiny_draft, monkeypatch
):
    payload = tiny_draft.read_bytes()
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    prefix = f"evilchunk-{abs(hash(str(tmp_path))) % 10**8}"
    make_chunk_dists(site, payload, prefix, 2)
    reg = write_registry(
        tmp_path / "evil.toml", f'[[model]]\nname = "../../x"\nbundle = {bundle_toml(prefix, 2, payload)}\n'
    )
    outside = isolated / "cache"  # $XDG_CACHE_HOME: specrun/models/../../x.gguf lands here
    victim = outside / ".x.gguf.1234.tmp"  # a name the stale-temp cleanup would have deleted
    victim.write_text("someone else's file")
    before = sorted(p.name for p in outside.iterdir())
    code, out, err = invoke(capsys, "pull", "../../x", "--registry", str(reg))
    assert code == 2 and out == ""
    assert err.strip() == (
        f"specrun: error: [[model]] #1 in {reg} has the name '../../x', which cannot be a file name "
        "(use only letters, digits and . _ + -, and not . or ..)"
    )
    assert victim.read_text() == "someone else's file" and sorted(p.name for p in outside.iterdir()) == before


def test_bundle_paths_refuse_unsafe_names_built_in_code(tmp_path):
    from specrun.errors import RegistryError
    from specrun.models import bundle

    assert bundle.target_path("ok-1.5b", tmp_path) == tmp_path / "models" / "ok-1.5b.gguf"
    for name in ("../x", "..", "a/b"):
        with pytest.raises(RegistryError, match="cannot be a file name"):
            bundle.target_path(name, tmp_path)


def test_pull_prints_the_sha256_of_what_it_downloaded(capsys, world, monkeypatch, tiny_other):
    data = tiny_other.read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    fake_hub(monkeypatch, {"r.gguf": data, "x.gguf": data}, [])
    code, out, err = invoke(capsys, "pull", "remote", "--registry", str(world))
    assert code == 0 and Path(out.strip()).read_bytes() == data
    assert f"remote: sha256 {sha}\n" in err
    code, out, err = invoke(capsys, "pull", "hf:o/other/x.gguf", "--json")
    assert (
        code == 0
        and json.loads(out)["pulled"][0]["sha256"] == [sha]
        and json.loads(out)["pulled"][0]["was"] == "fetched"
    )
    code, _, err = invoke(capsys, "pull", "remote", "--registry", str(world))  # present now: named by its cache blob
    assert code == 0 and f"remote: already present, sha256 {sha}" in err


def test_pull_prints_one_sha256_per_shard_of_a_split_model(capsys, isolated, monkeypatch, tiny_other, tiny_draft):
    one, two = tiny_other.read_bytes(), tiny_draft.read_bytes()
    names = ["s-00001-of-00002.gguf", "s-00002-of-00002.gguf"]
    fake_hub(monkeypatch, dict(zip(names, (one, two))), [])
    digests = [hashlib.sha256(one).hexdigest(), hashlib.sha256(two).hexdigest()]
    code, out, err = invoke(capsys, "pull", f"hf:o/split/{names[0]}")
    assert code == 0 and Path(out.strip()).name == names[0]
    assert f"hf:o/split/{names[0]}: sha256 {digests[0]}, {digests[1]}\n" in err  # in shard order, to paste as a list
    code, out, _ = invoke(capsys, "pull", f"hf:o/split/{names[0]}", "--json")
    assert code == 0 and json.loads(out)["pulled"][0] | {"path": None} == {
        "name": f"hf:o/split/{names[0]}",
        "path": None,
        "was": "present",
        "sha256": digests,
    }


def test_pull_of_a_download_that_differs_from_its_pin_exits_1_with_one_line(
    capsys, isolated, tmp_path, monkeypatch, tiny_other
):
    data = tiny_other.read_bytes()
    fake_hub(monkeypatch, {"r.gguf": data}, [])
    reg = write_registry(
        tmp_path / "pin.toml",
        f'[[model]]\nname = "pinned"\nhf = {{ repo = "o/p", file = "r.gguf", sha256 = "{"e" * 64}" }}\n',
    )
    code, out, err = invoke(capsys, "pull", "pinned", "--registry", str(reg))
    errors = [line for line in err.splitlines() if "error" in line]  # the other stderr line: "verifying …" progress
    assert (
        code == 1 and out == "" and len(errors) == 1 and errors[0].startswith("specrun: error: o/p/r.gguf has sha256")
    )
    assert (
        f"sha256 {hashlib.sha256(data).hexdigest()}, but the registry pins {'e' * 64}; the download was deleted" in err
    )
    assert not list((isolated / "hf" / "models--o--p" / "blobs").iterdir())


def test_pull_hf_spec_from_cache(capsys, isolated, tiny_other):
    snap = populate_hf_cache(isolated / "hf", "o/r", "x.gguf", tiny_other.read_bytes())
    code, out, err = invoke(capsys, "pull", "hf:o/r/x.gguf")
    assert code == 0 and out.strip() == str(snap) and "already present" in err


def test_check_compatible_and_not(capsys, isolated, tmp_path, tiny_target, tiny_draft):
    code, out, _ = invoke(capsys, "check", str(tiny_target), str(tiny_draft))
    assert code == 0
    assert "compatible: the draft can speculate for the target" in out
    assert "token text  ok" in out
    bad = write_tiny_gguf(tmp_path / "bos.gguf", bos_id=265)
    code, out, _ = invoke(capsys, "check", str(tiny_target), str(bad))
    assert code == 0  # no token means the same, but the text does: it drafts through text
    assert "incompatible tokens: BOS id: target 264, draft 265" in out and out.strip().splitlines()[-1].startswith(
        "drafts through text"
    )
    code, out, _ = invoke(capsys, "check", str(tiny_target), str(bad), "--json")
    doc = json.loads(out)
    assert (
        code == 0
        and doc["compatible"] is False
        and doc["drafting"] == "text"
        and doc["first_failure"].startswith("BOS id")
    )
    assert [r["rule"] for r in doc["rules"]][:2] == ["vocab type", "add BOS"]
    lossy = write_tiny_gguf(tmp_path / "lossy.gguf", bos_id=265, token_overrides={0xF0: "[lost]"})
    code, out, _ = invoke(capsys, "check", str(tiny_target), str(lossy), "--json")
    doc = json.loads(out)
    assert code == 3 and doc["drafting"] is None
    code, out, _ = invoke(capsys, "check", str(tiny_target), str(lossy))
    assert code == 3 and "cannot draft through text either: the draft's tokenizer" in out


def test_check_defaults_and_errors(capsys, world, tmp_path, tiny_target):
    code, out, _ = invoke(capsys, "check", "--registry", str(world))  # the default pair, assembled on the way
    assert code == 0 and "compatible" in out
    code, out, _ = invoke(capsys, "check", "tt", "--registry", str(world))  # the target's pair supplies the draft
    assert code == 0
    code, _, err = invoke(capsys, "check", str(tiny_target), "--registry", str(world))
    assert code == 2 and "no draft given" in err
    code, _, err = invoke(capsys, "check", str(tiny_target), str(tmp_path / "nope.gguf"))
    assert code == 2 and "does not exist" in err
    code, _, err = invoke(capsys, "check", str(tiny_target), str(tmp_path))
    assert code == 2 and "is a directory" in err


def test_drafts_lists_compatible_local_files_smallest_first(capsys, isolated, tmp_path, tiny_other):
    models = tmp_path / "models"
    (models / "sub").mkdir(parents=True)
    target = write_tiny_gguf(tmp_path / "target.gguf", seed=0, n_layer=4)
    small = write_tiny_gguf(models / "small.gguf", seed=1, n_layer=1)
    medium = write_tiny_gguf(models / "sub" / "medium.gguf", seed=2, n_layer=2)
    write_tiny_gguf(models / "wrong-bos.gguf", seed=1, n_layer=1, bos_id=265)
    write_tiny_gguf(models / "bigger.gguf", seed=1, n_layer=6)  # larger than the target: not a draft
    shutil.copy(small, models / "split-00002-of-00002.gguf")  # a later shard is never a candidate
    (models / "broken.gguf").write_text("not a model")
    shutil.copy(target, models / "target-copy.gguf")  # same size as the target: not smaller
    hf = populate_hf_cache(
        isolated / "hf", "o/tiny", "other.gguf", write_tiny_gguf(tmp_path / "x.gguf", seed=5, n_layer=1).read_bytes()
    )

    code, out, err = invoke(capsys, "drafts", str(target), "--search", str(models), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["target"] == str(target)
    found = [(Path(d["path"]).name, d["found_in"]) for d in doc["drafts"]]
    tokens = [d for d in doc["drafts"] if d["drafting"] == "token"]
    assert set(found) == {
        ("small.gguf", str(models)),
        ("other.gguf", "HF cache (o/tiny)"),
        ("medium.gguf", str(models)),
        ("wrong-bos.gguf", str(models)),
    }
    assert doc["drafts"][: len(tokens)] == tokens and [d["drafting"] for d in doc["drafts"][len(tokens) :]] == [
        "text"
    ]  # text-level ones after
    sizes = [d["size"] for d in tokens]
    assert sizes == sorted(sizes) and Path(tokens[-1]["path"]) == medium
    assert all(0 < d["ratio"] < 1 and d["compatible"] for d in tokens)
    assert Path(doc["drafts"][-1]["path"]).name == "wrong-bos.gguf" and not doc["drafts"][-1]["compatible"]
    assert hf.exists()

    code, out, _ = invoke(capsys, "drafts", str(target), "--search", str(models), "--all")
    assert code == 0
    assert "no: BOS id: target 264, draft 265" in out
    assert "broken.gguf" in out and "not a GGUF" in out
    assert "bigger.gguf" not in out and "split-00002" not in out and "target-copy" not in out
    assert out.splitlines()[0].split() == ["DRAFT", "SIZE", "RATIO", "DRAFTS", "FOUND", "IN", "COMPATIBLE"]


def test_drafts_nothing_found_and_bad_search_dir(capsys, isolated, tmp_path):
    target = write_tiny_gguf(tmp_path / "lonely.gguf", seed=0)
    code, out, err = invoke(capsys, "drafts", str(target))
    assert code == 0 and out == "" and "no compatible draft found for lonely.gguf" in err
    code, _, err = invoke(capsys, "drafts", str(target), "--search", str(tmp_path / "nowhere"))
    assert code == 2 and "is not a directory" in err


def test_progress_lines_when_not_a_terminal(capsys):
    import io

    stream = io.StringIO()
    with model_commands.progress_display(stream) as hook:
        hook("assembling x", 0, 2_000_000_000)
        hook("assembling x", 1_000_000_000, 2_000_000_000)
        hook("assembling x", 2_000_000_000, 2_000_000_000)
    assert stream.getvalue() == "assembling x (2.00 GB)…\nassembling x: done\n"


def test_progress_bar_on_a_terminal():
    import io

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    stream = Terminal()
    with model_commands.progress_display(stream) as hook:
        hook("assembling x", 0, 1000)
        hook("assembling x", 1000, 1000)
        hook("o/r/f.gguf", 5, None)
    assert "assembling x" in stream.getvalue()


@pytest.mark.real
def test_real_check_exit_codes(capsys):
    from conftest import real_model as _real

    _real("qwen2.5-coder-1.5b"), _real("qwen2.5-coder-0.5b"), _real("smollm2-135m")
    code, out, _ = invoke(capsys, "check")
    assert code == 0 and "151936" in out
    code, out, _ = invoke(capsys, "check", "qwen2.5-coder-0.5b", "smollm2-135m")
    # tokens differ, text does not: the pair drafts through text, so check passes and says how
    assert code == 0 and "incompatible tokens: BOS id" in out and "drafts through text" in out


def test_drafts_skips_unreadable_files_with_one_line_each_and_lists_the_rest(capsys, isolated, tmp_path):
    """The folders drafts scans hold whatever was put there: a file the reader refuses (here one
    that once raised RecursionError, one that raised OverflowError, one that took seconds) is one
    line on stderr, and every readable draft is still listed."""
    from gguf_bytes import FLOAT32, header, model, nested_array, scalar, string, u32, u64

    models = tmp_path / "models"
    models.mkdir()
    target = write_tiny_gguf(tmp_path / "target.gguf", seed=0, n_layer=4)
    write_tiny_gguf(models / "a-good.gguf", seed=1, n_layer=1)
    (models / "b-nested.gguf").write_bytes(header([nested_array("k", 1200)]))
    (models / "c-alignment.gguf").write_bytes(
        model([scalar("general.alignment", FLOAT32, float("inf"))], [("t", (8,))])
    )
    (models / "d-dims.gguf").write_bytes(
        header([], [string("t") + u32(40_000) + u64(2**32) * 40_000 + u32(0) + u64(0)])
    )
    write_tiny_gguf(models / "e-good.gguf", seed=2, n_layer=2)
    bad = ["b-nested.gguf", "c-alignment.gguf", "d-dims.gguf"]

    code, out, err = invoke(capsys, "drafts", str(target), "--search", str(models), "--json")
    assert code == 0, err
    assert [Path(d["path"]).name for d in json.loads(out)["drafts"]] == ["a-good.gguf", "e-good.gguf"]
    lines = err.strip().splitlines()
    assert len(lines) == len(bad) and "Traceback" not in err, err
    for name, line in zip(sorted(bad), sorted(lines, key=lambda line: next(n for n in bad if n in line))):
        assert line.startswith("specrun drafts: skipped an unreadable file:") and name in line, line
        assert "not a readable GGUF model" in line, line

    code, out, err = invoke(capsys, "drafts", str(target), "--search", str(models))
    assert code == 0 and "a-good.gguf" in out and "e-good.gguf" in out and len(err.strip().splitlines()) == len(bad)

    code, out, err = invoke(capsys, "drafts", str(target), "--search", str(models), "--all")  # said once: in the table
    assert code == 0 and err == "", err
    for name in bad:
        assert next(line for line in out.splitlines() if name in line).rstrip().split("  ")[-1].startswith("no: ")
