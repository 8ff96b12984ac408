#!/usr/bin/env bash
# The server with an EAGLE-3 or DFlash head on the test fixtures: `auto` against plain at 4 and 8
# concurrent requests, with no head, the EAGLE-3 head and the DFlash head, RUNS fresh servers
# each (default 15). Prints, per head and concurrency, the median throughput of each mode, their
# ratio and the median of the per-run ratios.
#
#   scripts/head_serve_bench.sh OUT_DIR
set -euo pipefail
if [ $# -lt 1 ]; then
    echo "usage: scripts/head_serve_bench.sh OUT_DIR" >&2
    exit 2
fi
OUT=$1
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-$HERE/.venv/bin/python}
RUNS=${RUNS:-15}
THREADS=${THREADS:-2}
mkdir -p "$OUT"
"$PY" "$HERE/scripts/write_head_fixtures.py" "$OUT"
for head in none eagle3 dflash; do
    draft=()
    [ "$head" != none ] && draft=(--draft "$OUT/$head-head.gguf")
    "$PY" -m specrun bench --serve --target "$OUT/feature-target.gguf" "${draft[@]}" --spec off,auto \
        --concurrency 4,8 --schedule srpt --runs "$RUNS" --threads "$THREADS" --quiet --json "$OUT/$head.json"
done
"$PY" - "$OUT" <<'PY'
import json
import statistics
import sys

for head in ("none", "eagle3", "dflash"):
    runs = json.load(open(f"{sys.argv[1]}/{head}.json"))["runs"]
    for concurrency in sorted({r["concurrency"] for r in runs}):
        by = {m: {r["repetition"]: r["throughput_tokens_per_s"] for r in runs if r["concurrency"] == concurrency and r["mode"] == m} for m in ("off", "auto")}
        plain, auto = statistics.median(by["off"].values()), statistics.median(by["auto"].values())
        ratios = [by["auto"][i] / by["off"][i] for i in by["off"] if i in by["auto"]]
        print(f"{head:7} {concurrency} at a time: plain {plain:,.0f} tok/s, auto {auto:,.0f} tok/s, "
              f"{auto / plain:.2f}x (median of per-run ratios {statistics.median(ratios):.2f}x, {len(ratios)} runs)")
PY
