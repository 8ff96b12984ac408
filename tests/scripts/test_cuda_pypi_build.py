"""Where a GPU has no nvcc, setup.sh's build uses PyPI's CUDA toolkit, and CMake compiles with it.

The test hides every nvcc on PATH, fakes an nvidia-smi that lists a GPU with a CUDA 13.0 driver,
takes setup.sh's build settings from its dry run, joins PyPI's CUDA wheels into the toolkit folder
as setup.sh does (scripts/cuda-toolkit.sh), then configures llama-cpp-python's source with those
settings and compiles one CUDA source for architecture 90, and ggml's base library (whose run path
must lead to cuBLAS). No GPU is needed, only the wheels (about 600 MB) and the source, made
beforehand since tests never use the network:

    python3 -m venv /tmp/cuda-venv
    /tmp/cuda-venv/bin/pip install nvidia-cuda-nvcc nvidia-cuda-crt nvidia-nvvm nvidia-cuda-runtime \
        nvidia-cuda-cccl nvidia-cublas          # each >=13.0,<13.1, as setup.sh's dry run prints them
    pip download --no-deps --no-binary :all: -d /tmp/sdist "llama-cpp-python>=0.3.36,<0.4"
    tar -xzf /tmp/sdist/llama_cpp_python-*.tar.gz -C /tmp/sdist
    SPECRUN_TEST_CUDA_PYTHON=/tmp/cuda-venv/bin/python SPECRUN_TEST_LLAMA_SOURCE=/tmp/sdist/llama_cpp_python-0.3.36 \
        python -m pytest tests/test_cuda_pypi_build.py

A venv that setup.sh filled with the PyPI toolkit does as well. Without both variables the test is
skipped with that reason. It takes minutes (one CUDA file, the base library, CMake's checks).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from paths import ROOT

REPO = ROOT
CUDA_PYTHON = os.environ.get("SPECRUN_TEST_CUDA_PYTHON", "")
LLAMA_SOURCE = os.environ.get("SPECRUN_TEST_LLAMA_SOURCE", "")
CUDA_SOURCE = "vendor/llama.cpp/ggml/src/ggml-cuda/arange.cu"

pytestmark = [
    pytest.mark.skipif(
        not (CUDA_PYTHON and LLAMA_SOURCE),
        reason="needs SPECRUN_TEST_CUDA_PYTHON (a python with PyPI's CUDA 13 wheels) and "
        "SPECRUN_TEST_LLAMA_SOURCE (an unpacked llama-cpp-python source); see the docstring",
    ),
    pytest.mark.skipif(
        any(shutil.which(tool) is None for tool in ("bash", "cmake", "ninja", "c++", "readelf")),
        reason="needs bash, cmake, ninja, a C++ compiler and readelf",
    ),
]


def run(command: list[str], env: dict[str, str], timeout: int, cwd: Path | None = None) -> str:
    result = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{command[:3]} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return result.stdout


def test_cmake_configures_and_compiles_cuda_with_pypi_toolkit_and_no_nvcc_on_path(tmp_path):
    fakes = tmp_path / "fakes"
    fakes.mkdir()
    header = "| NVIDIA-SMI 580.159.03   Driver Version: 580.159.03   CUDA Version: 13.0     |"
    smi = fakes / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\ncase "$1" in -L) echo "GPU 0: NVIDIA H200 (UUID: GPU-0)";; *) echo "{header}";; esac\n')
    smi.chmod(0o755)
    hidden = [d for d in os.environ["PATH"].split(os.pathsep) if d and not (Path(d) / "nvcc").exists()]
    path = os.pathsep.join([str(fakes), *hidden])
    assert shutil.which("nvcc", path=path) is None
    env = {
        key: value
        for key, value in os.environ.items()
        if key
        not in (
            "CUDA_HOME",
            "CUDA_PATH",
            "CUDACXX",
            "CUDAToolkit_ROOT",
            "CMAKE_ARGS",
            "CUDAARCHS",
            "CFLAGS",
            "CXXFLAGS",
            "LD_LIBRARY_PATH",
        )
    }
    env["PATH"] = path

    # setup.sh's choice and settings, from its dry run.
    venv = tmp_path / "venv"
    dry = subprocess.run(
        ["bash", str(REPO / "scripts" / "setup.sh")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "SPECRUN_SETUP_DRY_RUN": "1", "SPECRUN_VENV": str(venv), "CMAKE_CUDA_ARCHITECTURES": "90"},
    )
    assert dry.returncode == 0, dry.stderr
    assert "backend: cuda" in dry.stdout and "from PyPI" in dry.stdout
    settings = {}
    for line in dry.stdout.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.isupper():
            settings[name] = value.strip("'")
    toolkit = venv / "cuda-toolkit"
    assert settings["CUDACXX"] == str(toolkit / "bin" / "nvcc")

    # The toolkit folder, joined as setup.sh joins it after installing the wheels.
    joined = subprocess.run(
        [
            "bash",
            "-c",
            'set -euo pipefail; . "$1"; roots=(); while IFS= read -r r; do roots+=("$r"); done '
            '< <(cuda_pip_roots "$2"); cuda_join_toolkit "$3" "${roots[@]}"; cuda_toolkit_problem "$3"',
            "join",
            str(REPO / "scripts" / "cuda-toolkit.sh"),
            CUDA_PYTHON,
            str(toolkit),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert joined.returncode == 0 and joined.stdout == "", joined.stdout + joined.stderr
    site_nvidia = Path(run([CUDA_PYTHON, "-c", "import nvidia; print(list(nvidia.__path__)[0])"], env, 60).strip())

    # Configure llama-cpp-python's source with setup.sh's settings, as pip's build does.
    build = tmp_path / "build"
    cmake_env = {
        **env,
        "CUDACXX": settings["CUDACXX"],
        "CUDAToolkit_ROOT": str(toolkit),
        "CFLAGS": settings["CFLAGS"],
        "CXXFLAGS": settings["CXXFLAGS"],
    }
    run(
        [
            "cmake",
            "-S",
            LLAMA_SOURCE,
            "-B",
            str(build),
            "-G",
            "Ninja",
            "-DCMAKE_BUILD_TYPE=Release",
            "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON",
            *settings["CMAKE_ARGS"].split(),
        ],
        cmake_env,
        1200,
    )
    cache = dict(re.findall(r"^([A-Za-z_]+):[A-Z]+=(.*)$", (build / "CMakeCache.txt").read_text(), re.M))
    assert cache["CMAKE_CUDA_COMPILER"] == str(toolkit / "bin" / "nvcc")
    assert cache["GGML_CUDA_NO_VMM"] == "ON"
    for library in ("CUDA_cublas_LIBRARY", "CUDA_CUDART"):
        assert Path(cache[library]).resolve().is_relative_to(site_nvidia.resolve()), (library, cache[library])

    # One CUDA source for sm_90, compiled by the joined nvcc; and ggml's base library, linked with its run path.
    commands = json.loads((build / "compile_commands.json").read_text())
    entry = next(c for c in commands if c["file"].endswith(CUDA_SOURCE))
    assert entry["command"].startswith(str(toolkit / "bin" / "nvcc") + " ")
    assert "arch=compute_90,code=[compute_90,sm_90]" in entry["command"]
    target = re.search(r"-o (\S+\.cu\.o)", entry["command"]).group(1)
    run(["ninja", "-C", str(build), target, "ggml-base"], cmake_env, 1800)
    assert (build / target).stat().st_size > 0
    base = next(build.glob("**/libggml-base.so"))
    runpath = re.search(r"\((?:RUNPATH|RPATH)\).*\[(.*)\]", run(["readelf", "-d", str(base)], env, 60)).group(1)
    assert str(toolkit / "lib") in runpath.split(":") and "$ORIGIN" in runpath.split(":")
    # libggml-cuda (not built here: an hour) links with the same flags.
    ninja_file = (build / "build.ninja").read_text()
    cuda_link = re.search(r"^build \S*libggml-cuda\.so\.[\d.]+: .*?(?=^build )", ninja_file, re.M | re.S).group(0)
    assert f"-Wl,-rpath,{toolkit / 'lib'}" in cuda_link
