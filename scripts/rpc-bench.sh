#!/usr/bin/env bash
# RPC benchmark: plain against speculative decoding (off, draft, ngram, auto) with the target's
# layers on a `specrun worker` reached over a network link, beside the same benchmark with a
# loopback worker and with no worker at all.
#
# The link is a veth pair into a network namespace that holds the worker, with `tc netem delay` on
# both ends (SPECRUN_RPC_DELAY_MS each way, default 1). On a kernel built without netem, a
# userspace proxy (scripts/delay_proxy.py) delays every chunk as much instead, and the output says
# so. Needs root, `ip` and `tc` (Debian: apt-get install iproute2). Everything it creates (the
# namespace, the veth pair, the workers, the proxy) is removed when it exits, however it exits.
#
# Usage: sudo bash scripts/rpc-bench.sh [specrun bench options...]
#   Defaults: the default pair, --spec off,draft,ngram,auto --limit 1 --runs 1 --max-tokens 64
#   --gpu-layers all (every target layer on the worker, as when the worker has the GPU). Options
#   given come after the defaults, so they win.
# Environment:
#   SPECRUN_PYTHON        the Python with specrun installed (default .venv/bin/python, else python3)
#   SPECRUN_RPC_DELAY_MS  added latency each way (default 1)
#   SPECRUN_RPC_OUT       folder for the JSON documents, logs and summary (default: a new temporary one)
#   SPECRUN_RPC_THREADS   threads of each worker (default: all cores)
#   SPECRUN_RPC_RUNS      which benchmarks to run, in order (default "link loopback local")
#
# Timings are only meaningful on an otherwise idle machine: the worker and specrun share its cores.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)

PY=${SPECRUN_PYTHON:-}
if [ -z "$PY" ]; then
    if [ -x "$REPO/.venv/bin/python" ]; then PY=$REPO/.venv/bin/python; else PY=python3; fi
fi
DELAY=${SPECRUN_RPC_DELAY_MS:-1}
RUNS=${SPECRUN_RPC_RUNS:-link loopback local}
OUT=${SPECRUN_RPC_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/specrun-rpc-bench.XXXXXX")}
mkdir -p "$OUT"
THREAD_ARGS=()
[ -n "${SPECRUN_RPC_THREADS:-}" ] && THREAD_ARGS=(--threads "$SPECRUN_RPC_THREADS")
DEFAULTS=(--spec off,draft,ngram,auto --limit 1 --runs 1 --max-tokens 64 --gpu-layers all)

TAG=$$
NS=specrun-rpc-$TAG
HOST_IF=sprh$((TAG % 1000000))
NS_IF=sprw$((TAG % 1000000))
NET=10.211.$((TAG % 250))
HOST_IP=$NET.1
NS_IP=$NET.2
WORKER_PORT=50052
PIDS=()

say() { echo "rpc-bench: $*" >&2; }
fail() {
    say "$*"
    exit 1
}
stop_started() { # the workers and the proxy started so far, so the next benchmark has the cores to itself
    local pid
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do
        for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        kill -KILL "$pid" 2>/dev/null || true
    done
    PIDS=()
}
cleanup() {
    stop_started
    ip netns del "$NS" 2>/dev/null || true
    ip link del "$HOST_IF" 2>/dev/null || true
}
trap cleanup EXIT
free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_for() { # HOST PORT LOG: until something accepts connections there
    local deadline=$((SECONDS + 120))
    until "$PY" -c "import socket, sys; socket.create_connection(('$1', $2), timeout=1)" 2>/dev/null; do
        [ $SECONDS -lt $deadline ] || fail "nothing listens at $1:$2 after 120 s; log: $3"
        sleep 0.2
    done
}

[ "$(id -u)" = 0 ] || fail "needs root (it creates a network namespace and a veth pair)"
command -v ip >/dev/null && command -v tc >/dev/null || fail "needs ip and tc: apt-get install iproute2"
"$PY" -c 'import specrun' 2>/dev/null || fail "$PY cannot import specrun: set SPECRUN_PYTHON"

for run in $RUNS; do
    case $run in
    link)
        ip netns add "$NS"
        ip link add "$HOST_IF" type veth peer name "$NS_IF"
        ip link set "$NS_IF" netns "$NS"
        ip addr add "$HOST_IP/24" dev "$HOST_IF"
        ip link set "$HOST_IF" up
        ip netns exec "$NS" ip addr add "$NS_IP/24" dev "$NS_IF"
        ip netns exec "$NS" ip link set "$NS_IF" up
        ip netns exec "$NS" ip link set lo up
        if tc qdisc add dev "$HOST_IF" root netem delay "${DELAY}ms" 2>/dev/null; then
            ip netns exec "$NS" tc qdisc add dev "$NS_IF" root netem delay "${DELAY}ms"
            LINK_ENDPOINT=$NS_IP:$WORKER_PORT
            LINK="veth pair, tc netem ${DELAY} ms each way"
        else
            PROXY_PORT=$(free_port)
            "$PY" "$REPO/scripts/delay_proxy.py" "$HOST_IP:$PROXY_PORT" "$NS_IP:$WORKER_PORT" "$DELAY" 2>"$OUT/proxy.log" &
            PIDS+=($!)
            LINK_ENDPOINT=$HOST_IP:$PROXY_PORT
            LINK="veth pair, ${DELAY} ms each way by a userspace proxy (this kernel has no netem qdisc)"
            say "this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM): delaying with scripts/delay_proxy.py instead"
        fi
        ip netns exec "$NS" "$PY" -m specrun worker --host "$NS_IP" --port "$WORKER_PORT" "${THREAD_ARGS[@]}" 2>"$OUT/worker-link.log" &
        PIDS+=($!)
        wait_for "$NS_IP" "$WORKER_PORT" "$OUT/worker-link.log"
        [ -z "${PROXY_PORT:-}" ] || wait_for "$HOST_IP" "$PROXY_PORT" "$OUT/proxy.log"
        say "link: $LINK; worker at $LINK_ENDPOINT"
        "$PY" -m specrun bench "${DEFAULTS[@]}" "$@" --rpc "$LINK_ENDPOINT" --json "$OUT/bench-link.json"
        stop_started
        ;;
    loopback)
        LOOP_PORT=$(free_port)
        "$PY" -m specrun worker --port "$LOOP_PORT" "${THREAD_ARGS[@]}" 2>"$OUT/worker-loopback.log" &
        PIDS+=($!)
        wait_for 127.0.0.1 "$LOOP_PORT" "$OUT/worker-loopback.log"
        say "loopback: worker at 127.0.0.1:$LOOP_PORT"
        "$PY" -m specrun bench "${DEFAULTS[@]}" "$@" --rpc "127.0.0.1:$LOOP_PORT" --json "$OUT/bench-loopback.json"
        stop_started
        ;;
    local)
        say "local: no worker"
        "$PY" -m specrun bench "${DEFAULTS[@]}" "$@" --json "$OUT/bench-local.json"
        ;;
    *) fail "unknown run '$run' in SPECRUN_RPC_RUNS (link, loopback, local)" ;;
    esac
done

DOCS=()
for run in $RUNS; do DOCS+=("$run=$OUT/bench-$run.json"); done
{
    echo "Link: ${LINK:-none}"
    echo
    "$PY" "$REPO/scripts/rpc_summary.py" "${DOCS[@]}"
} | tee "$OUT/summary.md"
say "results in $OUT"
