#!/usr/bin/env bash
# The agent clients, as their users install them, against `specrun serve` with nothing but a base
# URL and a model name set: Claude Code (Anthropic's Messages API), Codex CLI (OpenAI's Responses
# API), OpenCode, aider and llm (OpenAI's chat completions). Each gets one short task; one line per
# client says its name, its version, ok or failed, and the seconds it took.
#
#   scripts/agent_clients.sh [--model tiny|default|FILE.gguf] [--clients "claude codex ..."]
#                            [--task TEXT] [--timeout SECONDS] [--threads N] [--keep]
#
# --model   tiny (the default): a random-weight fixture written by tests/support/tiny_models.py,
#           with a 64k context and an end-of-answer token made likely, so that its (gibberish)
#           answers are short: a check of the protocols, in seconds. default: the registry's
#           default pair (its prefill on a laptop CPU makes an agent's first request take minutes:
#           raise --timeout). FILE.gguf: that model, served alone (-md none).
# --clients the clients to run, among claude, codex, opencode, aider, llm (default: all).
# --task    the prompt each client gets (default: "Say hello in one word").
# --timeout seconds each client may take (default: 300).
# --threads CPU threads of the server (default: 0, all cores).
# --keep    keep the work folder (server log, each client's home, output and log) also when every
#           client passed; it is always kept when one failed, and its path is printed.
#
# The server listens on 127.0.0.1 on a free port; each client runs with HOME (and the XDG folders
# under it) in a fresh temporary folder, in a fresh temporary working directory, so nothing touches
# the real home; telemetry and update checks are switched off through each client's documented
# settings. The clients are found on PATH, or where they are installed this way (AGENT_CLIENTS,
# default /tmp/clients):
#
#   npm install --prefix "$AGENT_CLIENTS/npm" @anthropic-ai/claude-code @openai/codex opencode-ai
#   python3 -m venv "$AGENT_CLIENTS/venv" && "$AGENT_CLIENTS/venv/bin/pip" install llm
#   python3 -m venv "$AGENT_CLIENTS/aider-venv" && "$AGENT_CLIENTS/aider-venv/bin/pip" install aider-chat
#
# A client that is not installed is reported as skipped. SPECRUN (default: .venv/bin/specrun, else
# specrun on PATH) and PYTHON (default: .venv/bin/python) name the server and the interpreter that
# writes the fixture. Exit status: 0 when every client that ran passed, 1 otherwise.
set -uo pipefail

HERE=$(cd "$(dirname "$0")/.." && pwd)
MODEL=tiny
CLIENTS="claude codex opencode aider llm"
TASK="Say hello in one word"
TIMEOUT=300
THREADS=0
KEEP=0
while [ $# -gt 0 ]; do
    case "$1" in
        --model) MODEL=$2; shift 2 ;;
        --clients) CLIENTS=$2; shift 2 ;;
        --task) TASK=$2; shift 2 ;;
        --timeout) TIMEOUT=$2; shift 2 ;;
        --threads) THREADS=$2; shift 2 ;;
        --keep) KEEP=1; shift ;;
        -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "agent_clients: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done

AGENT_CLIENTS=${AGENT_CLIENTS:-/tmp/clients}
for bin in "$AGENT_CLIENTS/npm/node_modules/.bin" "$AGENT_CLIENTS/venv/bin" "$AGENT_CLIENTS/aider-venv/bin"; do
    [ -d "$bin" ] && PATH="$PATH:$bin"
done
export PATH
if [ -z "${SPECRUN:-}" ]; then
    if [ -x "$HERE/.venv/bin/specrun" ]; then SPECRUN="$HERE/.venv/bin/specrun"; else SPECRUN=specrun; fi
fi
if [ -z "${PYTHON:-}" ]; then
    if [ -x "$HERE/.venv/bin/python" ]; then PYTHON="$HERE/.venv/bin/python"; else PYTHON=python3; fi
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/agent_clients.XXXXXX")
SERVER_PID=""
stop_server() {
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill "$SERVER_PID" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.2; done
        kill -9 "$SERVER_PID" 2>/dev/null
    fi
    SERVER_PID=""
}
trap stop_server EXIT
trap 'exit 130' INT TERM

# --- the server ---------------------------------------------------------------------------------

case "$MODEL" in
    tiny)
        if ! "$PYTHON" - "$HERE/tests/support" "$WORK/tiny.gguf" <<'EOF'; then
import sys
from pathlib import Path

sys.path.insert(0, sys.argv[1])
from tiny_models import frequent_token, write_tiny_gguf

out = Path(sys.argv[2])
base = write_tiny_gguf(out.with_name("tiny-base.gguf"), seed=0, context_length=65536)
# <|im_end|> as likely as the token the model writes soonest: its answers end after a few tokens.
like = frequent_token(base, chat_prompts=["Say hello in one word", "hi"], n=40)
write_tiny_gguf(out, seed=0, context_length=65536, eog_like={"<|im_end|>": like}, name="tiny")
EOF
            echo "agent_clients: could not write the tiny fixture" >&2
            exit 2
        fi
        SERVE=(-m "$WORK/tiny.gguf" -md none)
        ;;
    default) SERVE=() ;;
    *) SERVE=(-m "$MODEL" -md none) ;;
esac

"$SPECRUN" serve "${SERVE[@]}" --host 127.0.0.1 --port 0 --parallel 1 --threads "$THREADS" \
    >"$WORK/server.out" 2>"$WORK/server.log" &
SERVER_PID=$!
URL=""
for _ in $(seq 1200); do  # up to 10 minutes: the default pair may be downloaded and measured first
    URL=$(grep -o 'listening on http://[^ ]*' "$WORK/server.log" 2>/dev/null | head -1 | cut -d' ' -f3)
    [ -n "$URL" ] && break
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then break; fi
    sleep 0.5
done
if [ -z "$URL" ]; then
    echo "agent_clients: the server did not start; its log: $WORK/server.log" >&2
    tail -5 "$WORK/server.log" >&2
    exit 2
fi
NAME=$(curl -s "$URL/v1/models" | "$PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
echo "server: $URL · model $NAME · work folder $WORK"

# --- the clients --------------------------------------------------------------------------------

# version_<client> prints its version; run_<client> writes its config under its home ($H) and runs
# the task (in $WORK/<client>/cwd), under timeout.
T=(timeout -k 10 "$TIMEOUT")
version_claude() { claude --version 2>/dev/null | head -1 | cut -d' ' -f1; }
run_claude() {
    "${T[@]}" env DISABLE_TELEMETRY=1 DISABLE_AUTOUPDATER=1 DISABLE_ERROR_REPORTING=1 \
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 ANTHROPIC_BASE_URL="$URL" ANTHROPIC_API_KEY=specrun \
        ANTHROPIC_MODEL="$NAME" ANTHROPIC_DEFAULT_HAIKU_MODEL="$NAME" claude -p "$TASK"
}

version_codex() { codex --version 2>/dev/null | grep -o '[0-9][0-9.]*' | head -1; }
run_codex() {
    export CODEX_HOME="$H/.codex"
    mkdir -p "$CODEX_HOME"
    cat >"$CODEX_HOME/config.toml" <<EOF
model = "$NAME"
model_provider = "specrun"
check_for_update_on_startup = false

[analytics]
enabled = false

[feedback]
enabled = false

[model_providers.specrun]
name = "specrun"
base_url = "$URL/v1"
wire_api = "responses"
EOF
    "${T[@]}" codex exec --skip-git-repo-check "$TASK"
}

OPENCODE_ENV=(OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_MODELS_FETCH=1 OPENCODE_DISABLE_LSP_DOWNLOAD=1
    OPENCODE_DISABLE_DEFAULT_PLUGINS=1 OPENCODE_DISABLE_SHARE=1)
version_opencode() { env "${OPENCODE_ENV[@]}" opencode --version 2>/dev/null | tail -1; }
run_opencode() {
    mkdir -p "$H/.config/opencode"
    cat >"$H/.config/opencode/opencode.json" <<EOF
{
  "\$schema": "https://opencode.ai/config.json",
  "autoupdate": false,
  "share": "disabled",
  "model": "specrun/$NAME",
  "provider": {
    "specrun": {
      "npm": "@ai-sdk/openai-compatible",
      "name": "specrun",
      "options": { "baseURL": "$URL/v1" },
      "models": { "$NAME": { "name": "$NAME" } }
    }
  }
}
EOF
    "${T[@]}" env "${OPENCODE_ENV[@]}" opencode run "$TASK"
}

version_aider() { aider --version 2>/dev/null | grep -o '[0-9][0-9.]*' | head -1; }
run_aider() {
    "${T[@]}" aider --openai-api-base "$URL/v1" --openai-api-key specrun --model "openai/$NAME" --message "$TASK" \
        --yes --no-git --analytics-disable --no-check-update --no-show-release-notes --no-show-model-warnings
}

version_llm() { llm --version 2>/dev/null | grep -o '[0-9][0-9.]*' | head -1; }
run_llm() {
    export LLM_USER_PATH="$H/llm"
    mkdir -p "$LLM_USER_PATH"
    cat >"$LLM_USER_PATH/extra-openai-models.yaml" <<EOF
- model_id: specrun
  model_name: $NAME
  api_base: "$URL/v1"
  supports_tools: true
  supports_schema: true
EOF
    "${T[@]}" llm -m specrun "$TASK"
}

FAILED=0
for client in $CLIENTS; do
    case "$client" in
        claude | codex | opencode | aider | llm) ;;
        *) echo "agent_clients: unknown client $client" >&2; FAILED=1; continue ;;
    esac
    if ! command -v "$client" >/dev/null; then
        printf '%-9s %-10s %-7s %s\n' "$client" "-" skipped "(not installed)"
        continue
    fi
    H="$WORK/$client/home"
    mkdir -p "$H" "$WORK/$client/cwd"
    version=$(HOME="$H" XDG_CONFIG_HOME="$H/.config" "version_$client")
    start=$(date +%s.%N)
    (cd "$WORK/$client/cwd" && export HOME="$H" XDG_CONFIG_HOME="$H/.config" XDG_CACHE_HOME="$H/.cache" \
        XDG_DATA_HOME="$H/.local/share" XDG_STATE_HOME="$H/.local/state" && "run_$client") </dev/null \
        >"$WORK/$client/output" 2>"$WORK/$client/log"
    status=$?
    seconds=$(awk "BEGIN { print $(date +%s.%N) - $start }")
    # Passed: a zero exit with an answer printed (a client that met a protocol error exits non-zero).
    if [ "$status" -eq 0 ] && [ -s "$WORK/$client/output" ]; then
        printf '%-9s %-10s %-7s %6.1f s\n' "$client" "${version:--}" ok "$seconds"
    else
        FAILED=1
        why=$(cat "$WORK/$client/output" "$WORK/$client/log" 2>/dev/null | grep -a -i 'error' | tail -1)
        [ "$status" -eq 124 ] && why="timed out after $TIMEOUT s"
        printf '%-9s %-10s %-7s %6.1f s  exit %s: %s\n' "$client" "${version:--}" failed "$seconds" "$status" \
            "$(echo "${why:-see $WORK/$client}" | cut -c1-200 | sed 's/^ *//')"
    fi
done

stop_server
if [ "$FAILED" -eq 0 ] && [ "$KEEP" -eq 0 ]; then
    rm -rf "$WORK"
else
    echo "logs: $WORK (server.log; <client>/output, <client>/log, <client>/home)"
fi
exit "$FAILED"
