# CUDA toolkit helpers shared by scripts/setup.sh and scripts/gpu-wheel.sh (sourced, not run).
#
# A CUDA build needs nvcc, the runtime and CCCL headers, and cuBLAS. NVIDIA publishes each of them
# as a wheel on PyPI, and a machine often has some in one place and some in another: a toolkit
# without cuBLAS here, cuBLAS inside PyTorch's environment there, everything in a venv's
# site-packages/nvidia elsewhere. CMake wants one toolkit folder, and its linker wants unversioned
# library names (libcublas.so) that the wheels do not ship. cuda_join_toolkit makes such a folder
# out of symbolic links. It has no libcuda (the driver's library, absent on a machine without a
# GPU), so builds against it use -DGGML_CUDA_NO_VMM=ON, which drops the only direct link to it.
# Bash 3.2 compatible, like the scripts that source it.

# The CUDA version the driver supports, as MAJOR.MINOR, read from nvidia-smi's header
# ("CUDA Version: 13.0"); prints nothing when there is no nvidia-smi or it names none.
cuda_driver_version() {
    command -v nvidia-smi >/dev/null || return 0
    nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' | head -n 1
}

# pip requirements, one a line, for a toolkit from PyPI that a driver supporting CUDA VERSION
# (MAJOR.MINOR) can run: nvcc and what it calls (crt, nvvm), the runtime, CCCL's headers and cuBLAS,
# each the newest of that major version not newer than VERSION. Only CUDA 13's wheels hold a whole
# compiler: CUDA 12's nvidia-cuda-nvcc-cu12 has ptxas but no nvcc, cicc or nvlink. Fails for any
# other major version.
cuda_pypi_requirements() {
    local major=${1%%.*} minor=${1#*.} name
    minor=${minor%%.*}
    case "$1" in
        13.[0-9] | 13.[0-9][0-9] | 13.[0-9].* | 13.[0-9][0-9].*) ;;
        *) return 1 ;;
    esac
    for name in nvidia-cuda-nvcc nvidia-cuda-crt nvidia-nvvm nvidia-cuda-runtime nvidia-cuda-cccl nvidia-cublas; do
        echo "$name>=$major.0,<$major.$((minor + 1))"
    done
}

# The folders under PYTHON's site-packages/nvidia that hold parts of a toolkit (CUDA 13's wheels
# share nvidia/cu13; CUDA 12's have one each: nvidia/cuda_nvcc, nvidia/cublas, ...), one a line.
cuda_pip_roots() {
    "$1" - <<'PY'
import sys
from pathlib import Path

seen = set()
for entry in sys.path:
    base = Path(entry or ".") / "nvidia"
    if not base.is_dir():
        continue
    for root in sorted(base.iterdir()):
        if root.is_dir() and any((root / part).is_dir() for part in ("bin", "include", "lib")):
            key = root.resolve()
            if key not in seen:
                seen.add(key)
                print(root)
PY
}

# The library folders, among PYTHON's NVIDIA wheels, that hold cuBLAS or the CUDA runtime: where a
# CUDA build of llama.cpp finds them when they live outside its own environment.
cuda_pip_lib_dirs() {
    local root lib
    cuda_pip_roots "$1" | while IFS= read -r root; do
        for lib in "$root/lib/"libcublas.so* "$root/lib/"libcudart.so*; do
            if [ -e "$lib" ]; then
                echo "$root/lib"
                break
            fi
        done
    done
}

# Link SRC's entries into DEST, folder by folder; where both hold a folder of the same name, DEST
# gets a real folder that joins the two. The first source of a file wins.
_cuda_merge() {
    local src=$1 dest=$2 entry name target
    mkdir -p "$dest"
    for entry in "$src"/*; do
        [ -e "$entry" ] || [ -L "$entry" ] || continue
        name=${entry##*/}
        target=$dest/$name
        if [ ! -e "$target" ] && [ ! -L "$target" ]; then
            ln -s "$entry" "$target"
        elif [ -d "$entry" ] && [ -d "$target" ]; then
            if [ -L "$target" ]; then
                local linked
                linked=$(cd "$target" && pwd -P)
                rm "$target"
                _cuda_merge "$linked" "$target"
            fi
            _cuda_merge "$entry" "$target"
        fi
    done
}

# Make DEST (emptied first) one toolkit folder out of the toolkit roots ROOT...: their bin, include,
# lib (and lib64, targets/*/lib) and nvvm joined by symbolic links, with the unversioned library
# names the linker wants (libcublas.so -> libcublas.so.13) and lib64 pointing at lib. Then
# DEST/bin/nvcc is the compiler: nvcc finds its includes and nvvm from the folder it is called in.
cuda_join_toolkit() {
    local dest=$1 root part lib base
    shift
    rm -rf "$dest"
    mkdir -p "$dest/bin" "$dest/include" "$dest/lib"
    for root in "$@"; do
        for part in bin include nvvm; do
            [ -d "$root/$part" ] && _cuda_merge "$root/$part" "$dest/$part"
        done
        for part in lib lib64 targets/*/lib; do
            [ -d "$root/$part" ] && _cuda_merge "$root/$part" "$dest/lib"
        done
        for part in targets/*/include; do
            [ -d "$root/$part" ] && _cuda_merge "$root/$part" "$dest/include"
        done
    done
    for lib in "$dest/lib/"lib*.so.*; do
        [ -e "$lib" ] || continue
        base=${lib%%.so.*}.so
        [ -e "$base" ] || ln -s "${lib##*/}" "$base"
    done
    ln -s lib "$dest/lib64"
}

# What a joined toolkit lacks, one line naming the first missing part; nothing when it is complete.
cuda_toolkit_problem() {
    local dest=$1 need
    for need in bin/nvcc bin/ptxas include/cuda_runtime.h include/cublas_v2.h lib/libcudart.so lib/libcublas.so lib/libcublasLt.so; do
        if [ ! -e "$dest/$need" ]; then
            echo "the CUDA toolkit in $dest has no $need"
            return 0
        fi
    done
    if [ ! -d "$dest/include/cccl/cub" ] && [ ! -d "$dest/include/cub" ]; then
        echo "the CUDA toolkit in $dest has no CCCL headers (cub, thrust, libcu++)"
    elif [ ! -x "$dest/nvvm/bin/cicc" ]; then
        echo "the CUDA toolkit in $dest has no nvvm/bin/cicc"
    fi
}
