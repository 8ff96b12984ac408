#!/usr/bin/env bash
# lm-evaluation-harness (`pip install 'lm-eval[api]'`, in the test extras) against `specrun serve`
# on the default pair, once per speculation mode: its `local-completions` model with the server's
# remote tokenizer runs the multiple-choice (log-likelihood) and generate-until tasks of
# tests/data/lm_eval. The scores must be the same in every mode; docs/evaluation.md shows them.
#
#   scripts/lm_eval_check.sh [MODES...]     (default: off auto)
#
# PYTHON, CTX (default 4096) and PORT (default 8131) from the environment.
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-$HERE/.venv/bin/python}
CTX=${CTX:-4096}
PORT=${PORT:-8131}
MODES=("$@")
[ ${#MODES[@]} -gt 0 ] || MODES=(off auto)
"$PY" -c 'import lm_eval' 2>/dev/null || { echo "lm_eval_check: lm-eval is not installed (pip install 'lm-eval[api]')" >&2; exit 2; }
for mode in "${MODES[@]}"; do
    "$PY" -m specrun serve --spec "$mode" --port "$PORT" --ctx-size "$CTX" >/dev/null 2>&1 &
    pid=$!
    trap 'kill "$pid" 2>/dev/null || true' EXIT
    for _ in $(seq 1 600); do
        curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
        sleep 1
    done
    echo "--spec $mode"
    # the task files name their data relative to themselves
    (cd "$HERE/tests/data/lm_eval" && "$PY" -m lm_eval --model local-completions \
        --model_args "base_url=http://127.0.0.1:$PORT/v1/completions,model=qwen2.5-coder-1.5b,tokenizer_backend=remote,tokenized_requests=True" \
        --tasks specrun_mc,specrun_gen --include_path . 2>/dev/null | grep '^|')
    kill "$pid"
    wait "$pid" 2>/dev/null || true
done
