#!/usr/bin/env bash
# Proves that each artifact of packaging/build.sh installs on this machine and mounts the bundled
# dataset (examples/tiny):
#   deb    apt-get install ./shardfs_*.deb; an fstab line (temporary file) mounted with
#          `mount -T FSTAB MOUNTPOINT` and `mount -a -T FSTAB`; read a sample; `umount` and
#          `shardfs unmount`; `dpkg -r` then `dpkg -P` leave none of the package's files behind.
#   wheel  pip install into a fresh venv; `shardfs` from that venv's PATH inspects and mounts.
#   image  podman loads the OCI archive and runs it with /dev/fuse: the container mounts the
#          dataset, and the mount is read from inside the container; its CA bundle is there,
#          and https from the container checks certificates against it.
#   arm64  (with SHARDFS_PACKAGING_ARM64=1, which also builds it) the aarch64 binary is static
#          and prints its --version under qemu-user; its image archive says arm64.
# Needs root (dpkg, mount, podman). Prints each step's seconds. Usage: bash packaging/test.sh
# (SHARDFS_PACKAGING_REUSE=1 skips the build when packaging/out already holds the artifacts).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
out=$repo/packaging/out
t0=$(date +%s)
step_t=$t0
say() { local now; now=$(date +%s); printf '== [%s s, step %s s] %s\n' "$((now - t0))" "$((now - step_t))" "$*" >&2; step_t=$now; }
fail() { echo "packaging/test.sh: FAILED: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || fail "needs root (dpkg -i, mount, podman)"
export DEBIAN_FRONTEND=noninteractive

arm64=${SHARDFS_PACKAGING_ARM64:-0}
if [ "${SHARDFS_PACKAGING_REUSE:-0}" = 1 ] && ls "$out"/*.deb "$out"/*.whl "$out"/shardfs-image.tar >/dev/null 2>&1; then
  say "reusing packaging/out"
else
  bash packaging/build.sh
  say "built every artifact"
fi
if [ "$arm64" = 1 ] && ! { [ "${SHARDFS_PACKAGING_REUSE:-0}" = 1 ] && [ -x "$out/arm64/shardfs" ]; }; then
  bash packaging/build.sh arm64
  say "built the arm64 binary and image"
fi
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)

scratch=$(mktemp -d /tmp/shardfs-pkgtest.XXXXXX)
# One name per call: podman 4.3's `rm -f a b` removes nothing (and exits 0) when b does not exist.
remove_containers() {
  for c in shardfs-pkgtest shardfs-pkgtls; do
    podman --cgroup-manager=cgroupfs rm -f -t 0 "$c" >/dev/null 2>&1 || true
  done
}
cleanup() {
  for m in "$scratch"/mnt*; do mountpoint -q "$m" 2>/dev/null && umount -l "$m"; done
  remove_containers
  rm -rf "$scratch"
}
trap cleanup EXIT
expected=$scratch/expected.txt
# What sample 0's text column holds, straight from the dataset (no mount involved).
"$out/shardfs" cat examples/tiny 0 --column text >"$expected"
[ -s "$expected" ] || fail "shardfs cat gave nothing"

# --- arm64 -----------------------------------------------------------------------------------------------
if [ "$arm64" = 1 ]; then
command -v qemu-aarch64-static >/dev/null 2>&1 || command -v qemu-aarch64 >/dev/null 2>&1 \
  || apt-get install -y -qq qemu-user-static >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq qemu-user-static >/dev/null; }
qemu=$(command -v qemu-aarch64-static || command -v qemu-aarch64)
kind=$(file -b "$out/arm64/shardfs")
grep -q "ARM aarch64" <<<"$kind" && grep -q "statically linked\|static-pie linked" <<<"$kind" || fail "the arm64 binary is not a static aarch64 executable: $kind"
v=$("$qemu" "$out/arm64/shardfs" --version) || fail "the arm64 binary did not run under $qemu"
grep -q "^shardfs $version (commit " <<<"$v" || fail "arm64 shardfs --version: $v"
arch=$(tar -xOf "$out/shardfs-image-arm64.tar" index.json | python3 -c 'import json,sys; print(json.load(sys.stdin)["manifests"][0]["digest"].split(":")[1])' | xargs -I{} tar -xOf "$out/shardfs-image-arm64.tar" blobs/sha256/{} | python3 -c 'import json,sys; print(json.load(sys.stdin)["config"]["digest"].split(":")[1])' | xargs -I{} tar -xOf "$out/shardfs-image-arm64.tar" blobs/sha256/{} | python3 -c 'import json,sys; print(json.load(sys.stdin)["architecture"])')
[ "$arch" = arm64 ] || fail "shardfs-image-arm64.tar has architecture '$arch'"
say "arm64: static aarch64 binary ($(stat -c %s "$out/arm64/shardfs") bytes) runs under qemu-user: $v; image arch $arch"
fi

# --- deb ----------------------------------------------------------------------------------------------
deb=$(ls "$out"/shardfs_"$version"_amd64.deb)
dpkg -s shardfs >/dev/null 2>&1 && { dpkg -P shardfs >/dev/null; }
apt-get install -y -qq "$deb" >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq "$deb" >/dev/null; }
files=$(dpkg -L shardfs | sort)
for f in /usr/bin/shardfs /sbin/mount.shardfs /usr/share/man/man1/shardfs-mount.1.gz \
         /usr/share/bash-completion/completions/shardfs /lib/systemd/system/shardfs@.service; do
  grep -qx "$f" <<<"$files" || fail "the package lacks $f"
done
grep -q "^shardfs $version (commit " <<<"$(/usr/bin/shardfs --version)" || fail "shardfs --version: $(/usr/bin/shardfs --version)"
man -w shardfs-mount >/dev/null 2>&1 || [ -e /usr/share/man/man1/shardfs-mount.1.gz ]
say "deb installed ($(stat -c %s "$deb") bytes): $(/usr/bin/shardfs --version)"

mnt=$scratch/mnt-deb
mkdir -p "$mnt"
fstab=$scratch/fstab
printf '%s %s shardfs cache_dir=%s,shuffle,epochs=2,_netdev,nofail,x-systemd.automount,x-systemd.mount-timeout=30 0 0\n' \
  "$repo/examples/tiny" "$mnt" "$scratch/cache-deb" >"$fstab"
mount -T "$fstab" "$mnt"
mountpoint -q "$mnt" || fail "mount -T did not mount $mnt"
grep -q " $mnt fuse.shardfs " /proc/mounts || fail "not a fuse.shardfs mount: $(grep " $mnt " /proc/mounts)"
cmp "$mnt/samples/00000000.text.txt" "$expected" || fail "sample 0 through the fstab mount differs"
[ "$(ls "$mnt/rank-0/epoch-1" | wc -l)" -gt 0 ] || fail "epoch-1 is empty"
umount "$mnt"
mountpoint -q "$mnt" && fail "umount left $mnt mounted"
mount -a -T "$fstab"
mountpoint -q "$mnt" || fail "mount -a -T did not mount $mnt"
cmp "$mnt/samples/00000000.text.txt" "$expected" || fail "sample 0 after mount -a differs"
/usr/bin/shardfs unmount "$mnt" || fail "shardfs unmount reported a failure"
mountpoint -q "$mnt" && fail "shardfs unmount left $mnt mounted"
pgrep -f "shardfs mount .*$mnt" >/dev/null && fail "a daemon for $mnt is still running"
say "fstab: mount -T, umount, mount -a -T, shardfs unmount"

dpkg -r shardfs >/dev/null
left=$(while read -r f; do [ -f "$f" ] && echo "$f"; done <<<"$files" || true)
[ -z "$left" ] || fail "dpkg -r left files behind: $left"
dpkg -s shardfs >/dev/null 2>&1 && dpkg -P shardfs >/dev/null
dpkg -s shardfs >/dev/null 2>&1 && fail "dpkg -P did not purge shardfs"
say "dpkg -r and dpkg -P left nothing behind"

# --- wheel ----------------------------------------------------------------------------------------------
whl=$(ls "$out"/shardfs-"$version"-*.whl)
python3 -m venv "$scratch/venv"
"$scratch/venv/bin/pip" install -q --disable-pip-version-check --no-index "$whl"
grep -qx "$scratch/venv/bin/shardfs" <<<"$(PATH="$scratch/venv/bin:$PATH" command -v shardfs)" || fail "the wheel put no shardfs on the venv's PATH"
grep -q "^samples *48$" <<<"$(PATH="$scratch/venv/bin:$PATH" shardfs inspect examples/tiny)" || fail "shardfs inspect from the wheel"
mnt=$scratch/mnt-wheel
mkdir -p "$mnt"
PATH="$scratch/venv/bin:$PATH" shardfs mount examples/tiny "$mnt" --cache-dir "$scratch/cache-wheel"
cmp "$mnt/samples/00000000.text.txt" "$expected" || fail "sample 0 through the wheel's mount differs"
PATH="$scratch/venv/bin:$PATH" shardfs unmount "$mnt"
say "wheel $(basename "$whl") ($(stat -c %s "$whl") bytes) installs into a fresh venv, inspects and mounts"

# --- container image -------------------------------------------------------------------------------------
missing=()
for p in podman runc; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
fi
conf=/etc/containers/containers.conf
if ! grep -q '^default_ulimits *= *\[\]' "$conf" 2>/dev/null; then
  mkdir -p /etc/containers
  printf '[containers]\ndefault_ulimits = []\n' >>"$conf"
fi
podman=(podman --cgroup-manager=cgroupfs)
"${podman[@]}" load -q -i "$out/shardfs-image.tar" >/dev/null
"${podman[@]}" image exists "localhost/shardfs:$version" || "${podman[@]}" image exists "shardfs:$version" || fail "podman load did not give shardfs:$version"
say "image loaded ($(stat -c %s "$out/shardfs-image.tar") bytes)"
# A run killed before its cleanup may have left the containers behind.
remove_containers
"${podman[@]}" run -d --name shardfs-pkgtest --runtime runc --network none \
  --device /dev/fuse --cap-add SYS_ADMIN --security-opt apparmor=unconfined \
  -v "$repo/examples/tiny:/data:ro" --tmpfs /cache \
  "shardfs:$version" mount /data /mnt --foreground --cache-dir /cache --shuffle >/dev/null
# Inside the container: wait for the mount, then read index.json through it.
ok=0
for _ in $(seq 1 100); do
  if grep -q "^samples *48$" <<<"$("${podman[@]}" exec shardfs-pkgtest /usr/bin/shardfs inspect /mnt 2>/dev/null)"; then ok=1; break; fi
  sleep 0.1
done
[ $ok = 1 ] || { "${podman[@]}" logs shardfs-pkgtest >&2 || true; fail "the container's mount did not answer"; }
# A sample file, read inside the container's mount namespace (its root through /proc).
pid=$("${podman[@]}" inspect -f '{{.State.Pid}}' shardfs-pkgtest)
cmp "/proc/$pid/root/mnt/samples/00000000.text.txt" "$expected" || fail "sample 0 through the container's mount differs"
[ "$(ls "/proc/$pid/root/mnt/rank-0/epoch-0" | wc -l)" -gt 0 ] || fail "the container's rank-0/epoch-0 is empty"
"${podman[@]}" stop -t 10 shardfs-pkgtest >/dev/null
code=$("${podman[@]}" inspect -f '{{.State.ExitCode}}' shardfs-pkgtest)
[ "$code" = 0 ] || { "${podman[@]}" logs shardfs-pkgtest >&2 || true; fail "the container exited with $code after SIGTERM"; }
say "image: the container mounted examples/tiny, read through it, unmounted on SIGTERM (exit 0)"

# https from the container. The image must carry a CA bundle where the binary looks for it
# (an image from scratch has none, and every https store would be refused). Then a TLS server
# on the host's loopback with the test certificate of tests/tls: with the test CA mounted in
# place of the image's bundle, a request from the container must reach it (the binary trusts
# the bundle at that path); with the image's own bundle it must be refused as untrusted.
"${podman[@]}" create --name shardfs-pkgtls "shardfs:$version" >/dev/null
roots=$("${podman[@]}" export shardfs-pkgtls | tar -xOf - --wildcards '*etc/ssl/certs/ca-certificates.crt' | grep -c "BEGIN CERTIFICATE" || true)
"${podman[@]}" rm shardfs-pkgtls >/dev/null
[ "${roots:-0}" -ge 50 ] || fail "the image's /etc/ssl/certs/ca-certificates.crt holds ${roots:-no} certificates"
tls=$(mktemp -d)
cat >"$tls/server.py" <<'PY'
import base64, http.server, ssl, sys
tls, certs = sys.argv[1], sys.argv[2]
def pem(der, kind):
    b = base64.encodebytes(open(der, "rb").read()).decode()
    return f"-----BEGIN {kind}-----\n{b}-----END {kind}-----\n"
open(f"{tls}/cert.pem", "w").write(pem(f"{certs}/cert.der", "CERTIFICATE"))
open(f"{tls}/key.pem", "w").write(pem(f"{certs}/key.pk8.der", "PRIVATE KEY"))
class NotFound(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        open(f"{tls}/requests", "a").write(self.path + "\n")
        self.send_response(404); self.send_header("content-length", "0"); self.end_headers()
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(f"{tls}/cert.pem", f"{tls}/key.pem")
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
open(f"{tls}/port", "w").write(str(srv.server_address[1]))
srv.serve_forever()
PY
python3 "$tls/server.py" "$tls" "$repo/tests/tls" 2>"$tls/server.log" &
server=$!
trap 'kill $server 2>/dev/null || true; rm -rf "$tls"; cleanup' EXIT
for _ in $(seq 1 50); do [ -s "$tls/port" ] && break; sleep 0.1; done
[ -s "$tls/port" ] || fail "the TLS test server did not start: $(cat "$tls/server.log")"
endpoint="https://127.0.0.1:$(cat "$tls/port")"
inspect_tls() {
  "${podman[@]}" run --rm --runtime runc --network host "$@" "shardfs:$version" \
    inspect s3://b/ds --no-sign-request --endpoint-url "$endpoint" 2>&1 || true
}
text=$(inspect_tls -v "$repo/tests/tls/ca.pem:/etc/ssl/certs/ca-certificates.crt:ro")
grep -q "index.json" "$tls/requests" 2>/dev/null || fail "with the test CA as its bundle, the container's request did not reach the TLS server: $text"
grep -q "not found" <<<"$text" || fail "expected 'not found' from the TLS server: $text"
text=$(inspect_tls)
grep -q "TLS certificate is not trusted" <<<"$text" || fail "with the image's own bundle, the test certificate was not refused: $text"
kill $server 2>/dev/null || true; rm -rf "$tls"; trap cleanup EXIT
remove_containers
for c in shardfs-pkgtest shardfs-pkgtls; do
  ! "${podman[@]}" container exists "$c" || fail "container $c is still there after its removal"
done
say "image: carries $roots CA certificates; https from the container trusts that bundle (and refuses a certificate it does not list)"
say "packaging/test.sh: all artifacts install and mount"
