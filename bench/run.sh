#!/usr/bin/env bash
# The one benchmark command: builds the Rust parts, then runs bench/harness.py.
#   bench/run.sh                 full comparison (see bench/README.md), release build
#   bench/run.sh --smoke         seconds: 300 samples, local disk + shardfs + bench server
#   bench/run.sh --micro         also the module micro-benchmarks
#   bench/run.sh --setup-venv    create ~/.cache/shardfs-bench/venv (mosaicml-streaming + torch)
# Other flags go to harness.py (--samples, --workers, --latency-ms, --bandwidth-mbps,
# --systems, ...; `python3 bench/harness.py --help --bins {}` lists them).
# Environment: CARGO_TARGET_DIR (default target/), BENCH_PROFILE (release).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
venv="${BENCH_VENV:-$HOME/.cache/shardfs-bench/venv}"

args=()
for a in "$@"; do
  case "$a" in
    --setup-venv)
      python3 -m venv "$venv"
      "$venv/bin/pip" install 'mosaicml-streaming==0.13.0'
      exit 0 ;;
    *) args+=("$a") ;;
  esac
done

# The FUSE mounts need fusermount3 (the fuse3 package); install it like tests/run.sh does.
if ! command -v fusermount3 >/dev/null 2>&1; then
  sudo=()
  [ "$(id -u)" -ne 0 ] && sudo=(sudo)
  echo "bench/run.sh: installing fuse3 (apt-get)" >&2
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq fuse3 >/dev/null
fi

profile="${BENCH_PROFILE:-release}"
target="${CARGO_TARGET_DIR:-$repo/target}"
if [ "$profile" = debug ]; then cargo_profile=(--profile dev); else cargo_profile=(--profile "$profile"); fi
(cd "$repo" && cargo build --quiet "${cargo_profile[@]}" --bin shardfs \
  --example bench-s3-server --example bench-gen --example bench-null-fuse)
bin="$target/$profile"

# Module micro-benchmarks: every [[bench]] target of Cargo.toml (harness = false programs that
# print their own results), built here, run by the harness with --micro.
micro="{}"
case " $* " in *" --micro "*|*" --only-micro "*)
  names=$(awk '/^\[\[bench\]\]/{b=1;next} b&&/^name *=/{gsub(/[" ]/,"");sub(/name=/,"");print;b=0}' "$repo/Cargo.toml")
  micro=""
  for n in $names; do
    (cd "$repo" && cargo bench --quiet --bench "$n" --no-run)
    micro="$micro${micro:+,}\"$n\":[\"cargo\",\"bench\",\"--quiet\",\"--manifest-path\",\"$repo/Cargo.toml\",\"--bench\",\"$n\"]"
  done
  # Plan generation against upstream mosaicml-streaming on the same inputs (bench/order_upstream.sh).
  if [ -x "$here/order_upstream.sh" ]; then
    micro="$micro${micro:+,}\"order_vs_upstream\":[\"env\",\"BENCH_VENV=$venv\",\"UPSTREAM_MAX=10000000\",\"$here/order_upstream.sh\",\"10000000\"]"
  fi
  micro="{$micro}" ;;
esac
bins=$(printf '{"shardfs":"%s","server":"%s","gen":"%s","null_fuse":"%s","micro":%s}' \
  "$bin/shardfs" "$bin/examples/bench-s3-server" "$bin/examples/bench-gen" \
  "$bin/examples/bench-null-fuse" "$micro")
exec python3 "$here/harness.py" --bins "$bins" --venv "$venv" "${args[@]}"
