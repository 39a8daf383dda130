#!/usr/bin/env bash
# Builds Mountpoint for S3 for the bench, once, into ~/.cache/shardfs-bench/bin/.
#
# Mountpoint's CLI cannot be built from crates.io (the `mountpoint-s3` crate there is a
# placeholder), but the library crate `mountpoint-s3-fs` 0.11.0 ships a read-only example,
# `mount_from_config`, that mounts a bucket from a JSON config and a CSV manifest of its objects.
# This script downloads that crate with cargo, builds the example as a stand-alone binary (so the
# crate's dev-dependencies, the whole AWS SDK, are not compiled) and installs it as
# ~/.cache/shardfs-bench/bin/mountpoint-from-config. bench/harness.py uses it for the
# `mountpoint` system. Nothing of Mountpoint goes into this repository.
#
# Needs cmake, clang (libclang-dev), pkg-config and libfuse-dev (installed with apt-get when
# missing). It takes about 35 minutes on 2 cores; do not run it while benchmarking.
set -euo pipefail
version=0.11.0
cache="${BENCH_CACHE:-$HOME/.cache/shardfs-bench}"
out="$cache/bin/mountpoint-from-config"
if [ -x "$out" ] && [ "${1:-}" != "--force" ]; then
  echo "build_mountpoint.sh: $out exists (--force rebuilds)"
  exit 0
fi

missing=()
command -v cmake >/dev/null 2>&1 || missing+=(cmake)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
pkg-config --exists fuse 2>/dev/null || missing+=(libfuse-dev)
# bindgen loads libclang itself (libclang.so or libclang-N.so); libclang-cpp does not do.
compgen -G '/usr/lib/llvm-*/lib/libclang.so*' >/dev/null ||
  compgen -G '/usr/lib/llvm-*/lib/libclang-[0-9]*.so*' >/dev/null || missing+=(libclang-dev)
if [ "${#missing[@]}" -gt 0 ]; then
  sudo=()
  [ "$(id -u)" -ne 0 ] && sudo=(sudo)
  echo "build_mountpoint.sh: installing ${missing[*]} (apt-get)" >&2
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi

work="$cache/mountpoint-build"
mkdir -p "$work/fetch" "$cache/bin"
# 1. Download the crate's source through cargo (the registry is the only network we have).
cd "$work/fetch"
cat > Cargo.toml <<EOF
[package]
name = "fetch-mountpoint"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
mountpoint-s3-fs = "=$version"
EOF
mkdir -p src && echo 'fn main() {}' > src/main.rs
cargo fetch --quiet
src=$(cargo metadata --format-version 1 --quiet | python3 -c '
import json, sys
meta = json.load(sys.stdin)
print(next(p["manifest_path"] for p in meta["packages"] if p["name"] == "mountpoint-s3-fs"))')
src=$(dirname "$src")

# 2. The example as a binary of its own, with the crate's own lock file for the same versions.
cd "$work"
rm -rf app && mkdir -p app/src
cp "$src/examples/mount_from_config.rs" app/src/main.rs
cp "$src/Cargo.lock" app/Cargo.lock
dep() { # the version requirement of a dependency in the crate's Cargo.toml
  awk -v want="[dependencies.$1]" '$0==want{f=1;next} f&&/^version/{gsub(/[" ]/,"");sub(/version=/,"");print;exit}' "$src/Cargo.toml"
}
cat > app/Cargo.toml <<EOF
[package]
name = "mountpoint-from-config"
version = "$version"
edition = "2024"
publish = false

[dependencies]
mountpoint-s3-fs = { version = "=$version", features = ["manifest", "event_log"] }
mountpoint-s3-client = "$(dep mountpoint-s3-client)"
anyhow = "$(dep anyhow)"
clap = { version = "$(dep clap)", features = ["derive"] }
nix = { version = "$(dep nix)", default-features = false, features = ["signal", "process"] }
serde = { version = "$(dep serde)", features = ["derive"] }
serde_json = "$(dep serde_json)"
tempfile = "$(dep tempfile)"
tracing = "$(dep tracing)"
EOF
cd app
cargo build --release --quiet
install -m 0755 target/release/mountpoint-from-config "$out"
echo "build_mountpoint.sh: installed $out"
