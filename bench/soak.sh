#!/usr/bin/env bash
# The soak and fault run (bench/soak.py): builds shardfs, the bench S3 server and bench-gen,
# then reads a dataset through a server that injects faults, checking every byte.
#   bench/soak.sh            10 minutes, 64 readers, 4 ranks (release build)
#   bench/soak.sh --short    about a minute, 16 readers (as CI runs it)
# Other flags go to soak.py (--minutes, --readers, --fault-rate, ...).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
profile="${BENCH_PROFILE:-release}"
target="${CARGO_TARGET_DIR:-$repo/target}"
if [ "$profile" = debug ]; then cargo_profile=(--profile dev); else cargo_profile=(--profile "$profile"); fi
(cd "$repo" && cargo build --quiet "${cargo_profile[@]}" --bin shardfs \
  --example bench-s3-server --example bench-gen)
bin="$target/$profile"
bins=$(printf '{"shardfs":"%s","server":"%s","gen":"%s"}' \
  "$bin/shardfs" "$bin/examples/bench-s3-server" "$bin/examples/bench-gen")
exec python3 "$here/soak.py" --bins "$bins" "$@"
