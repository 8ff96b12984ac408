"""scripts/cuda-toolkit.sh joins CUDA's parts into one toolkit folder and names PyPI's wheels for one.

Each test sources the script in bash and calls one function on small fake toolkit trees, so nothing
here needs CUDA.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from paths import SCRIPTS

SCRIPT = SCRIPTS / "cuda-toolkit.sh"
BASH = shutil.which("bash")

pytestmark = pytest.mark.skipif(BASH is None, reason="needs bash")


def call(command: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run `command` in bash after sourcing the script."""
    return subprocess.run(
        [BASH, "-c", f'set -euo pipefail; . "{SCRIPT}"; {command}'],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def tree(root: Path, *files: str) -> Path:
    """A folder holding `files` (relative paths), each with its own path as content."""
    for name in files:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name)
        if "/bin/" in f"/{name}":
            path.chmod(0o755)
    return root


@pytest.fixture
def toolkit(tmp_path) -> Path:
    """A toolkit with nvcc, the runtime, CCCL and nvvm, but no cuBLAS (as /usr/local/cuda here)."""
    return tree(
        tmp_path / "toolkit",
        "bin/nvcc",
        "bin/ptxas",
        "include/cuda_runtime.h",
        "include/crt/host_defines.h",
        "include/cccl/cub/cub.cuh",
        "lib/libcudart.so.13",
        "nvvm/bin/cicc",
        "nvvm/libdevice/libdevice.10.bc",
    )


@pytest.fixture
def cublas(tmp_path) -> Path:
    """cuBLAS as NVIDIA's wheel lays it out: versioned library names only."""
    return tree(
        tmp_path / "wheel" / "nvidia" / "cu13",
        "include/cublas_v2.h",
        "include/crt/extra.h",
        "lib/libcublas.so.13",
        "lib/libcublasLt.so.13",
    )


def test_joined_toolkit_has_every_part_with_unversioned_library_names(tmp_path, toolkit, cublas):
    dest = tmp_path / "joined"
    result = call(f'cuda_join_toolkit "{dest}" "{toolkit}" "{cublas}"; cuda_toolkit_problem "{dest}"')
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert os.readlink(dest / "lib" / "libcublas.so") == "libcublas.so.13"
    assert (dest / "lib" / "libcublasLt.so").read_text() == "lib/libcublasLt.so.13"
    assert (dest / "lib" / "libcudart.so").read_text() == "lib/libcudart.so.13"
    assert os.readlink(dest / "lib64") == "lib"
    assert (dest / "bin" / "nvcc").resolve() == (toolkit / "bin" / "nvcc").resolve()
    assert (dest / "nvvm" / "bin" / "cicc").exists()


def test_a_folder_in_two_roots_is_joined_and_the_first_file_wins(tmp_path, toolkit, cublas):
    tree(cublas, "include/cuda_runtime.h")  # a second copy, in the later root
    dest = tmp_path / "joined"
    assert call(f'cuda_join_toolkit "{dest}" "{toolkit}" "{cublas}"').returncode == 0
    assert sorted(p.name for p in (dest / "include" / "crt").iterdir()) == ["extra.h", "host_defines.h"]
    assert not (dest / "include" / "crt").is_symlink()
    assert (dest / "include" / "cuda_runtime.h").read_text() == "include/cuda_runtime.h"
    assert (dest / "include" / "cuda_runtime.h").resolve().is_relative_to(toolkit.resolve())


def test_joining_again_starts_from_an_empty_folder(tmp_path, toolkit, cublas):
    dest = tmp_path / "joined"
    assert call(f'cuda_join_toolkit "{dest}" "{toolkit}" "{cublas}"').returncode == 0
    result = call(f'cuda_join_toolkit "{dest}" "{toolkit}"; cuda_toolkit_problem "{dest}"')
    assert not (dest / "lib" / "libcublas.so").exists()
    assert result.stdout.strip() == f"the CUDA toolkit in {dest} has no include/cublas_v2.h"


def test_a_toolkit_without_cccl_or_cicc_is_named_as_such(tmp_path, toolkit, cublas):
    shutil.rmtree(toolkit / "include" / "cccl")
    dest = tmp_path / "joined"
    result = call(f'cuda_join_toolkit "{dest}" "{toolkit}" "{cublas}"; cuda_toolkit_problem "{dest}"')
    assert "no CCCL headers" in result.stdout
    tree(toolkit, "include/cccl/cub/cub.cuh")
    shutil.rmtree(toolkit / "nvvm" / "bin")
    result = call(f'cuda_join_toolkit "{dest}" "{toolkit}" "{cublas}"; cuda_toolkit_problem "{dest}"')
    assert "nvvm/bin/cicc" in result.stdout


def test_pypi_requirements_are_the_newest_of_the_major_not_newer_than_the_driver():
    result = call("cuda_pypi_requirements 13.0")
    assert result.returncode == 0
    assert result.stdout.split() == [
        f"{name}>=13.0,<13.1"
        for name in (
            "nvidia-cuda-nvcc",
            "nvidia-cuda-crt",
            "nvidia-nvvm",
            "nvidia-cuda-runtime",
            "nvidia-cuda-cccl",
            "nvidia-cublas",
        )
    ]
    assert call("cuda_pypi_requirements 13.12").stdout.split()[0] == "nvidia-cuda-nvcc>=13.0,<13.13"


@pytest.mark.parametrize("version", ["12.4", "11.8", "13", "13.x", ""])
def test_pypi_requirements_fail_where_pypi_has_no_compiler_or_the_version_is_unreadable(version):
    result = call(f'cuda_pypi_requirements "{version}"')
    assert result.returncode != 0 and result.stdout == ""


def test_driver_version_is_read_from_nvidia_smi_header(tmp_path):
    bin_dir = tmp_path / "bin"
    tree(bin_dir, "nvidia-smi")
    (bin_dir / "nvidia-smi").write_text(
        "#!/bin/sh\necho '| NVIDIA-SMI 580.159.03     Driver Version: 580.159.03     CUDA Version: 13.0     |'\n"
    )
    (bin_dir / "nvidia-smi").chmod(0o755)
    path = f"{bin_dir}:{os.environ['PATH']}"
    assert call("cuda_driver_version", {"PATH": path}).stdout.strip() == "13.0"
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'No devices were found'\n")
    assert call("cuda_driver_version", {"PATH": path}).stdout == ""


def test_library_folders_of_nvidia_wheels_are_found_on_python_path(tmp_path):
    site = tmp_path / "site"
    tree(site, "nvidia/cu13/lib/libcublas.so.13", "nvidia/cu13/include/cublas_v2.h", "nvidia/nccl/lib/libnccl.so.2")
    env = {"PYTHONPATH": str(site)}
    roots = call(f'cuda_pip_roots "{sys.executable}"', env).stdout.split()
    assert str(site / "nvidia" / "cu13") in roots and str(site / "nvidia" / "nccl") in roots
    assert call(f'cuda_pip_lib_dirs "{sys.executable}"', env).stdout.split() == [str(site / "nvidia" / "cu13" / "lib")]
