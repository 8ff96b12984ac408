#!/usr/bin/env bash
# A Claude Code session (`claude -p`, then `claude -p --continue` FOLLOWUPS times, 2 by default) against
# specrun's server and llama.cpp's llama-server, one after the other on the same machine, with the
# same model file and one slot each: the seconds each turn takes, what docs/benchmarks.md's
# "Claude Code, turn by turn" table shows.
#
#   scripts/claude_code_bench.sh LLAMA_SERVER OUT_DIR
#
# LLAMA_SERVER: a llama-server binary (built from the llama.cpp llama-cpp-python bundles, target
# `llama-server`). Both serve the default pair's target file; specrun with its draft (`--spec
# auto`), llama-server plain. Claude Code (`claude`, `npm install -g @anthropic-ai/claude-code`)
# is found on PATH or under $AGENT_CLIENTS/npm (default /tmp/clients). Each session runs with HOME
# in a fresh temporary folder and in a fresh working folder, telemetry and nonessential traffic
# off. Writes OUT_DIR/{specrun-auto,llama-plain}.json and prints each turn's seconds.
# CTX (default 32768: Claude Code's first request is ~20,000 tokens), THREADS, PORT and PYTHON as
# in scripts/server_runs.sh; TURN_TIMEOUT (default 1800) bounds one turn; FOLLOWUPS (up to 11) sets
# the turns after the first.
set -euo pipefail

NAME=claude_code_bench
CTX=${CTX:-32768}
# shellcheck source=scripts/server_runs.sh
. "$(dirname "$0")/server_runs.sh"
TARGET=$(default_target)
AGENT_CLIENTS=${AGENT_CLIENTS:-/tmp/clients}
[ -d "$AGENT_CLIENTS/npm/node_modules/.bin" ] && PATH="$PATH:$AGENT_CLIENTS/npm/node_modules/.bin"
command -v claude >/dev/null || { echo "$NAME: claude is not installed (npm install -g @anthropic-ai/claude-code)" >&2; exit 2; }
# The first turn, then FOLLOWUPS (default 2) turns with --continue.
WORDS=(set go one two three four five six seven eight nine)
FOLLOWUPS=${FOLLOWUPS:-2}
TURNS=("Reply with just the word ready.")
for ((i = 0; i < FOLLOWUPS && i < ${#WORDS[@]}; i++)); do
    TURNS+=("Now reply with just the word ${WORDS[$i]}.")
done

client() {  # label, results file: the three turns, each timed
    local label=$1 out=$2 home work start end i status
    home=$(mktemp -d) work=$(mktemp -d)
    local times=() codes=()
    for i in "${!TURNS[@]}"; do
        local continue=()
        [ "$i" -gt 0 ] && continue=(--continue)
        start=$(date +%s.%N)
        status=0
        (cd "$work" && HOME="$home" DISABLE_TELEMETRY=1 DISABLE_AUTOUPDATER=1 DISABLE_ERROR_REPORTING=1 \
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 ANTHROPIC_BASE_URL="http://127.0.0.1:$PORT" \
            ANTHROPIC_API_KEY=bench ANTHROPIC_MODEL=qwen ANTHROPIC_DEFAULT_HAIKU_MODEL=qwen \
            timeout "${TURN_TIMEOUT:-1800}" claude -p "${continue[@]}" "${TURNS[$i]}" >"$out.turn$i.txt" 2>&1) ||
            status=$?
        end=$(date +%s.%N)
        times+=("$("$PY" -c "print($end - $start)")")
        codes+=("$status")
        echo "$label turn $((i + 1)): $(printf '%.1f' "${times[-1]}") s, exit $status: $(head -c 80 "$out.turn$i.txt" | tr '\n' ' ')"
    done
    "$PY" - "$label" "$out" "${times[@]}" "${codes[@]}" <<'EOF'
import json, statistics, sys
label, out, *rest = sys.argv[1:]
n = len(rest) // 2
times, codes = [float(t) for t in rest[:n]], [int(c) for c in rest[n:]]
later = statistics.median(times[1:]) if n > 1 else None
json.dump({"label": label, "seconds": times, "later_median": later, "exit": codes}, open(out, "w"), indent=1)
print(f"{label}: first turn {times[0]:.1f} s; later turns' median {later:.2f} s" if later else label)
EOF
    rm -rf "$home" "$work"
}

run_server "specrun auto" specrun-auto "$PY" -m specrun serve --parallel 1 --port "$PORT" --ctx-size "$CTX" \
    --threads "$THREADS"
run_server "llama-server plain" llama-plain "$LLAMA_SERVER" -m "$TARGET" --parallel 1 --port "$PORT" -c "$CTX" \
    -t "$THREADS"
