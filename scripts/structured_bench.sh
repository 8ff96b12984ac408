#!/usr/bin/env bash
# The structured-output workload (scripts/structured_workload.py: the bench's schema prompts as
# chat requests with response_format json_schema) against specrun's server and llama.cpp's
# llama-server, one after the other on the same machine, with the same model file, the same client
# and one slot each: what docs/benchmarks.md's "Structured output" table shows.
#
#   scripts/structured_bench.sh LLAMA_SERVER OUT_DIR
#
# LLAMA_SERVER: a llama-server binary (built from the llama.cpp llama-cpp-python bundles, target
# `llama-server`). specrun serves the default pair (`--spec auto`); llama-server serves the same
# target file with its defaults. Writes OUT_DIR/{specrun-auto,llama-server}.json.
set -euo pipefail

if [ $# -lt 2 ]; then
    echo "usage: scripts/structured_bench.sh LLAMA_SERVER OUT_DIR" >&2
    exit 2
fi
LLAMA_SERVER=$1
OUT=$2
HERE=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-$HERE/.venv/bin/python}
CTX=${CTX:-4096}
THREADS=${THREADS:-$(nproc)}
PORT=${PORT:-8097}
TOKENS=${TOKENS:-192}
mkdir -p "$OUT"
"$PY" -m specrun pull >&2  # the default pair, where it is not in place yet
TARGET=$("$PY" -m specrun pairs --json | "$PY" -c '
import json, sys
pairs = json.load(sys.stdin)["pairs"]
print(next(p for p in pairs if p.get("default"))["target"]["path"])')

wait_ready() {
    for _ in $(seq 1 600); do
        curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && return 0
        sleep 1
    done
    echo "structured_bench: the server on port $PORT did not become ready" >&2
    return 1
}

run_one() {  # label, file, server command...
    local label=$1 file=$2
    shift 2
    "$@" >"$OUT/$file.log" 2>&1 &
    local pid=$!
    trap 'kill $pid 2>/dev/null || true' EXIT
    wait_ready
    "$PY" "$HERE/scripts/structured_workload.py" --url "http://127.0.0.1:$PORT" --label "$label" \
        --max-tokens "$TOKENS" --out "$OUT/$file.json"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    trap - EXIT
}

run_one "specrun auto" specrun-auto "$PY" -m specrun serve --parallel 1 --port "$PORT" --ctx-size "$CTX" \
    --threads "$THREADS"
run_one "llama-server" llama-server "$LLAMA_SERVER" -m "$TARGET" --parallel 1 --port "$PORT" -c "$CTX" -t "$THREADS"
