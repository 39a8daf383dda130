#!/usr/bin/env bash
# Times shardfs's plan generation against upstream mosaicml-streaming on the same inputs, in
# the same run, one core each, and prints the ratios.
#
#   bench/order_upstream.sh [SIZES...]      default: 10000000 100000000
#   UPSTREAM_MAX=10000000 limits which sizes upstream is timed at (it is slow at 1e8).
#
# Creates a venv (BENCH_VENV, default /tmp/shardfs-bench-venv) with numpy and
# mosaicml-streaming installed --no-deps (its torch dependency is not needed for the
# partition and shuffle modules, which are loaded without the package __init__).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
venv="${BENCH_VENV:-/tmp/shardfs-bench-venv}"
sizes=("$@")
[ ${#sizes[@]} -eq 0 ] && sizes=(10000000 100000000)
upstream_max="${UPSTREAM_MAX:-100000000}"

if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q numpy
  "$venv/bin/pip" install -q --no-deps 'mosaicml-streaming==0.13.0'
fi

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/work/target-shared}"
(cd "$repo" && cargo build -q --release --bench order)
bin="$(ls -t "$CARGO_TARGET_DIR"/release/deps/order-* | grep -v '\.d$' | head -1)"

one_core() { taskset -c 0 "$@" 2>/dev/null || "$@"; }

results="$(mktemp)"
for n in "${sizes[@]}"; do
  for algo in py1e py1s; do
    one_core "$bin" "$algo" "$n" | tee -a "$results"
    if [ "$n" -le "$upstream_max" ]; then
      one_core "$venv/bin/python" "$here/order_upstream.py" "$algo" "$n" | tee -a "$results"
    fi
  done
done

python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in rows:
    by.setdefault((r['algo'], r['samples']), {})[r['impl']] = r
print()
print(f"{'algo':6} {'samples':>11} {'shardfs s':>10} {'upstream s':>11} {'speedup':>8} {'cpu speedup':>11} {'shardfs MiB':>12} {'upstream MiB':>13} {'same plan':>9}")
for (algo, n), d in sorted(by.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    s, u = d.get('shardfs'), d.get('upstream')
    ratio = f"{u['seconds'] / s['seconds']:.1f}x" if s and u else '-'
    cpu_ratio = f"{u['cpu_seconds'] / max(s['cpu_seconds'], 0.01):.1f}x" if s and u else '-'
    same = ('yes' if s['checksum'] == u['checksum'] and s['plan_ids'] == u['plan_ids'] else 'NO') if s and u else '-'
    print(f"{algo:6} {n:>11} {s['seconds'] if s else '-':>10} {u['seconds'] if u else '-':>11} {ratio:>8} {cpu_ratio:>11} "
          f"{s['peak_rss_mib'] if s else '-':>12} {u['peak_rss_mib'] if u else '-':>13} {same:>9}")
PY
rm -f "$results"
