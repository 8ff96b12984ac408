#!/usr/bin/env bash
# Claude Code sessions (`claude -p`, then `claude -p --continue` FOLLOWUPS times, 2 by default)
# against specrun's server and llama.cpp's llama-server, both up at once on the same machine with
# the same model file and one slot each: the seconds each turn takes, what docs/benchmarks.md's
# "Claude Code, turn by turn" table shows.
#
#   scripts/claude_code_bench.sh LLAMA_SERVER OUT_DIR
#
# LLAMA_SERVER: a llama-server binary (built from the llama.cpp llama-cpp-python bundles, target
# `llama-server`). Both serve the default pair's target file; specrun with its draft (`--spec
# auto`), llama-server plain. Claude Code (`claude`, `npm install -g @anthropic-ai/claude-code`)
# is found on PATH or under $AGENT_CLIENTS/npm (default /tmp/clients).
#
# The first session's first turn reads Claude Code's instructions cold, on each server in turn.
# Then REPEATS (default 4) more sessions follow, each turn asked of both servers one after the
# other, the order alternating turn by turn, so that a slow moment of the machine or of Claude
# Code's own start falls on both alike. Each server's sessions share a HOME in a fresh temporary
# folder, all of them one working folder, telemetry and nonessential traffic off. Writes OUT_DIR/turns.json
# (every session's seconds per server) and prints each turn and, per turn, the median over the
# sessions (scripts/turns_summary.py).
# CTX (default 32768: Claude Code's first request is ~20,000 tokens), THREADS, PORT (specrun;
# llama-server takes PORT+1) and PYTHON as in scripts/server_runs.sh; TURN_TIMEOUT (default
# 1800) bounds one turn; FOLLOWUPS (up to 11) sets the turns after the first.
set -euo pipefail

NAME=claude_code_bench
CTX=${CTX:-32768}
# shellcheck source=scripts/server_runs.sh
. "$(dirname "$0")/server_runs.sh"
TARGET=$(default_target)
AGENT_CLIENTS=${AGENT_CLIENTS:-/tmp/clients}
[ -d "$AGENT_CLIENTS/npm/node_modules/.bin" ] && PATH="$PATH:$AGENT_CLIENTS/npm/node_modules/.bin"
command -v claude >/dev/null || { echo "$NAME: claude is not installed (npm install -g @anthropic-ai/claude-code)" >&2; exit 2; }
WORDS=(set go one two three four five six seven eight nine)
FOLLOWUPS=${FOLLOWUPS:-2}
REPEATS=${REPEATS:-4}
TURNS=("Reply with just the word ready.")
for ((i = 0; i < FOLLOWUPS && i < ${#WORDS[@]}; i++)); do
    TURNS+=("Now reply with just the word ${WORDS[$i]}")  # the session's number and a period follow
done
LABELS=(specrun llama)
declare -A PORTS=([specrun]=$PORT [llama]=$((PORT + 1)))

"$PY" -m specrun serve --parallel 1 --port "${PORTS[specrun]}" --ctx-size "$CTX" --threads "$THREADS" \
    >"$OUT/specrun-auto.log" 2>&1 &
SPECRUN_PID=$!
"$LLAMA_SERVER" -m "$TARGET" --parallel 1 --port "${PORTS[llama]}" -c "$CTX" -t "$THREADS" \
    >"$OUT/llama-plain.log" 2>&1 &
LLAMA_PID=$!
SCRATCH=$(mktemp -d)
trap 'kill "$SPECRUN_PID" "$LLAMA_PID" 2>/dev/null || true; rm -rf "$SCRATCH"' EXIT
wait_ready "${PORTS[specrun]}"
wait_ready "${PORTS[llama]}"

RECORD=$OUT/turns.tsv
: >"$RECORD"
# Every session works in one folder, and each server's sessions in one HOME of their own
# (home-a, home-b: the same length): Claude Code's instructions name both, so a new session's first
# request shares all of them with that server's last one (each server may answer it from its
# cache). Sessions run one after another, so `--continue` takes up the session under way.
WORK=$SCRATCH/work
declare -A HOMES=([specrun]=$SCRATCH/home-a [llama]=$SCRATCH/home-b)
mkdir -p "$WORK" "${HOMES[specrun]}" "${HOMES[llama]}"
ask() {  # session, turn index: the turn's words (a later turn names its session, so no session repeats another)
    if [ "$2" -eq 0 ]; then echo "${TURNS[0]}"; else echo "${TURNS[$2]} $(($1 + 1))."; fi
}
turn() {  # label, session, turn index: one `claude -p` against that server, timed into RECORD
    local label=$1 session=$2 i=$3 home=${HOMES[$1]} work=$WORK out start end status=0
    out=$OUT/$label.session$session.turn$i.txt
    local continue=()
    [ "$i" -gt 0 ] && continue=(--continue)
    start=$(date +%s.%N)
    (cd "$work" && HOME="$home" DISABLE_TELEMETRY=1 DISABLE_AUTOUPDATER=1 DISABLE_ERROR_REPORTING=1 \
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 ANTHROPIC_BASE_URL="http://127.0.0.1:${PORTS[$label]}" \
        ANTHROPIC_API_KEY=bench ANTHROPIC_MODEL=qwen ANTHROPIC_DEFAULT_HAIKU_MODEL=qwen \
        timeout "${TURN_TIMEOUT:-1800}" claude -p "${continue[@]}" "$(ask "$session" "$i")" >"$out" 2>&1) || status=$?
    end=$(date +%s.%N)
    printf '%s\t%s\t%s\t%s\t%s\n' "$label" "$session" "$i" "$("$PY" -c "print($end - $start)")" "$status" >>"$RECORD"
    echo "$label session $session turn $((i + 1)): $(printf '%.2f' "$(cut -f4 <(tail -n1 "$RECORD"))") s, exit $status: $(head -c 60 "$out" | tr '\n' ' ')"
}

for ((session = 0; session <= REPEATS; session++)); do
    for i in "${!TURNS[@]}"; do
        if (((session + i) % 2 == 0)); then order=(specrun llama); else order=(llama specrun); fi
        for label in "${order[@]}"; do
            turn "$label" "$session" "$i"
        done
    done
done
"$PY" "$HERE/scripts/turns_summary.py" "$RECORD" "$OUT/turns.json"
