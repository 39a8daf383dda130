#!/usr/bin/env bash
# By hand (not in CI: it needs the container image and a gRPC client venv): runs `shardfs csi`
# from the image in podman the way the DaemonSet does (hostPID, privileged, the host's
# /sys/fs/cgroup at /host/sys/fs/cgroup, a kubelet folder with shared propagation), stages and
# publishes a volume of examples/tiny, removes the container with `podman rm -f` (the runtime
# kills the container's cgroup), checks that the volume still reads, then lets a plugin in a new
# container unpublish and unstage it.
#   bash packaging/build.sh image && bash tests/csi_sanity/container_restart.sh
# CONTROL=1 runs the plugin without --host-cgroupfs and expects the daemon to die with it.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | sed -n 1p)
venv=${XDG_CACHE_HOME:-$HOME/.cache}/shardfs-csi-sanity-venv
[ -x "$venv/bin/python" ] || { python3 -m venv "$venv"; "$venv/bin/pip" install -q grpcio grpcio-tools; }
work=$(mktemp -d /tmp/shardfs-ctr.XXXXXX)
podman=(podman --cgroup-manager=cgroupfs)
say() { echo "== $*"; }
cleanup() {
  rc=$?
  if [ $rc != 0 ]; then
    for c in shardfs-csi-a shardfs-csi-b; do "${podman[@]}" logs "$c" 2>&1 | tail -15 | sed "s/^/$c: /" || true; done
  fi
  "${podman[@]}" rm -f --ignore shardfs-csi-a >/dev/null 2>&1 || true
  "${podman[@]}" rm -f --ignore shardfs-csi-b >/dev/null 2>&1 || true
  grep -o " $work[^ ]*" /proc/self/mountinfo | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

"$venv/bin/python" -m grpc_tools.protoc -Iproto --python_out="$work" --grpc_python_out="$work" proto/csi.proto
cat >"$work/kubelet.py" <<'PY'
import sys, grpc, csi_pb2 as pb, csi_pb2_grpc as rpc
sock, op, vol, staging, target = sys.argv[1:6]
ctx = dict(x.split("=", 1) for x in sys.argv[6:])
node = rpc.NodeStub(grpc.insecure_channel(f"unix://{sock}", options=[("grpc.default_authority", "localhost")]))
M = pb.VolumeCapability.AccessMode
cap = pb.VolumeCapability(mount=pb.VolumeCapability.MountVolume(), access_mode=M(mode=M.SINGLE_NODE_READER_ONLY))
if op == "stage":
    node.NodeStageVolume(pb.NodeStageVolumeRequest(volume_id=vol, staging_target_path=staging, volume_capability=cap, volume_context=ctx))
elif op == "publish":
    node.NodePublishVolume(pb.NodePublishVolumeRequest(volume_id=vol, staging_target_path=staging, target_path=target, volume_capability=cap, readonly=True, volume_context=ctx))
elif op == "unpublish":
    node.NodeUnpublishVolume(pb.NodeUnpublishVolumeRequest(volume_id=vol, target_path=target))
elif op == "unstage":
    node.NodeUnstageVolume(pb.NodeUnstageVolumeRequest(volume_id=vol, staging_target_path=staging))
PY
"${podman[@]}" load -q -i packaging/out/shardfs-image.tar >/dev/null

kubelet=$work/kubelet
mkdir -p "$kubelet/plugins/csi.shardfs.dev" "$work/cache" "$work/state"
mount --bind "$kubelet" "$kubelet" && mount --make-rshared "$kubelet"
staging=$kubelet/plugins/kubernetes.io/csi/csi.shardfs.dev/pv-1/globalmount
target=$kubelet/pods/pod-1/volumes/kubernetes.io~csi/train/mount
mkdir -p "$staging"
sock=$kubelet/plugins/csi.shardfs.dev/csi.sock
# This sandbox hides PID 1's namespaces; in a cluster the defaults (/proc/1/ns/…) are right.
hostns=/proc/$$/ns/cgroup

escape=(--host-cgroupfs /host/sys/fs/cgroup --host-cgroup-namespace "$hostns" --host-network-namespace "/proc/$$/ns/net")
[ "${CONTROL:-0}" = 1 ] && escape=()
start_plugin() { # NAME
  rm -f "$sock"
  "${podman[@]}" run -d --name "$1" --runtime runc --network none --pid host --privileged \
    -v "$kubelet:$kubelet:rshared" -v "$repo/examples/tiny:/data:ro" \
    -v "$work/cache:/var/cache/shardfs" -v "$work/state:/var/lib/shardfs-csi" \
    -v /sys/fs/cgroup:/host/sys/fs/cgroup \
    "shardfs:$version" csi --endpoint "unix://$sock" --node-id node-a \
    "${escape[@]}" --log-level info >/dev/null
  for _ in $(seq 100); do [ -S "$sock" ] && return 0; sleep 0.1; done
  "${podman[@]}" logs "$1" >&2; return 1
}
call() { (cd "$work" && "$venv/bin/python" kubelet.py "$sock" "$@"); }

start_plugin shardfs-csi-a
call stage pv-1 "$staging" "" source=/data shuffle=true
call publish pv-1 "$staging" "$target" source=/data shuffle=true
pid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$target/.shardfs/status.json")
[ -s "$target/samples/00000000.text.txt" ]
say "published; daemon pid $pid in cgroup $(grep '^0::' /proc/$pid/cgroup)"
ctr_pid=$("${podman[@]}" inspect -f '{{.State.Pid}}' shardfs-csi-a)
say "plugin pid $ctr_pid in cgroup $(grep memory /proc/$ctr_pid/cgroup)"
"${podman[@]}" rm -f shardfs-csi-a >/dev/null
[ -d "/proc/$ctr_pid" ] && { echo "the plugin survived podman rm -f" >&2; exit 1; }
if [ "${CONTROL:-0}" = 1 ]; then
  sleep 0.5
  [ -d "/proc/$pid" ] && { echo "FAIL (control): the daemon outlived its container without --host-cgroupfs" >&2; exit 1; }
  say "control: without --host-cgroupfs the daemon died with the container"
  echo PASS; exit 0
fi
[ -d "/proc/$pid" ] || { echo "FAIL: the daemon died with the container" >&2; exit 1; }
n=$(ls "$target/rank-0/epoch-0" | wc -l)
cat "$target"/rank-0/epoch-0/* >/dev/null
say "container removed; daemon $pid alive; $n files of rank-0/epoch-0 read through the published path"
start_plugin shardfs-csi-b
call publish pv-1 "$staging" "$target" source=/data shuffle=true
call unpublish pv-1 "" "$target"
call unstage pv-1 "$staging" ""
for _ in $(seq 100); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
[ -d "/proc/$pid" ] && { echo "FAIL: daemon $pid outlived the unstage" >&2; exit 1; }
grep -q " $staging " /proc/self/mountinfo && { echo "FAIL: still staged" >&2; exit 1; }
say "a plugin in a new container re-adopted, unpublished and unstaged the volume; daemon exited"
"${podman[@]}" logs shardfs-csi-b 2>&1 | grep -i "re-adopted" || true
echo PASS
