#!/usr/bin/env bash
# GPU check: install specrun from a bundle (scripts/gpu-bundle.sh: pip --no-index, no build, no
# network), write random-weight models with the shapes of Qwen2.5-7B (target) and Qwen2.5-0.5B
# (draft), a small Qwen3.5-like hybrid with an MTP block, and an EAGLE-3 head and a DFlash head
# (heads that read a target's layer inputs) with their target, and measure speculative decoding on
# them with every layer on the GPU. The heads need a target whose llama.cpp graph hands out its
# layer inputs, which qwen2's does not, so they get their own: a Llama 3.1 8B of real shapes (one
# more 8 GB file, about half a minute to write; SPECRUN_GPU_HEADS="" leaves the heads out). Speed
# depends on shapes, not weights, so no download is needed; random weights accept almost nothing,
# so the draft model and the heads run at set acceptances instead (bench --synthetic-acceptance:
# the real draft and target passes, drafts accepted at that rate).
# Sized to fit 8 minutes on 16 cores after a cold start; a re-run reuses the venv and the models.
#
# Stages: preflight, install, models, doctor, bench-draft (plain; the draft model at every K and
# synthetic acceptance), bench-self (the target drafting for itself: real acceptance near 1),
# bench-auto (auto at every synthetic acceptance), bench-mtp (only when `bench --help` offers
# --spec mtp; else the hybrid decodes plain), bench-heads (plain vs --spec eagle3 and plain vs
# --spec dflash on the heads' target at every synthetic acceptance; EAGLE-3 drafts K=4, DFlash its
# whole block), serve (bench --serve: plain vs auto by concurrency), summary (summary.md: stage
# times, the cost curves, each drafter's pass beside a target pass, measured vs predicted speedups
# with host, pass and draft milliseconds per step, what auto picked, the server;
# speedup-acceptance.svg). Any failure
# stops the check with a line naming the stage; everything is logged to $WORK/gpu-check.log.
#
# Environment:
#   SPECRUN_BUNDLE=DIR        the bundle to install from (required unless SPECRUN_LLAMA_WHEEL and
#                             SPECRUN_WHEELHOUSE say where everything is)
#   SPECRUN_LLAMA_WHEEL=FILE  llama-cpp-python from this wheel instead of the bundle's
#   SPECRUN_BACKEND=cuda|cpu  cuda (default) puts every layer on the GPU; cpu rehearses the check
#                             on a machine without one (smaller shapes by default)
#   SPECRUN_GPU_WORK=DIR      where everything goes (default /tmp/specrun-gpu-check; ~22 GB on cuda)
#   SPECRUN_GPU_SHAPES="TARGET DRAFT"  scripts/shaped_gguf.py shapes (default "qwen2.5-7b qwen2.5-0.5b";
#                             with SPECRUN_BACKEND=cpu "small-qwen2 tiny-qwen2")
#   SPECRUN_GPU_HEADS="EAGLE3 DFLASH"  head shapes of scripts/shaped_gguf.py, each written with the
#                             target it names (default "eagle3-llama3.1-8b dflash-llama3.1-8b", on
#                             llama3.1-8b; cpu "small-eagle3 small-dflash", on small-llama); either
#                             may be left out, "" skips bench-heads
#   SPECRUN_GPU_TOKENS=N      tokens per run (default 64; cpu 32)
#   SPECRUN_GPU_RATES=P,...   synthetic acceptances (default 0.6,0.8,0.9)
#   SPECRUN_GPU_KS=K,...      draft lengths of the draft model (default 2,4,8)
#   SPECRUN_GPU_QUANT=q8_0|q4_0   weight type of the models (default q8_0)
#   SPECRUN_GPU_THREADS=N     --threads of every bench (default: specrun's)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)

BACKEND=${SPECRUN_BACKEND:-cuda}
case "$BACKEND" in
    cuda) default_shapes="qwen2.5-7b qwen2.5-0.5b"; default_heads="eagle3-llama3.1-8b dflash-llama3.1-8b"; default_tokens=64 ;;
    cpu) default_shapes="small-qwen2 tiny-qwen2"; default_heads="small-eagle3 small-dflash"; default_tokens=32 ;;
    *) echo "gpu-check: SPECRUN_BACKEND=$BACKEND is not cuda or cpu" >&2; exit 2 ;;
esac
read -r TARGET_SHAPE DRAFT_SHAPE <<<"${SPECRUN_GPU_SHAPES:-$default_shapes}"
[ -n "${DRAFT_SHAPE:-}" ] || { echo "gpu-check: SPECRUN_GPU_SHAPES needs two shapes, \"TARGET DRAFT\"" >&2; exit 2; }
HEADS=${SPECRUN_GPU_HEADS-$default_heads}
TOKENS=${SPECRUN_GPU_TOKENS:-$default_tokens}
RATES=${SPECRUN_GPU_RATES:-0.6,0.8,0.9}
KS=${SPECRUN_GPU_KS:-2,4,8}
QUANT=${SPECRUN_GPU_QUANT:-q8_0}
if [ -z "${SPECRUN_BUNDLE:-}" ] && { [ -z "${SPECRUN_LLAMA_WHEEL:-}" ] || [ -z "${SPECRUN_WHEELHOUSE:-}" ]; }; then
    echo "gpu-check: this check installs without building: pass SPECRUN_BUNDLE=DIR (made by scripts/gpu-bundle.sh)" >&2
    exit 2
fi
WORK=${SPECRUN_GPU_WORK:-/tmp/specrun-gpu-check}
mkdir -p "$WORK/models" "$WORK/cache" "$WORK/tmp"
WORK=$(cd "$WORK" && pwd)
VENV=$WORK/venv
# Keep every cache and temporary file inside the work folder, and pip off the network.
export XDG_CACHE_HOME=$WORK/cache HF_HOME=$WORK/cache/huggingface TMPDIR=$WORK/tmp PIP_NO_INDEX=1
exec > >(tee -a "$WORK/gpu-check.log") 2>&1
TEE_PID=$!

STAGE=preflight
STARTED=$SECONDS
STAGE_START=$SECONDS
: >"$WORK/stages.tsv"
on_exit() {
    local status=$?
    if [ "$status" -ne 0 ]; then
        echo "gpu-check: FAILED in stage '$STAGE' (exit $status) after $((SECONDS - STARTED)) s; log: $WORK/gpu-check.log" >&2
    fi
    # Let tee finish writing before the shell returns, so the last lines are not printed after the prompt.
    exec >&- 2>&-
    wait "$TEE_PID" || true
}
trap on_exit EXIT
stage() {
    printf '%s\t%s\n' "$STAGE" "$((SECONDS - STAGE_START))" >>"$WORK/stages.tsv"
    STAGE=$1
    STAGE_START=$SECONDS
    echo
    echo "gpu-check: == $1 ($((SECONDS - STARTED)) s so far)"
}
fail() {
    echo "gpu-check: $*" >&2
    exit 1
}

echo "gpu-check: == preflight"
if [ "$BACKEND" = cuda ]; then
    command -v nvidia-smi >/dev/null || fail "nvidia-smi not found: this check needs an NVIDIA GPU (SPECRUN_BACKEND=cpu rehearses it without one)"
    nvidia-smi -L | grep '^GPU ' || fail "nvidia-smi lists no GPU"
    GPU_FLAGS=(--gpu-layers 999 --draft-gpu-layers 999)
    echo "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -n 1)" >"$WORK/header.txt"
else
    GPU_FLAGS=()
    echo "CPU rehearsal: $(nproc) cores, no GPU" >"$WORK/header.txt"
fi
echo "Models: random weights with the shapes $TARGET_SHAPE (target) and $DRAFT_SHAPE (draft), $QUANT; $TOKENS tokens per run" >>"$WORK/header.txt"
[ -z "$HEADS" ] || echo "Heads: $HEADS ($QUANT), each on the target it was shaped for" >>"$WORK/header.txt"
[ -z "${SPECRUN_GPU_THREADS:-}" ] || GPU_FLAGS+=(--threads "$SPECRUN_GPU_THREADS")
python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' || fail "python3 is older than 3.10"
echo "gpu-check: backend $BACKEND, work folder $WORK, bundle ${SPECRUN_BUNDLE:-none}"

stage install
SPECRUN_BACKEND=$BACKEND SPECRUN_SETUP_EXTRAS=${SPECRUN_SETUP_EXTRAS-} SPECRUN_VENV=$VENV bash "$REPO/scripts/setup.sh"
if [ "$BACKEND" = cuda ]; then
    # cuBLAS and the CUDA runtime may live outside the venv (PyTorch's environment, which a
    # bundle's venv sees): then every later stage finds them through LD_LIBRARY_PATH.
    . "$REPO/scripts/cuda-toolkit.sh"
    cuda_libs=$(cuda_pip_lib_dirs "$VENV/bin/python" | tr '\n' ':')
    if [ -n "$cuda_libs" ]; then
        export LD_LIBRARY_PATH="${cuda_libs%:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        echo "gpu-check: NVIDIA's libraries from: ${cuda_libs%:}"
    fi
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
fi
SPECRUN=("$VENV/bin/python" -m specrun)

stage models
TARGET=$WORK/models/$TARGET_SHAPE-$QUANT.gguf
DRAFT=$WORK/models/$DRAFT_SHAPE-$QUANT-draft.gguf
HYBRID=$WORK/models/qwen35-mtp.gguf
# A file is renamed into place only once complete, so one that exists can be reused.
[ -f "$TARGET" ] || "$VENV/bin/python" "$REPO/scripts/shaped_gguf.py" --shape "$TARGET_SHAPE" --type "$QUANT" "$TARGET"
[ -f "$DRAFT" ] || "$VENV/bin/python" "$REPO/scripts/shaped_gguf.py" --shape "$DRAFT_SHAPE" --type "$QUANT" --seed 1 "$DRAFT"
if [ ! -f "$HYBRID" ]; then
    # A Qwen3.5-like hybrid (gated delta nets, full attention every 4th layer) with one MTP block,
    # from the test suite's writer; small on a CPU rehearsal.
    "$VENV/bin/python" - "$HYBRID" "$BACKEND" <<'PY'
import sys
from pathlib import Path

sys.path.insert(0, "tests/support")
from arch_models import write_qwen35_gguf

out, backend = Path(sys.argv[1]), sys.argv[2]
dims = dict(n_embd=1024, n_ff=3072, n_head=8, n_head_kv=2, ssm_state=64, ssm_groups=4, ssm_heads=8) if backend == "cuda" \
    else dict(n_embd=256, n_ff=512, n_head=4, n_head_kv=2, ssm_state=32, ssm_groups=2, ssm_heads=4)
partial = out.with_suffix(".partial")
write_qwen35_gguf(partial, n_layer=8, n_nextn=1, context_length=4096, name="qwen35-mtp", **dims)
partial.rename(out)
print(f"gpu-check: wrote {out}")
PY
fi
# The heads and the targets they name: HEAD_KIND[i] (eagle3, dflash), its file, its target's file, its K.
HEAD_KIND=() HEAD_FILE=() HEAD_TARGET=() HEAD_K=()
for head in $HEADS; do
    arch="" head_target="" block=""
    read -r _ arch head_target block < <("$VENV/bin/python" "$REPO/scripts/shaped_gguf.py" --list | awk -v s="$head" '$1 == s') || true
    case "$arch" in
        eagle3) k=4 ;;
        dflash) k=$((block - 1)) ;;
        *) fail "SPECRUN_GPU_HEADS: $head is not an eagle3 or dflash shape of scripts/shaped_gguf.py (--list names them)" ;;
    esac
    case " ${HEAD_KIND[*]-} " in
        *" $arch "*) fail "SPECRUN_GPU_HEADS: more than one $arch head" ;;
    esac
    file=$WORK/models/$head-$QUANT.gguf
    target_file=$WORK/models/$head_target-$QUANT.gguf
    [ -f "$target_file" ] || "$VENV/bin/python" "$REPO/scripts/shaped_gguf.py" --shape "$head_target" --type "$QUANT" "$target_file"
    [ -f "$file" ] || "$VENV/bin/python" "$REPO/scripts/shaped_gguf.py" --shape "$head" --type "$QUANT" --seed 2 "$file"
    HEAD_KIND+=("$arch") HEAD_FILE+=("$file") HEAD_TARGET+=("$target_file") HEAD_K+=("$k")
done
ls -l "$WORK/models"

stage doctor
"${SPECRUN[@]}" doctor --target "$TARGET" --draft "$DRAFT" "${GPU_FLAGS[@]}" --json >"$WORK/doctor.json"
echo "gpu-check: wrote $WORK/doctor.json"

cat >"$WORK/prompts.jsonl" <<'JSONL'
{"id": "story", "category": "prose", "prompt": "Write a short story about a lighthouse keeper who finds a message in a bottle."}
{"id": "code", "category": "code", "prompt": "def merge_sorted(a: list[int], b: list[int]) -> list[int]:\n    \"\"\"Merge two sorted lists.\"\"\"\n"}
{"id": "facts", "category": "answers", "prompt": "List the planets of the solar system with one fact about each."}
JSONL
bench_on() {
    local target=$1 name=$2
    shift 2
    echo "gpu-check: bench $name: $*"
    "${SPECRUN[@]}" bench --target "$target" "${GPU_FLAGS[@]}" --raw --ignore-eos --temperature 0 --max-tokens "$TOKENS" \
        --runs 1 --warmup 1 --prompts "$WORK/prompts.jsonl" --json "$WORK/$name.json" "$@"
}
bench() {
    bench_on "$TARGET" "$@"
}

stage bench-draft
bench bench-draft --draft "$DRAFT" --spec off,draft --draft-max "$KS" --synthetic-acceptance "$RATES"

stage bench-self
bench bench-self --draft "$TARGET" --spec off,draft --draft-max 4

stage bench-auto
bench bench-auto --draft "$DRAFT" --spec off,auto --synthetic-acceptance "$RATES"

stage bench-mtp
# Read the help whole first: grep -q stopping early would fail the pipeline (pipefail) on SIGPIPE.
bench_help=$("${SPECRUN[@]}" bench --help)
if grep -q 'mtp' <<<"$bench_help"; then
    "${SPECRUN[@]}" bench --target "$HYBRID" --draft none "${GPU_FLAGS[@]}" --raw --ignore-eos --max-tokens "$TOKENS" --runs 1 \
        --prompts "$WORK/prompts.jsonl" --spec off,mtp --synthetic-acceptance "$RATES" --json "$WORK/bench-mtp.json"
else
    echo "gpu-check: this specrun has no --spec mtp yet; the hybrid decodes plain only"
    "${SPECRUN[@]}" bench --target "$HYBRID" --draft none "${GPU_FLAGS[@]}" --raw --ignore-eos --max-tokens "$TOKENS" --runs 1 \
        --prompts "$WORK/prompts.jsonl" --spec off --json "$WORK/bench-mtp.json"
fi

stage bench-heads
rm -f "$WORK/bench-eagle3.json" "$WORK/bench-dflash.json"  # a head left out now leaves no row behind
[ ${#HEAD_KIND[@]} -gt 0 ] || echo "gpu-check: SPECRUN_GPU_HEADS is empty: no heads"
i=0
while [ "$i" -lt ${#HEAD_KIND[@]} ]; do
    bench_on "${HEAD_TARGET[$i]}" "bench-${HEAD_KIND[$i]}" --draft "${HEAD_FILE[$i]}" --spec "off,${HEAD_KIND[$i]}" \
        --draft-max "${HEAD_K[$i]}" --synthetic-acceptance "$RATES"
    i=$((i + 1))
done

stage serve
"${SPECRUN[@]}" bench --serve --target "$TARGET" --draft "$DRAFT" "${GPU_FLAGS[@]}" --raw --ignore-eos --max-tokens "$TOKENS" \
    --runs 1 --prompts "$WORK/prompts.jsonl" --spec off,auto --concurrency 1,4 --schedule fcfs --json "$WORK/serve.json"

stage summary
"$VENV/bin/python" "$REPO/scripts/gpu_check_summary.py" "$WORK"
STAGE=finished
printf '%s\t%s\n' summary "$((SECONDS - STAGE_START))" >>"$WORK/stages.tsv"
echo "gpu-check: done in $((SECONDS - STARTED)) s; results in $WORK: summary.md, speedup-acceptance.svg, *.json, doctor.json"
