#!/usr/bin/env bash
# Builds shardfs's installable artifacts into packaging/out/:
#   deb    shardfs_VERSION_amd64.deb        (apt-get install ./...; Depends: fuse3, ca-certificates)
#   image  shardfs-image.tar                (OCI archive of image shardfs:VERSION; podman/docker load)
#   wheel  shardfs-VERSION-py3-none-manylinux_2_17_x86_64....whl  (pip install; puts `shardfs` on PATH)
#   arm64  arm64/shardfs + shardfs-image-arm64.tar (the static aarch64 binary, cross-compiled,
#          and image shardfs:VERSION-arm64 for arm64 nodes)
# Usage: bash packaging/build.sh [deb] [image] [wheel] [arm64]   (no argument: deb, image, wheel;
#        arm64 only when asked for: the cross-build of every dependency takes minutes)
#
# All three carry one static binary (x86_64-unknown-linux-musl), built once into
# ${SHARDFS_MUSL_TARGET_DIR:-target-musl}. The script installs what it needs and is missing
# (apt: musl-tools, dpkg-dev, buildah, ca-certificates; rustup: the musl target; a cached venv with maturin).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
out=$repo/packaging/out
mkdir -p "$out"
t0=$(date +%s)
say() { printf '== [%s s] %s\n' "$(($(date +%s) - t0))" "$*" >&2; }

want=("$@")
[ ${#want[@]} -gt 0 ] || want=(deb image wheel)
for w in "${want[@]}"; do
  case "$w" in deb|image|wheel|arm64) ;; *) echo "packaging/build.sh: unknown artifact '$w' (deb, image, wheel, arm64)" >&2; exit 2 ;; esac
done
has() { local x; for x in "${want[@]}"; do [ "$x" = "$1" ] && return 0; done; return 1; }

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
triple=x86_64-unknown-linux-musl

apt_install() {
  local missing=() p
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  say "installing ${missing[*]} (apt-get)"
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
}

# --- the static binary -------------------------------------------------------------------------
# (skipped when only arm64 is asked for)
if has deb || has image || has wheel; then
  apt_install musl-tools
  grep -qx "$triple" <<<"$(rustup target list --installed 2>/dev/null)" || { say "rustup target add $triple"; rustup target add "$triple"; }
  export CARGO_TARGET_DIR=${SHARDFS_MUSL_TARGET_DIR:-$repo/target-musl}
  export CC_x86_64_unknown_linux_musl=musl-gcc
  # The packaged binary is stripped: skip the debug info the release profile keeps for profiling.
  export CARGO_PROFILE_RELEASE_DEBUG=0
  say "cargo build --release --target $triple"
  cargo build --locked --release --target "$triple"
  bin=$CARGO_TARGET_DIR/$triple/release/shardfs
  strip -o "$out/shardfs" "$bin"
  say "binary: $(stat -c %s "$out/shardfs") bytes, $(file -b "$out/shardfs" 2>/dev/null || echo static)"
fi

# --- deb ------------------------------------------------------------------------------------------
if has deb; then
  apt_install dpkg-dev
  root=$(mktemp -d)
  trap 'rm -rf "$root"' EXIT
  install -Dm0755 "$out/shardfs" "$root/usr/bin/shardfs"
  install -Dm0755 mount-helper/mount.shardfs "$root/sbin/mount.shardfs"
  "$out/shardfs" generate-man "$root/usr/share/man/man1"
  gzip -9n "$root"/usr/share/man/man1/*.1
  comp=$(mktemp -d)
  "$out/shardfs" generate-completions "$comp"
  install -Dm0644 "$comp/shardfs.bash" "$root/usr/share/bash-completion/completions/shardfs"
  install -Dm0644 "$comp/_shardfs" "$root/usr/share/zsh/vendor-completions/_shardfs"
  install -Dm0644 "$comp/shardfs.fish" "$root/usr/share/fish/vendor_completions.d/shardfs.fish"
  rm -rf "$comp"
  install -Dm0644 packaging/systemd/shardfs@.service "$root/lib/systemd/system/shardfs@.service"
  install -Dm0644 packaging/systemd/shardfs.env.example "$root/usr/share/doc/shardfs/examples/shardfs.env.example"
  for d in README.md docs/TRAINING.md docs/SEMANTICS.md; do
    install -Dm0644 "$d" "$root/usr/share/doc/shardfs/$(basename "$d")"
  done
  install -Dm0644 packaging/debian/copyright "$root/usr/share/doc/shardfs/copyright"
  mkdir -p "$root/DEBIAN"
  size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
  sed -e "s/@VERSION@/$version/" -e "s/@SIZE@/$size/" packaging/debian/control >"$root/DEBIAN/control"
  deb=$out/shardfs_${version}_amd64.deb
  dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
  rm -rf "$root"; trap - EXIT
  say "deb: $deb ($(stat -c %s "$deb") bytes)"
fi

# --- OCI images ------------------------------------------------------------------------------------
# make_image BINARY ARCH TAG OUTPUT
make_image() {
  local binary=$1 arch=$2 img=$3 tar=$4
  apt_install buildah ca-certificates
  local ctr
  ctr=$(buildah --storage-driver vfs from --arch "$arch" scratch)
  trap 'buildah --storage-driver vfs rm "$ctr" >/dev/null 2>&1 || true' EXIT
  # The whole root filesystem: the binary, minimal /etc, and empty /mnt, /tmp and /data for
  # mountpoints and datasets (no shell, no libc: the binary is static). The binary checks
  # https endpoints against the system's CA bundle, looked for where Debian keeps it; an image
  # from scratch has none, so it carries the build host's (the ca-certificates package's
  # Mozilla roots). Without it every https store (S3, GCS, Azure) would be refused.
  local rootfs
  rootfs=$(mktemp -d)
  install -Dm0755 "$binary" "$rootfs/usr/bin/shardfs"
  mkdir -p "$rootfs/etc" "$rootfs/mnt" "$rootfs/data" "$rootfs/tmp" "$rootfs/var/cache/shardfs"
  chmod 1777 "$rootfs/tmp"
  printf 'root:x:0:0:root:/:/usr/bin/shardfs\n' >"$rootfs/etc/passwd"
  printf 'root:x:0:\n' >"$rootfs/etc/group"
  install -Dm0644 /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
  buildah --storage-driver vfs copy "$ctr" "$rootfs/" / >/dev/null
  rm -rf "$rootfs"
  buildah --storage-driver vfs config \
    --arch "$arch" --os linux \
    --entrypoint '["/usr/bin/shardfs"]' --cmd '["--help"]' \
    --workingdir / \
    --label org.opencontainers.image.title=shardfs \
    --label org.opencontainers.image.version="$version" \
    --label org.opencontainers.image.description="MDS datasets from object storage as per-rank sample files (FUSE)" \
    "$ctr"
  buildah --storage-driver vfs commit -q "$ctr" "$img" >/dev/null
  buildah --storage-driver vfs rm "$ctr" >/dev/null; trap - EXIT
  rm -f "$tar"
  buildah --storage-driver vfs push -q "$img" "oci-archive:$tar:$img"
  say "image: $tar ($(stat -c %s "$tar") bytes), $img ($arch)"
}
if has image; then
  make_image "$out/shardfs" amd64 "shardfs:$version" "$out/shardfs-image.tar"
fi

# --- arm64: the static aarch64 binary (cross-compiled) and its image -------------------------------
if has arm64; then
  a64=aarch64-unknown-linux-musl
  export CARGO_TARGET_DIR=${SHARDFS_MUSL_TARGET_DIR:-$repo/target-musl}
  export CARGO_PROFILE_RELEASE_DEBUG=0
  apt_install gcc-aarch64-linux-gnu binutils-aarch64-linux-gnu
  grep -qx "$a64" <<<"$(rustup target list --installed 2>/dev/null)" || { say "rustup target add $a64"; rustup target add "$a64"; }
  # Rust's musl targets bring their own libc and start files; the cross gcc compiles the C
  # parts of dependencies and links.
  export CC_aarch64_unknown_linux_musl=aarch64-linux-gnu-gcc
  export AR_aarch64_unknown_linux_musl=aarch64-linux-gnu-ar
  export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=aarch64-linux-gnu-gcc
  say "cargo build --release --target $a64"
  cargo build --locked --release --target "$a64"
  mkdir -p "$out/arm64"
  aarch64-linux-gnu-strip -o "$out/arm64/shardfs" "$CARGO_TARGET_DIR/$a64/release/shardfs"
  say "arm64 binary: $(stat -c %s "$out/arm64/shardfs") bytes, $(file -b "$out/arm64/shardfs" 2>/dev/null || echo static)"
  make_image "$out/arm64/shardfs" arm64 "shardfs:$version-arm64" "$out/shardfs-image-arm64.tar"
fi

# --- wheel --------------------------------------------------------------------------------------------
if has wheel; then
  venv=${SHARDFS_PACKAGING_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/shardfs-packaging-venv}
  if [ ! -x "$venv/bin/maturin" ]; then
    say "preparing $venv (maturin, wheel)"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "maturin>=1.5,<2" "wheel>=0.42"
  fi
  rm -f "$out"/shardfs-*.whl
  wdir=$(mktemp -d)
  # maturin reuses the musl build above (same target dir, profile and target).
  "$venv/bin/maturin" build --locked --release --strip --target "$triple" --compatibility musllinux_1_2 \
    --out "$wdir" >/dev/null
  built=$(ls "$wdir"/*.whl)
  # The binary is fully static, so it runs on every glibc system too: tag the wheel manylinux
  # (2014 = glibc 2.17) beside musllinux, so pip on Debian, Ubuntu and RHEL accepts it.
  "$venv/bin/wheel" tags --remove \
    --platform-tag "manylinux_2_17_x86_64.manylinux2014_x86_64.musllinux_1_2_x86_64" "$built" >/dev/null
  mv "$wdir"/*.whl "$out/"
  rm -rf "$wdir"
  say "wheel: $(ls "$out"/shardfs-*.whl) ($(stat -c %s "$out"/shardfs-*.whl) bytes)"
fi
say "done: $(ls "$out" | tr '\n' ' ')"
