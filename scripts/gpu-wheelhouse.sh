#!/usr/bin/env bash
# Fill a folder with everything scripts/gpu-check.sh installs, for a GPU machine without network:
# the llama-cpp-python source (it is built there, for CUDA), wheels of its and specrun's
# dependencies with the test extra (pytest, gguf), and the build tools pip needs offline
# (scikit-build-core, cmake, ninja, setuptools, wheel, pip).
#
# Usage: bash scripts/gpu-wheelhouse.sh DIR [PYTHON_VERSION]
#   PYTHON_VERSION  of the GPU machine's python3, e.g. 3.12 (default: this machine's python3)
# Environment:
#   SPECRUN_WHEEL_ARCH   the GPU machine's `uname -m` (default x86_64; aarch64 for Grace Hopper)
#   SPECRUN_WHEEL_GLIBC  the oldest glibc the wheels may need, as 2.NN (default 2.28: RHEL 8,
#                        Debian 10, Ubuntu 20.04 and newer)
#   PYTHON, LLAMA_SPEC   as in scripts/setup.sh
# Then on the GPU machine: SPECRUN_WHEELHOUSE=DIR bash scripts/gpu-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: bash scripts/gpu-wheelhouse.sh DIR [PYTHON_VERSION]" >&2
    exit 2
fi
PYTHON=${PYTHON:-python3}
DIR=$1
PY_VERSION=${2:-$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')}
WHEEL_ARCH=${SPECRUN_WHEEL_ARCH:-x86_64}
GLIBC=${SPECRUN_WHEEL_GLIBC:-2.28}
# pip takes the platform tags literally, so name every manylinux level up to the glibc given.
PLATFORMS=(--platform "manylinux2014_$WHEEL_ARCH")
minor=17
while [ "$minor" -le "${GLIBC#2.}" ]; do
    PLATFORMS+=(--platform "manylinux_2_${minor}_$WHEEL_ARCH")
    minor=$((minor + 1))
done
LLAMA_SPEC=${LLAMA_SPEC:-"llama-cpp-python>=0.3.36,<0.4"}
mkdir -p "$DIR"

echo "wheelhouse: llama-cpp-python source ($LLAMA_SPEC)"
"$PYTHON" -m pip download --quiet --no-deps --no-binary :all: -d "$DIR" "$LLAMA_SPEC"

# What to fetch as wheels: specrun's requirements and test extra (from pyproject.toml), those of the
# newest llama-cpp-python source in DIR (from its PKG-INFO), and both build backends' requirements.
REQUIREMENTS=()
while IFS= read -r line; do
    REQUIREMENTS+=("$line")
done < <("$PYTHON" - "$DIR" <<'PY'
import re
import sys
import tarfile
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python < 3.11: pip carries a copy
    from pip._vendor import tomli as tomllib


def version(path):
    return tuple(int(x) for x in re.findall(r"\d+", path.name.split("-")[-1].removesuffix(".tar.gz")))


project = tomllib.loads(Path("pyproject.toml").read_text())
wanted = project["project"]["dependencies"] + project["project"]["optional-dependencies"]["test"]
wanted += project["build-system"]["requires"]
sdist = max(Path(sys.argv[1]).glob("llama_cpp_python-*.tar.gz"), key=version)
with tarfile.open(sdist) as tar:
    root = tar.getnames()[0].split("/")[0]
    info = tar.extractfile(f"{root}/PKG-INFO").read().decode()
    build = tomllib.loads(tar.extractfile(f"{root}/pyproject.toml").read().decode())
wanted += [line.split(":", 1)[1].strip() for line in info.splitlines()
           if line.startswith("Requires-Dist:") and "extra ==" not in line]
wanted += build["build-system"]["requires"]
# scikit-build-core asks for these at build time when the machine has no recent enough cmake or ninja.
wanted += ["cmake>=3.21", "ninja", "pip"]
for requirement in wanted:
    if not requirement.lower().replace("_", "-").startswith("llama-cpp-python"):
        print(requirement)
PY
)

echo "wheelhouse: wheels for Python $PY_VERSION on $WHEEL_ARCH Linux (glibc $GLIBC): ${REQUIREMENTS[*]}"
"$PYTHON" -m pip download --quiet --only-binary :all: --implementation cp --python-version "$PY_VERSION" \
    "${PLATFORMS[@]}" -d "$DIR" "${REQUIREMENTS[@]}"
echo "wheelhouse: $(find "$DIR" -maxdepth 1 -type f | wc -l) files in $DIR; on the GPU machine:"
echo "  SPECRUN_WHEELHOUSE=$DIR bash scripts/gpu-check.sh"
