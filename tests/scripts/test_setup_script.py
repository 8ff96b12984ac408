"""scripts/setup.sh picks llama.cpp's backend and build flags for the machine it runs on.

Each test runs the script's dry run from a temporary copy of the repository layout, with a PATH that
holds only fake `uname`, GPU tools and a Python that records any call, plus the few real utilities
the script needs, so the machine running the tests cannot leak its own toolkits into the answer.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from paths import SCRIPTS

SCRIPT = SCRIPTS / "setup.sh"
BASH = shutil.which("bash")
REAL_TOOLS = ("dirname", "getconf", "grep", "head", "sed")
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"

pytestmark = pytest.mark.skipif(BASH is None, reason="needs bash")


def fake_tool(folder: Path, name: str, body: str = "exit 0") -> Path:
    """An executable shell script `name` in `folder`."""
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def repo(tmp_path) -> Path:
    """A copy of the repository layout the script needs: setup.sh and what it uses, nothing else."""
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    for name in ("setup.sh", "cuda-toolkit.sh", "llama_build_check.py"):
        shutil.copy(SCRIPTS / name, root / "scripts" / name)
    return root


@pytest.fixture
def bin_dir(tmp_path) -> Path:
    """The whole PATH: links to a few real utilities, and the fakes each test adds."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in REAL_TOOLS:
        real = shutil.which(tool)
        if real is None:
            pytest.skip(f"needs {tool}")
        (folder / tool).symlink_to(real)
    return folder


def machine(bin_dir: Path, system: str = "Linux", arch: str = "x86_64") -> None:
    """A fake `uname` answering -s with `system` and -m with `arch`."""
    fake_tool(bin_dir, "uname", f'case "$1" in -m) echo {arch};; *) echo {system};; esac')


def nvidia(bin_dir: Path) -> None:
    """A CUDA toolkit on PATH and a driver that lists one GPU."""
    fake_tool(bin_dir, "nvcc")
    gpu_driver(bin_dir)


def gpu_driver(bin_dir: Path, cuda: str = "13.0") -> None:
    """A driver for CUDA `cuda` whose nvidia-smi lists one GPU (-L) and prints its usual header."""
    header = f"| NVIDIA-SMI 580.159.03   Driver Version: 580.159.03   CUDA Version: {cuda}     |"
    fake_tool(
        bin_dir, "nvidia-smi", f'case "$1" in -L) echo "GPU 0: NVIDIA H200 (UUID: GPU-0)";; *) echo "{header}";; esac'
    )


def dry_run(repo: Path, bin_dir: Path, **env: str) -> subprocess.CompletedProcess:
    """Run the copied script's dry run with only PATH, HOME, a call-recording PYTHON and `env`."""
    calls = repo.parent / "python-calls.log"
    python = fake_tool(bin_dir, "python3", f'echo "$@" >> "{calls}"; mkdir -p .venv/bin')
    base = {"PATH": str(bin_dir), "HOME": str(repo.parent), "PYTHON": str(python), "SPECRUN_SETUP_DRY_RUN": "1"}
    return subprocess.run(
        [BASH, str(repo / "scripts" / "setup.sh")], env={**base, **env}, capture_output=True, text=True, timeout=60
    )


def settings(result: subprocess.CompletedProcess) -> dict[str, str]:
    """The NAME=value lines of a dry run, unquoted."""
    assert result.returncode == 0, result.stderr
    out = {}
    for line in result.stdout.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.isupper():
            out[name] = value.strip("'")
    return out


def test_plain_x86_linux_builds_for_the_cpu_without_amx_and_with_rpc(repo, bin_dir):
    machine(bin_dir)
    result = dry_run(repo, bin_dir)
    found = settings(result)
    assert "backend: cpu" in result.stdout
    assert found["CMAKE_ARGS"] == "-DGGML_RPC=on"
    assert found["CFLAGS"] == NO_AMX and found["CXXFLAGS"] == NO_AMX


def test_nvcc_with_a_gpu_builds_cuda_for_the_native_architecture(repo, bin_dir):
    machine(bin_dir)
    nvidia(bin_dir)
    args = settings(dry_run(repo, bin_dir))["CMAKE_ARGS"].split()
    assert "-DGGML_CUDA=on" in args and "-DGGML_RPC=on" in args
    assert "-DCMAKE_CUDA_ARCHITECTURES=native" in args


def test_nvcc_without_a_gpu_stays_on_the_cpu_and_says_how_to_force_cuda(repo, bin_dir):
    machine(bin_dir)
    fake_tool(bin_dir, "nvcc")
    result = dry_run(repo, bin_dir)
    assert "-DGGML_CUDA=on" not in settings(result)["CMAKE_ARGS"]
    assert "SPECRUN_BACKEND=cuda" in result.stdout


def test_cuda_home_toolkit_off_path_is_found_and_given_to_cmake(repo, bin_dir, tmp_path):
    machine(bin_dir)
    fake_tool(bin_dir, "nvidia-smi", 'echo "GPU 0: NVIDIA H200"')
    toolkit = tmp_path / "cuda" / "bin"
    toolkit.mkdir(parents=True)
    nvcc = fake_tool(toolkit, "nvcc")
    found = settings(dry_run(repo, bin_dir, CUDA_HOME=str(tmp_path / "cuda")))
    assert "-DGGML_CUDA=on" in found["CMAKE_ARGS"].split()
    assert found["CUDACXX"] == str(nvcc)


def test_user_cuda_architectures_and_cmake_args_are_kept(repo, bin_dir):
    machine(bin_dir)
    nvidia(bin_dir)
    args = settings(dry_run(repo, bin_dir, CMAKE_CUDA_ARCHITECTURES="90", CMAKE_ARGS="-DGGML_CUDA_FA_ALL_QUANTS=on"))[
        "CMAKE_ARGS"
    ].split()
    assert "-DCMAKE_CUDA_ARCHITECTURES=90" in args and "-DCMAKE_CUDA_ARCHITECTURES=native" not in args
    assert args[-1] == "-DGGML_CUDA_FA_ALL_QUANTS=on"  # last, so CMake lets it override ours
    assert "-DGGML_RPC=on" in args


def test_hipconfig_builds_hip_with_rocm_clang(repo, bin_dir):
    machine(bin_dir)
    fake_tool(bin_dir, "hipconfig", 'case "$1" in -l) echo /opt/rocm/llvm/bin;; -R) echo /opt/rocm;; esac')
    found = settings(dry_run(repo, bin_dir))
    assert "-DGGML_HIP=on" in found["CMAKE_ARGS"].split() and "-DGGML_RPC=on" in found["CMAKE_ARGS"].split()
    assert found["HIPCXX"] == "/opt/rocm/llvm/bin/clang" and found["HIP_PATH"] == "/opt/rocm"


def test_glslc_builds_vulkan(repo, bin_dir):
    machine(bin_dir)
    fake_tool(bin_dir, "glslc")
    args = settings(dry_run(repo, bin_dir))["CMAKE_ARGS"].split()
    assert "-DGGML_VULKAN=on" in args and "-DGGML_RPC=on" in args


def test_cuda_wins_over_hip_and_vulkan(repo, bin_dir):
    machine(bin_dir)
    nvidia(bin_dir)
    fake_tool(bin_dir, "hipconfig")
    fake_tool(bin_dir, "glslc")
    args = settings(dry_run(repo, bin_dir))["CMAKE_ARGS"].split()
    assert "-DGGML_CUDA=on" in args and "-DGGML_HIP=on" not in args and "-DGGML_VULKAN=on" not in args


def test_specrun_backend_overrides_detection(repo, bin_dir):
    machine(bin_dir)
    nvidia(bin_dir)
    result = dry_run(repo, bin_dir, SPECRUN_BACKEND="vulkan")
    args = settings(result)["CMAKE_ARGS"].split()
    assert "-DGGML_VULKAN=on" in args and "-DGGML_CUDA=on" not in args
    assert "backend: vulkan (SPECRUN_BACKEND=vulkan)" in result.stdout


def test_apple_silicon_builds_metal_without_amx_flags(repo, bin_dir):
    machine(bin_dir, "Darwin", "arm64")
    result = dry_run(repo, bin_dir)
    assert "-DGGML_METAL=on" in settings(result)["CMAKE_ARGS"].split()
    assert "-mno-amx" not in result.stdout + result.stderr


def test_arm_linux_gets_no_amx_flag_anywhere(repo, bin_dir):
    machine(bin_dir, "Linux", "aarch64")
    result = dry_run(repo, bin_dir)
    found = settings(result)
    assert "-mno-amx" not in result.stdout + result.stderr
    assert found["CFLAGS"] == "" and found["CMAKE_ARGS"] == "-DGGML_RPC=on"


def test_user_cflags_follow_the_no_amx_flags(repo, bin_dir):
    machine(bin_dir)
    found = settings(dry_run(repo, bin_dir, CFLAGS="-g"))
    assert found["CFLAGS"] == f"{NO_AMX} -g"


def test_unknown_backend_is_one_line_on_stderr_and_exit_2(repo, bin_dir):
    machine(bin_dir)
    result = dry_run(repo, bin_dir, SPECRUN_BACKEND="opencl")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "opencl" in result.stderr
    assert result.stdout == ""


def test_dry_run_prints_the_build_command_and_changes_nothing(repo, bin_dir):
    machine(bin_dir)
    before = sorted(p.relative_to(repo) for p in repo.rglob("*"))
    result = dry_run(repo, bin_dir, LLAMA_SPEC="llama-cpp-python==0.3.36")
    assert "--no-cache-dir --force-reinstall --no-binary llama-cpp-python llama-cpp-python==0.3.36" in result.stdout
    assert sorted(p.relative_to(repo) for p in repo.rglob("*")) == before
    assert not (repo.parent / "python-calls.log").exists(), "the dry run called Python"


def test_extras_switch_wheelhouse_and_venv_reach_pip(repo, bin_dir, tmp_path):
    machine(bin_dir)
    venv = tmp_path / "venv"
    result = dry_run(
        repo,
        bin_dir,
        SPECRUN_SETUP_EXTRAS="test",
        SPECRUN_WHEELHOUSE=str(tmp_path),
        PIP_FIND_LINKS="/more/wheels",
        SPECRUN_VENV=str(venv),
    )
    assert f"{venv}/bin/python -m pip install --quiet -e '.[test]'" in result.stdout
    assert f"PIP_NO_INDEX=1 PIP_FIND_LINKS='{tmp_path} /more/wheels'" in result.stdout
    assert f"{venv}/bin/python -m pip install --quiet --no-cache-dir" in result.stdout


def test_parallel_level_is_honoured(repo, bin_dir):
    machine(bin_dir)
    assert settings(dry_run(repo, bin_dir, CMAKE_BUILD_PARALLEL_LEVEL="7"))["CMAKE_BUILD_PARALLEL_LEVEL"] == "7"


def test_gpu_without_nvcc_builds_cuda_against_pypi_toolkit_of_the_driver_version(repo, bin_dir, tmp_path):
    machine(bin_dir)
    gpu_driver(bin_dir, "13.0")
    venv = tmp_path / "venv"
    result = dry_run(repo, bin_dir, SPECRUN_VENV=str(venv))
    found = settings(result)
    args = found["CMAKE_ARGS"].split()
    assert "backend: cuda" in result.stdout and "from PyPI" in result.stdout
    assert "-DGGML_CUDA=on" in args and "-DGGML_RPC=on" in args
    assert "-DGGML_CUDA_NO_VMM=ON" in args and f"-DCUDAToolkit_ROOT={venv}/cuda-toolkit" in args
    assert f"-DCMAKE_SHARED_LINKER_FLAGS=-Wl,-rpath,{venv}/cuda-toolkit/lib" in args  # finds cuBLAS at run time
    assert found["CUDACXX"] == f"{venv}/cuda-toolkit/bin/nvcc"
    install = next(line for line in result.stdout.splitlines() if "nvidia-cuda-nvcc" in line)
    assert install.startswith(f"{venv}/bin/python -m pip install")
    for name in (
        "nvidia-cuda-nvcc",
        "nvidia-cuda-crt",
        "nvidia-nvvm",
        "nvidia-cuda-runtime",
        "nvidia-cuda-cccl",
        "nvidia-cublas",
    ):
        assert f"'{name}>=13.0,<13.1'" in install
    assert not (repo.parent / "python-calls.log").exists(), "the dry run called Python"


def test_pypi_toolkit_follows_the_driver_minor_version(repo, bin_dir):
    machine(bin_dir)
    gpu_driver(bin_dir, "13.2")
    assert "'nvidia-cublas>=13.0,<13.3'" in dry_run(repo, bin_dir).stdout


def test_gpu_with_a_cuda_12_driver_and_no_nvcc_is_not_built_for_cuda_and_says_why(repo, bin_dir):
    machine(bin_dir)
    gpu_driver(bin_dir, "12.4")
    result = dry_run(repo, bin_dir)
    assert "backend: cpu" in result.stdout and "-DGGML_CUDA=on" not in settings(result)["CMAKE_ARGS"]
    note = next(line for line in result.stdout.splitlines() if line.startswith("setup: note:"))
    assert "CUDA 13" in note and "12.4" in note and "SPECRUN_LLAMA_WHEEL" in note


def test_cuda_version_can_be_named_for_a_pypi_toolkit_without_a_gpu(repo, bin_dir):
    machine(bin_dir)
    result = dry_run(repo, bin_dir, SPECRUN_BACKEND="cuda", SPECRUN_CUDA_VERSION="13.0", CMAKE_CUDA_ARCHITECTURES="90")
    assert "'nvidia-cuda-nvcc>=13.0,<13.1'" in result.stdout
    assert "-DCMAKE_CUDA_ARCHITECTURES=90" in settings(result)["CMAKE_ARGS"].split()


def llama_wheel(folder: Path) -> Path:
    """An (empty) file named as llama-cpp-python's wheels are."""
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl"
    wheel.write_bytes(b"")
    return wheel


def test_llama_wheel_is_installed_instead_of_a_build_and_needs_no_toolkit(repo, bin_dir, tmp_path):
    machine(bin_dir)
    gpu_driver(bin_dir, "12.4")  # no nvcc, no PyPI compiler: only the wheel makes this CUDA
    wheel = llama_wheel(tmp_path / "wheels")
    result = dry_run(repo, bin_dir, SPECRUN_LLAMA_WHEEL=str(wheel))
    assert "backend: cuda" in result.stdout and "prebuilt wheel" in result.stdout
    assert f"--force-reinstall --no-deps {wheel}" in result.stdout
    assert "--no-binary" not in result.stdout and "nvidia-cuda-nvcc" not in result.stdout
    assert "CUDACXX" not in settings(result)


def test_llama_wheel_that_is_not_a_file_or_not_a_llama_wheel_is_one_line_and_exit_2(repo, bin_dir, tmp_path):
    machine(bin_dir)
    other = tmp_path / "numpy-2.0-cp311-none-any.whl"
    other.write_bytes(b"")
    for given in (tmp_path / "missing.whl", other):
        result = dry_run(repo, bin_dir, SPECRUN_LLAMA_WHEEL=str(given))
        assert result.returncode == 2 and result.stdout == ""
        assert len(result.stderr.strip().splitlines()) == 1 and "SPECRUN_LLAMA_WHEEL" in result.stderr


def test_bundle_installs_offline_from_its_wheels_with_its_llama_wheel(repo, bin_dir, tmp_path):
    machine(bin_dir)
    bundle = tmp_path / "bundle"
    wheel = llama_wheel(bundle)
    (bundle / "requirements.txt").write_text("gguf>=0.17\n")
    venv = tmp_path / "venv"
    result = dry_run(repo, bin_dir, SPECRUN_BUNDLE=str(bundle), SPECRUN_VENV=str(venv))
    assert f"PIP_NO_INDEX=1 PIP_FIND_LINKS={bundle}" in result.stdout
    assert f"--force-reinstall --no-deps {wheel}" in result.stdout
    assert f"{venv}/bin/python -m pip install --quiet -e . -r {bundle}/requirements.txt" in result.stdout
    assert "the venv sees the packages" in result.stdout


def test_bundle_without_a_llama_wheel_is_one_line_and_exit_2(repo, bin_dir, tmp_path):
    machine(bin_dir)
    (tmp_path / "bundle").mkdir()
    result = dry_run(repo, bin_dir, SPECRUN_BUNDLE=str(tmp_path / "bundle"))
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and "gpu-bundle.sh" in result.stderr
