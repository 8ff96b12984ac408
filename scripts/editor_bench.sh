#!/usr/bin/env bash
# An editing session replayed against specrun's server and llama.cpp's llama-server, plain and
# with its n-gram speculation, all three up at once with the same model file, one slot each and
# llama.cpp's FIM preset settings (the model's context, --cache-reuse 256): the time to each
# completed suggestion and the share of each prompt read again, what docs/benchmarks.md's "Editor
# completion" table shows.
#
#   scripts/editor_bench.sh LLAMA_SERVER OUT_DIR
#
# LLAMA_SERVER: a llama-server binary (built from the llama.cpp llama-cpp-python bundles, target
# `llama-server`). The client is scripts/editor_replay.py (its docstring says what it sends); it
# asks every server each request in turn, the order rotating. CTX (default 32768, the default
# pair's trained context), THREADS, PORT (specrun; llama-server takes PORT+1 and PORT+2), PYTHON
# and REUSE (the --cache-reuse of all three, default 256) from the environment; further arguments
# go to editor_replay.py.
set -euo pipefail

NAME=editor_bench
CTX=${CTX:-32768}
# shellcheck source=scripts/server_runs.sh
. "$(dirname "$0")/server_runs.sh"
shift 2
TARGET=$(default_target)
REUSE=${REUSE:-256}
S=$PORT L=$((PORT + 1)) N=$((PORT + 2))

"$PY" -m specrun serve --parallel 1 --port "$S" --ctx-size "$CTX" --threads "$THREADS" --cache-reuse "$REUSE" \
    >"$OUT/specrun.log" 2>&1 &
PIDS=($!)
"$LLAMA_SERVER" -m "$TARGET" --parallel 1 --port "$L" -c "$CTX" -t "$THREADS" --cache-reuse "$REUSE" \
    >"$OUT/llama-plain.log" 2>&1 &
PIDS+=($!)
"$LLAMA_SERVER" -m "$TARGET" --parallel 1 --port "$N" -c "$CTX" -t "$THREADS" --cache-reuse "$REUSE" \
    --spec-type ngram-mod >"$OUT/llama-ngram-mod.log" 2>&1 &
PIDS+=($!)
trap 'kill "${PIDS[@]}" 2>/dev/null || true' EXIT
for port in "$S" "$L" "$N"; do wait_ready "$port"; done

"$PY" "$HERE/scripts/editor_replay.py" "$OUT/editor.json" \
    "specrun=http://127.0.0.1:$S" "llama-server=http://127.0.0.1:$L" "llama-server-ngram-mod=http://127.0.0.1:$N" "$@"
