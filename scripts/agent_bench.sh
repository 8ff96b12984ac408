#!/usr/bin/env bash
# The agent workload (scripts/agent_workload.py) against specrun's server and llama.cpp's
# llama-server, one after the other on the same machine, with the same model file, the same
# client and one slot each: what docs/benchmarks.md's "Agents and editors" table shows.
#
#   scripts/agent_bench.sh LLAMA_SERVER OUT_DIR
#
# LLAMA_SERVER: a llama-server binary (built from the llama.cpp llama-cpp-python bundles, target
# `llama-server`). specrun serves the default pair (`--spec auto`); llama-server serves the same
# target file, as `specrun pairs` places it. Writes OUT_DIR/{specrun-auto,llama-plain,llama-ngram-mod}.json and prints each run's summary.
set -euo pipefail

NAME=agent_bench
# shellcheck source=scripts/server_runs.sh
. "$(dirname "$0")/server_runs.sh"
TARGET=$(default_target)

client() {  # label, results file
    "$PY" "$HERE/scripts/agent_workload.py" --url "http://127.0.0.1:$PORT" --label "$1" --out "$2"
}

run_server "specrun auto" specrun-auto "$PY" -m specrun serve --parallel 1 --port "$PORT" --ctx-size "$CTX" \
    --threads "$THREADS"
run_server "llama-server plain" llama-plain "$LLAMA_SERVER" -m "$TARGET" --parallel 1 --port "$PORT" -c "$CTX" \
    -t "$THREADS"
run_server "llama-server ngram-mod" llama-ngram-mod "$LLAMA_SERVER" -m "$TARGET" --parallel 1 --port "$PORT" \
    -c "$CTX" -t "$THREADS" --spec-type ngram-mod
