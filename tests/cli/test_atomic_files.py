"""Files specrun writes: a replaced file keeps its mode, a symlink stays a link, an exclusive write
never replaces anything, and the files several runs update (the cost cache, the hash record) keep
every run's entries when two processes write at once."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from cli_helpers import env as cli_env

from specrun.atomic import write_atomic

pytestmark = pytest.mark.skipif(os.name != "posix", reason="file modes, symlinks and flock are POSIX")


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def umask():
    """Set the process umask for one test, and restore it."""
    previous = os.umask(0o022)
    os.umask(previous)

    def set_to(value: int) -> None:
        os.umask(value)

    yield set_to
    os.umask(previous)


def no_temp_files(folder: Path) -> bool:
    return not [p for p in os.listdir(folder) if p.endswith(".tmp")]


def test_a_replaced_file_keeps_its_mode(tmp_path, umask):
    umask(0o077)  # would make a new file 0600: the old file's mode must win
    for wanted in (0o640, 0o755, 0o444):
        target = tmp_path / f"file-{wanted:o}"
        target.write_text("old")
        os.chmod(target, wanted)
        write_atomic(target, "new")
        assert target.read_text() == "new" and mode(target) == wanted
    assert no_temp_files(tmp_path)


@pytest.mark.parametrize("mask, expected", [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664)])
def test_a_new_file_gets_the_mode_the_umask_gives(tmp_path, umask, mask, expected):
    umask(mask)
    target = tmp_path / "new.json"
    write_atomic(target, b"{}")
    assert mode(target) == expected
    write_atomic(tmp_path / "excl.md", "x", exclusive=True)
    assert mode(tmp_path / "excl.md") == expected


def test_a_symlink_is_written_through_and_stays_a_link(tmp_path):
    real_dir = tmp_path / "real"
    real_dir.mkdir()
    target = real_dir / "notes.md"
    target.write_text("old")
    os.chmod(target, 0o600)
    link_dir = tmp_path / "links"
    link_dir.mkdir()
    link = link_dir / "notes.md"
    link.symlink_to(Path("..") / "real" / "notes.md")  # relative, as users often make them
    chain = tmp_path / "chain.md"
    chain.symlink_to(link)

    write_atomic(link, "through the link")
    assert link.is_symlink() and os.readlink(link) == str(Path("..") / "real" / "notes.md")
    assert target.read_text() == "through the link" and mode(target) == 0o600
    write_atomic(chain, "through two links")
    assert chain.is_symlink() and link.is_symlink() and target.read_text() == "through two links"
    assert no_temp_files(real_dir) and no_temp_files(link_dir) and no_temp_files(tmp_path)


def test_an_exclusive_write_never_replaces_anything(tmp_path):
    target = tmp_path / "kept.md"
    write_atomic(target, "first", exclusive=True)
    with pytest.raises(FileExistsError):
        write_atomic(target, "second", exclusive=True)
    assert target.read_text() == "first"
    dangling = tmp_path / "dangling.md"
    dangling.symlink_to(tmp_path / "nowhere.md")
    with pytest.raises(FileExistsError):
        write_atomic(dangling, "x", exclusive=True)
    assert not (tmp_path / "nowhere.md").exists() and no_temp_files(tmp_path)


# ---- two processes updating one file ---------------------------------------------------------

# Each child waits for the start signal, then adds its own keys one at a time. json.dumps is slowed
# down so every read-modify-write holds its read for a while: without a lock the two children's
# updates overlap and one's entries are overwritten by the other's, run after run.
CHILD = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path

    slow = json.dumps
    def dumps(*args, **kwargs):
        time.sleep(0.004)
        return slow(*args, **kwargs)
    json.dumps = dumps

    role, count, folder, go = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
    (folder / f"ready-{role}").touch()
    while not go.exists():
        time.sleep(0.001)
    if sys.argv[5] == "costs":
        from specrun.runtime.cost_cache import COSTS
        for i in range(count):
            COSTS.put(f"{role}-{i}", {"i": i})
    else:
        from specrun.bench.environment import file_hash
        for i in range(count):
            model = folder / f"{role}-{i}.gguf"
            model.write_bytes(b"m" * i)
            file_hash(model, folder / "hashes.json", hasher=lambda p: f"{p.name:0>64}"[-64:])
    """
)


def run_two_writers(tmp_path: Path, what: str, count: int) -> None:
    env = cli_env(XDG_CACHE_HOME=str(tmp_path / "cache"))
    go = tmp_path / "go"
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, role, str(count), str(tmp_path), str(go), what],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for role in ("a", "b")
    ]
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"ready-{r}").exists() for r in "ab"):
        assert time.monotonic() < deadline and all(c.poll() is None for c in children), [
            c.communicate() for c in children
        ]
        time.sleep(0.01)
    go.touch()
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err


def test_two_runs_storing_costs_at_once_keep_both_runs_entries(tmp_path):
    from specrun.runtime import cost_cache

    count = cost_cache.MAX_ENTRIES // 2  # both runs' keys fit: none is evicted for room
    run_two_writers(tmp_path, "costs", count)
    entries = json.loads((tmp_path / "cache" / "specrun" / "decode-costs.json").read_text())
    assert sorted(entries) == sorted(f"{r}-{i}" for r in "ab" for i in range(count))
    assert (tmp_path / "cache" / "specrun" / "decode-costs.json.lock").exists()


def test_two_runs_recording_hashes_at_once_keep_both_runs_entries(tmp_path):
    count = 20
    run_two_writers(tmp_path, "hashes", count)
    entries = json.loads((tmp_path / "hashes.json").read_text())
    assert sorted(Path(p).name for p in entries) == sorted(f"{r}-{i}.gguf" for r in "ab" for i in range(count))


def test_a_dropped_cost_entry_leaves_the_others(tmp_path, monkeypatch):
    from specrun.runtime import cost_cache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cost_cache.COSTS.put("a", {"x": 1})
    cost_cache.COSTS.put("b", {"x": 2})
    cost_cache.COSTS.drop("a")
    assert cost_cache.COSTS.get("a") is None and cost_cache.COSTS.get("b") == {"x": 2}
