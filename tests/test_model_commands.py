"""`specrun pairs`, `pull`, `check` and `drafts` through typer, with errors mapped as the CLI maps them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import typer
from model_fixtures import (  # noqa: F401 - isolated_fixture provides `isolated`
    bundle_toml,
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
        '[[pair]]\nname = "tt+chunky"\ntarget = "tt"\ndraft = "chunky"\ndefault = true\nverified = true\nnote = "tiny"\n'
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
    assert "tiny" in lines[2]
    assert any("tt+remote" in line and "no (specrun pull tt+remote)" in line for line in lines)


def test_pull_assembles_once_and_prints_paths(capsys, world, tiny_draft, tiny_target):
    code, out, err = invoke(capsys, "pull", "tt+chunky", "--registry", str(world))
    assert code == 0
    target, draft = out.splitlines()
    assert Path(target) == tiny_target
    assert Path(draft).read_bytes() == tiny_draft.read_bytes()
    assert "assembling chunky" in err and "tt: already present" in err
    code, out2, err2 = invoke(capsys, "pull", "--registry", str(world))  # default pair, again: nothing to do
    assert code == 0 and out2 == out
    assert "chunky: already present" in err2 and "assembling" not in err2
    code, out3, _ = invoke(capsys, "pull", "chunky", "--json", "--registry", str(world))
    assert json.loads(out3)["pulled"] == [{"name": "chunky", "path": draft, "was": "present"}]


def test_pull_errors(capsys, world):
    code, _, err = invoke(capsys, "pull", "tt+chunk", "--registry", str(world))
    assert code == 2 and "unknown pair or model 'tt+chunk'" in err and "'tt+chunky'" in err
    code, _, err = invoke(capsys, "pull", "remote", "--registry", str(world))
    assert code == 1 and "o/remote/r.gguf" in err and "specrun pull remote" in err
    code, _, err = invoke(capsys, "pull", "hf:o/remote", "--registry", str(world))
    assert code == 2 and "malformed" in err


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
    assert code == 3
    assert out.strip().endswith("incompatible: BOS id: target 264, draft 265")
    code, out, _ = invoke(capsys, "check", str(tiny_target), str(bad), "--json")
    doc = json.loads(out)
    assert code == 3 and doc["compatible"] is False and doc["first_failure"].startswith("BOS id")
    assert [r["rule"] for r in doc["rules"]][:2] == ["vocab type", "add BOS"]


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
    hf = populate_hf_cache(isolated / "hf", "o/tiny", "other.gguf", write_tiny_gguf(tmp_path / "x.gguf", seed=5, n_layer=1).read_bytes())

    code, out, err = invoke(capsys, "drafts", str(target), "--search", str(models), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["target"] == str(target)
    found = [(Path(d["path"]).name, d["found_in"]) for d in doc["drafts"]]
    assert set(found) == {("small.gguf", str(models)), ("other.gguf", "HF cache (o/tiny)"), ("medium.gguf", str(models))}
    sizes = [d["size"] for d in doc["drafts"]]
    assert sizes == sorted(sizes) and Path(doc["drafts"][-1]["path"]) == medium
    assert all(0 < d["ratio"] < 1 and d["compatible"] for d in doc["drafts"])
    assert hf.exists()

    code, out, _ = invoke(capsys, "drafts", str(target), "--search", str(models), "--all")
    assert code == 0
    assert "no: BOS id: target 264, draft 265" in out
    assert "broken.gguf" in out and "not a GGUF" in out
    assert "bigger.gguf" not in out and "split-00002" not in out and "target-copy" not in out
    assert out.splitlines()[0].split() == ["DRAFT", "SIZE", "RATIO", "FOUND", "IN", "COMPATIBLE"]


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
    assert code == 3 and "incompatible: BOS id" in out
