# Sourced by the scripts that run one client against specrun's server and llama-server in turn
# (agent_bench.sh, structured_bench.sh), called as `scripts/NAME.sh LLAMA_SERVER OUT_DIR`: their
# arguments and settings (PYTHON, CTX, THREADS, PORT from the environment), the default pair in
# place, its target's path, and one server at a time started, waited for, measured and stopped.
#
# The caller sets NAME (its own name) before sourcing, and defines `client LABEL RESULTS_FILE`.

if [ $# -lt 2 ]; then
    echo "usage: scripts/$NAME.sh LLAMA_SERVER OUT_DIR" >&2
    exit 2
fi
LLAMA_SERVER=$1
OUT=$2
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-$HERE/.venv/bin/python}
CTX=${CTX:-4096}
THREADS=${THREADS:-$(nproc)}
PORT=${PORT:-8097}
mkdir -p "$OUT"

# The default pair fetched where it is missing; prints its target's path.
default_target() {
    "$PY" -m specrun pull >&2
    "$PY" -m specrun pairs --json | "$PY" -c '
import json, sys
pairs = json.load(sys.stdin)["pairs"]
print(next(p for p in pairs if p.get("default"))["target"]["path"])'
}

# wait_ready [PORT]: until the server on PORT (default $PORT) answers /health, 600 s at most.
wait_ready() {
    local port=${1:-$PORT}
    for _ in $(seq 1 600); do
        curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
        sleep 1
    done
    echo "$NAME: the server on port $port did not become ready" >&2
    return 1
}

# run_server LABEL FILE SERVER COMMAND...: the server started (its log in OUT/FILE.log), the
# caller's `client LABEL OUT/FILE.json` run against it, the server stopped.
# A client that fails still has its server stopped; the run then stops with its status.
run_server() {
    local label=$1 file=$2 status=0
    shift 2
    "$@" >"$OUT/$file.log" 2>&1 &
    SERVER_PID=$!
    trap 'kill "$SERVER_PID" 2>/dev/null || true' EXIT
    wait_ready
    client "$label" "$OUT/$file.json" || status=$?
    kill "$SERVER_PID"
    wait "$SERVER_PID" 2>/dev/null || true
    trap - EXIT
    return "$status"
}
