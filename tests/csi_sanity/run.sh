#!/usr/bin/env bash
# Runs csi-sanity (github.com/kubernetes-csi/csi-test, v5.2.0) against `shardfs csi`: the Identity
# and Node suites, with a TEST-ONLY stub controller (stub_controller.py) on a second socket that
# creates volumes whose volume_context is `source: <tests/fixtures/mds/basic>`, so every publish
# mounts real data. Not part of CI: csi-sanity is not on a package registry. Build it with
#   git clone -b v5.2.0 https://github.com/kubernetes-csi/csi-test && cd csi-test &&
#   go build -mod=vendor -o /tmp/csi-sanity ./cmd/csi-sanity      # Debian's Go 1.19 works
# Usage: bash tests/csi_sanity/run.sh /path/to/csi-sanity [extra csi-sanity flags]   (as root)
# SHARDFS_BIN=target/release/shardfs uses that binary instead of building a debug one.
set -euo pipefail
cd "$(dirname "$0")/../.."
sanity=${1:?usage: run.sh /path/to/csi-sanity}
shift
venv=${XDG_CACHE_HOME:-$HOME/.cache}/shardfs-csi-sanity-venv
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import grpc, grpc_tools' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q grpcio grpcio-tools
fi
bin=${SHARDFS_BIN:-}
if [ -z "$bin" ]; then
  cargo build --locked -q
  bin=target/debug/shardfs
fi
work=$(mktemp -d /tmp/shardfs-csi-sanity.XXXXXX)
pids=()
cleanup() {
  set +e
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  { grep -o " $work[^ ]*" /proc/self/mountinfo || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
# The node plugin, advertising the (stub) controller service only for this run.
"$bin" csi --endpoint "unix://$work/node.sock" --node-id sanity-node \
  --cache-root "$work/cache" --state-dir "$work/state" --advertise-controller-service \
  --log-level info 2>"$work/plugin.log" &
pids+=($!)
"$venv/bin/python" tests/csi_sanity/stub_controller.py "unix://$work/controller.sock" >"$work/stub.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do [ -S "$work/node.sock" ] && [ -S "$work/controller.sock" ] && break; sleep 0.1; done
printf 'source: %s\n' "$PWD/tests/fixtures/mds/basic" >"$work/params.yaml"
set +e
"$sanity" --csi.endpoint "$work/node.sock" --csi.controllerendpoint "$work/controller.sock" \
  --csi.mountdir "$work/mnt" --csi.stagingdir "$work/staging" \
  --csi.testvolumeparameters "$work/params.yaml" \
  -ginkgo.focus='Node Service|Identity Service' -ginkgo.v "$@"
rc=$?
set -e
[ $rc -eq 0 ] || { echo "--- plugin log"; tail -50 "$work/plugin.log"; }
exit $rc
