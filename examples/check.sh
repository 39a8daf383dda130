#!/usr/bin/env bash
# Checks that the loaders the docs show work as written, with the real libraries, against a
# real mount of examples/tiny:
#   1. each framework's example (examples/pytorch_dataset.py, tensorflow_rank_folder.py,
#      jax_rank_folder.py) reads every rank folder of two epochs of a shuffled two-rank mount in
#      exactly the order `shardfs order` prints for the same options, decoding every JPEG
#      (16x16x3);
#   2. every ```python block of README.md and docs/TRAINING.md runs as written (no RANK
#      variable, as outside torchrun) against examples/tiny mounted at /mnt/train, the path the
#      blocks use.
#
#   bash examples/check.sh [FRAMEWORK...]     FRAMEWORK: jax, tensorflow, torch (default: all)
#
# The libraries go into a cached venv (${SHARDFS_LOADERS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/
# shardfs-loaders-venv}), installed from PyPI when missing: jax[cpu] is about 100 MB,
# tensorflow-cpu about 250 MB, torch (with its CUDA wheels) a few GB. A block that needs a
# framework left out of this run is listed as NOT RUN at the end: only a run of every framework
# (no argument) checks everything. Needs root or /dev/fuse access, like any mount.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

say() { printf '== %s\n' "$*" >&2; }
fail() { printf 'examples/check.sh: FAIL: %s\n' "$*" >&2; exit 1; }

frameworks=("$@")
[ "${#frameworks[@]}" -gt 0 ] || frameworks=(jax tensorflow torch)
declare -A pip_name=([jax]="jax[cpu]" [tensorflow]="tensorflow-cpu" [torch]="torch")
declare -A module=([jax]=jax [tensorflow]=tensorflow [torch]=torch)
declare -A example=([jax]=jax_rank_folder.py [tensorflow]=tensorflow_rank_folder.py
                    [torch]=pytorch_dataset.py)
for f in "${frameworks[@]}"; do
  [ -n "${pip_name[$f]:-}" ] || fail "unknown framework $f (jax, tensorflow, torch)"
done

venv="${SHARDFS_LOADERS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/shardfs-loaders-venv}"
[ -x "$venv/bin/python" ] || { say "creating the loaders venv in $venv"; python3 -m venv "$venv"; }
py="$venv/bin/python"
install_if_missing() { # MODULE PIP_NAME
  if ! "$py" -c "import $1" >/dev/null 2>&1; then
    say "installing $2 into $venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "$2"
  fi
}
install_if_missing numpy numpy
install_if_missing PIL pillow
for f in "${frameworks[@]}"; do install_if_missing "${module[$f]}" "${pip_name[$f]}"; done

say "building shardfs"
cargo build --release --locked -q
bin="$repo/target/release/shardfs"
export TF_CPP_MIN_LOG_LEVEL=2 JAX_PLATFORMS=cpu

scratch=$(mktemp -d /tmp/shardfs-loaders.XXXXXX)
mounted=()
cleanup() {
  for m in "${mounted[@]}"; do "$bin" unmount "$m" >/dev/null 2>&1 || true; done
  rm -rf "$scratch"
}
trap cleanup EXIT

# --- 1. each framework's example reads what `shardfs order` says, image by image ------------
opts=(--ranks-per-node 2 --shuffle --workers 2 --batch-size 4)
mnt="$scratch/mnt"
mkdir -p "$mnt"
"$bin" mount examples/tiny "$mnt" --cache-dir "$scratch/cache" "${opts[@]}" --epochs 2 >/dev/null
mounted+=("$mnt")
for f in "${frameworks[@]}"; do
  for rank in 0 1; do
    for epoch in 0 1; do
      want=$("$bin" order examples/tiny "${opts[@]}" --rank "$rank" --epoch "$epoch" |
        awk '{print $1 " 16x16x3"}')
      got=$(cd examples && "$py" "${example[$f]}" "$mnt" "$rank" "$epoch" 2>"$scratch/err") ||
        fail "$f example, rank $rank epoch $epoch: $(tail -5 "$scratch/err")"
      [ -n "$want" ] || fail "shardfs order printed nothing for rank $rank epoch $epoch"
      [ "$got" = "$want" ] || fail "$f example, rank $rank epoch $epoch: read
$got
but shardfs order says
$want"
    done
  done
  say "PASS $f: ${example[$f]} read rank 0 and 1, epochs 0 and 1, in shardfs order's order ($(wc -l <<<"$want") JPEGs per folder)"
done
"$bin" unmount "$mnt"
mounted=()

# --- 2. the docs' Python blocks, as written, against /mnt/train ---------------------------------
docs_mnt=/mnt/train
if grep -q " $docs_mnt " /proc/mounts; then
  fail "$docs_mnt is already mounted: unmount it first"
fi
mkdir -p "$docs_mnt"
"$bin" mount examples/tiny "$docs_mnt" --cache-dir "$scratch/docs-cache" >/dev/null
mounted+=("$docs_mnt")
"$py" - "$scratch/blocks" README.md docs/TRAINING.md <<'PY'
import os, re, sys
out = sys.argv[1]
os.makedirs(out)
for doc in sys.argv[2:]:
    text = open(doc).read()
    for i, block in enumerate(re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)):
        name = f"{os.path.basename(doc).split('.')[0]}-{i}.py"
        open(os.path.join(out, name), "w").write(block)
PY
not_run=()
ran=0
for block in "$scratch"/blocks/*.py; do
  needs=""
  for f in jax tensorflow torch; do
    grep -Eq "^(import|from) ${module[$f]}|^import .*\b${module[$f]}\b" "$block" && needs="$f"
  done
  if [ -n "$needs" ] && [[ " ${frameworks[*]} " != *" $needs "* ]]; then
    not_run+=("$(basename "$block") (needs $needs)")
    continue
  fi
  # As outside torchrun: no RANK; the examples the blocks import sit next to them.
  (cd examples && env -u RANK -u WORLD_SIZE -u LOCAL_RANK PYTHONPATH="$repo/examples" "$py" "$block") \
    >"$scratch/out" 2>&1 ||
    fail "$(basename "$block") failed as written:
$(cat "$block")
---
$(tail -20 "$scratch/out")"
  ran=$((ran + 1))
  say "PASS $(basename "$block") ran as written"
done
[ "$ran" -gt 0 ] || [ "${#not_run[@]}" -gt 0 ] || fail "no python block found in README.md or docs/TRAINING.md"
say "passed: ${frameworks[*]}; $ran doc blocks ran as written"
if [ "${#not_run[@]}" -gt 0 ]; then
  say "NOT RUN (their framework was not selected): ${not_run[*]}"
fi
