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

NAME=structured_bench
TOKENS=${TOKENS:-192}
# shellcheck source=scripts/server_runs.sh
. "$(dirname "$0")/server_runs.sh"
TARGET=$(default_target)

client() {  # label, results file
    "$PY" "$HERE/scripts/structured_workload.py" --url "http://127.0.0.1:$PORT" --label "$1" --max-tokens "$TOKENS" --out "$2"
}

run_server "specrun auto" specrun-auto "$PY" -m specrun serve --parallel 1 --port "$PORT" --ctx-size "$CTX" \
    --threads "$THREADS"
run_server "llama-server" llama-server "$LLAMA_SERVER" -m "$TARGET" --parallel 1 --port "$PORT" -c "$CTX" -t "$THREADS"
