"""A bundle from scripts/gpu-bundle.sh installs specrun offline, with no build, and specrun runs.

Making a bundle needs PyPI, and tests never use the network, so this test takes a bundle made
beforehand, for this machine's Python and with nothing assumed present:

    bash scripts/gpu-bundle.sh --python-version 3.11 --present "" DIR WHEEL
    SPECRUN_TEST_BUNDLE=DIR python -m pytest tests/test_gpu_bundle.py

WHEEL is a llama-cpp-python wheel this machine can load (a CPU build, or a CUDA one where cuBLAS is
installed). Without SPECRUN_TEST_BUNDLE those tests are skipped with that reason; the checks of
gpu-bundle.sh's arguments need nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from paths import ROOT

REPO = ROOT
BUNDLE = os.environ.get("SPECRUN_TEST_BUNDLE", "")

SCRIPT = REPO / "scripts" / "gpu-bundle.sh"
# An index that refuses every connection: pip may only read the bundle.
NO_NETWORK = {
    "PIP_CONFIG_FILE": os.devnull,
    "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
    "PIP_RETRIES": "0",
    "PIP_TIMEOUT": "2",
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
}

pytestmark = pytest.mark.skipif(
    shutil.which("bash") is None or shutil.which("git") is None, reason="needs bash and git"
)
needs_bundle = pytest.mark.skipif(
    not BUNDLE,
    reason="needs SPECRUN_TEST_BUNDLE=DIR, a bundle made by "
    "scripts/gpu-bundle.sh for this Python with --present '' (see this file's docstring)",
)


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without pip's or a venv's settings, offline, plus `extra`."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PIP_", "VIRTUAL_ENV"))}
    return {**env, **NO_NETWORK, **extra}


def bundle(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        env=clean_env(PYTHON=sys.executable, **env),
        capture_output=True,
        text=True,
        timeout=900,
    )


def travelled_tree(tmp_path: Path) -> Path:
    """A copy of the tracked tree, as it travels to a GPU machine (no .venv, no build outputs)."""
    tree = tmp_path / "tree"
    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True).stdout
    for name in filter(None, tracked.decode().split("\0")):
        if (REPO / name).is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, tree / name)
    return tree


def bare_python(tmp_path: Path) -> Path:
    """The machine's own python3, here with nothing in it."""
    base = tmp_path / "base"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(base)], check=True)
    return base / "bin" / "python"


@needs_bundle
def test_fresh_venv_installs_specrun_from_the_bundle_offline_and_runs_doctor(tmp_path):
    tree = travelled_tree(tmp_path)
    venv = tmp_path / "venv"
    env = clean_env(SPECRUN_BUNDLE=BUNDLE, SPECRUN_VENV=str(venv), PYTHON=str(bare_python(tmp_path)))
    setup = subprocess.run(
        ["bash", str(tree / "scripts" / "setup.sh")], env=env, capture_output=True, text=True, timeout=900
    )
    assert setup.returncode == 0, setup.stdout + setup.stderr
    assert "(no build)" in setup.stdout and "building it from source" not in setup.stdout
    doctor = subprocess.run(
        [str(venv / "bin" / "specrun"), "doctor", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert doctor.returncode == 0, doctor.stderr
    report = json.loads(doctor.stdout)
    assert report["llama_cpp"]["rpc"] is True and report["backends"]
    # gguf, for the model writer, came from the bundle too.
    subprocess.run([str(venv / "bin" / "python"), "-c", "import gguf, fastapi, uvicorn"], check=True, timeout=120)


@needs_bundle
def test_a_given_wheel_without_the_backend_asked_for_is_refused_in_one_line(tmp_path):
    # The bundle's wheel is a CPU build; asked for CUDA, setup.sh installs it, checks it, and stops.
    tree = travelled_tree(tmp_path)
    env = clean_env(
        SPECRUN_BUNDLE=BUNDLE,
        SPECRUN_VENV=str(tmp_path / "venv"),
        PYTHON=str(bare_python(tmp_path)),
        SPECRUN_BACKEND="cuda",
        CMAKE_CUDA_ARCHITECTURES="90",
    )
    setup = subprocess.run(
        ["bash", str(tree / "scripts" / "setup.sh")], env=env, capture_output=True, text=True, timeout=900
    )
    assert setup.returncode == 1, setup.stdout + setup.stderr
    errors = [line for line in setup.stderr.splitlines() if line.startswith("setup:")]
    assert len(errors) == 1 and "does not fit: the llama-cpp-python build has no cuda backend" in errors[0]
    assert "Traceback" not in setup.stderr and "building it from source" not in setup.stdout


def llama_wheel_of(folder: str) -> Path:
    return next(Path(folder).glob("llama_cpp_python-*.whl"))


@needs_bundle
def test_bundle_remade_from_its_own_wheels_names_each_file_and_the_total(tmp_path):
    # pip finds everything in the bundle, so this runs offline; with nothing present, every wheel returns.
    out = tmp_path / "again"
    result = bundle(
        "--python-version",
        f"{sys.version_info[0]}.{sys.version_info[1]}",
        "--present",
        "",
        str(out),
        str(llama_wheel_of(BUNDLE)),
        PIP_FIND_LINKS=BUNDLE,
        PIP_NO_INDEX="1",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in Path(BUNDLE).iterdir())
    total = next(line for line in result.stdout.splitlines() if "MiB of the 56 MiB allowed" in line)
    assert f"{len(list(out.iterdir()))} files" in total
    assert (out / "requirements.txt").read_text().startswith("gguf")


@needs_bundle
def test_bundle_leaves_out_what_the_machine_has_and_fails_over_the_size_limit(tmp_path):
    out = tmp_path / "small"
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    wheel = str(llama_wheel_of(BUNDLE))
    offline = {"PIP_FIND_LINKS": BUNDLE, "PIP_NO_INDEX": "1"}
    result = bundle("--python-version", version, "--present", "numpy pydantic", str(out), wheel, **offline)
    assert result.returncode == 0, result.stdout + result.stderr
    names = {p.name.split("-")[0] for p in out.iterdir()}
    assert "numpy" not in names and "pydantic" not in names
    assert "pydantic_core" not in names  # only pydantic brings it in
    assert {"fastapi", "gguf", "uvicorn", "starlette", "setuptools", "wheel"} <= names
    over = bundle("--python-version", version, "--limit-mib", "1", str(tmp_path / "over"), wheel, **offline)
    assert over.returncode == 1
    assert "over 1 MiB" in over.stderr and "Traceback" not in over.stderr


@pytest.mark.parametrize(
    "args, says",
    [
        ([], "usage:"),
        (["DIR"], "usage:"),
        (["--limit-mib", "lots", "DIR", "WHEEL"], "--limit-mib lots is not a whole number"),
        (["--python-version", "12", "DIR", "WHEEL"], "--python-version 12 is not of the form 3.NN"),
        (["DIR", "numpy-2.0-cp311-none-any.whl"], "is not a llama_cpp_python-*.whl wheel"),
        (["DIR", "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl"], "is not a file"),
        (["DIR", "."], "holds no llama_cpp_python-*.whl"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(tmp_path, args, says):
    given = [str(tmp_path / a) if a in ("DIR", "WHEEL") or a.endswith(".whl") or a == "." else a for a in args]
    (tmp_path / "numpy-2.0-cp311-none-any.whl").write_bytes(b"")
    result = bundle(*given)
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and says in result.stderr
    assert not (tmp_path / "DIR").exists()
