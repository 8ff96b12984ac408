"""scripts/gpu-wheel.sh refuses, in one line and before any download, what it cannot build.

The wheel itself takes an hour of nvcc and PyPI's cuBLAS (docs/gpu.md has the figures); these tests
run the script from a copy of the scripts with a PATH of a few real utilities and fakes only.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from paths import SCRIPTS

BASH = shutil.which("bash")
REAL_TOOLS = ("dirname", "mkdir", "sed", "head")

pytestmark = pytest.mark.skipif(BASH is None, reason="needs bash")


def fake_tool(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


@pytest.fixture
def repo(tmp_path) -> Path:
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    for name in ("gpu-wheel.sh", "cuda-toolkit.sh", "llama_build_check.py"):
        shutil.copy(SCRIPTS / name, root / "scripts" / name)
    return root


@pytest.fixture
def bin_dir(tmp_path) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in REAL_TOOLS:
        real = shutil.which(tool)
        if real is None:
            pytest.skip(f"needs {tool}")
        (folder / tool).symlink_to(real)
    calls = tmp_path / "python-calls.log"
    fake_tool(folder, "python3", f'echo "$@" >> "{calls}"; exit 1')
    return folder


def gpu_wheel(repo: Path, bin_dir: Path, *args: str, arch: str = "x86_64") -> subprocess.CompletedProcess:
    fake_tool(bin_dir, "uname", f'case "$1" in -m) echo {arch};; *) echo Linux;; esac')
    env = {"PATH": str(bin_dir), "HOME": str(repo.parent), "SPECRUN_GPU_WHEEL_WORK": str(repo.parent / "work")}
    return subprocess.run(
        [BASH, str(repo / "scripts" / "gpu-wheel.sh"), *args], env=env, capture_output=True, text=True, timeout=60
    )


def one_line(result: subprocess.CompletedProcess) -> str:
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize("args", [(), ("a", "b")])
def test_anything_but_one_outdir_is_usage_and_exit_2(repo, bin_dir, args):
    result = gpu_wheel(repo, bin_dir, *args)
    assert result.returncode == 2 and one_line(result).startswith("usage: bash scripts/gpu-wheel.sh OUTDIR")


def test_no_nvcc_is_one_line_naming_the_fix_before_any_download(repo, bin_dir, tmp_path):
    result = gpu_wheel(repo, bin_dir, str(tmp_path / "out"))
    assert result.returncode == 1
    line = one_line(result)
    assert "no nvcc on PATH or in $CUDA_HOME/bin" in line and "nvidia-cuda-nvcc" in line
    assert not (tmp_path / "python-calls.log").exists(), "it called Python (a venv, pip) before failing"


def test_another_machine_than_x86_64_linux_is_refused(repo, bin_dir, tmp_path):
    result = gpu_wheel(repo, bin_dir, str(tmp_path / "out"), arch="aarch64")
    assert result.returncode == 1 and "x86-64 Linux only" in one_line(result)


def test_an_nvcc_that_does_not_say_where_its_toolkit_is_is_refused(repo, bin_dir, tmp_path):
    fake_tool(bin_dir, "nvcc", "echo 'nvcc: NVIDIA (R) Cuda compiler driver'")
    result = gpu_wheel(repo, bin_dir, str(tmp_path / "out"))
    assert result.returncode == 1 and "printed no _HERE_" in one_line(result)
