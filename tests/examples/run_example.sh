#!/usr/bin/env bash
# examples.toy-worker: what a user outside this repository does. Installs this
# build (cmake --install) into a fresh prefix, builds examples/toy-worker
# against it with find_package(ddp_worker), runs it with the installed
# ddp-launch on 2 ranks, and checks that DDP trained the toy model.
#   run_example.sh BUILD_DIR EXAMPLE_SOURCE WORK_DIR [cmake args for the example...]
# The cmake args must put WORK_DIR/prefix on CMAKE_PREFIX_PATH, with the
# LibTorch this build used (tests/examples/CMakeLists.txt).
set -euo pipefail
. "$(dirname "$0")/install_and_build.sh"
work=$3
install_and_build "$@"
out=$("$work/prefix/bin/ddp-launch" --standalone --nproc_per_node=2 "$work/build/toy-worker" 30 2>&1) ||
  { echo "$out"; echo "run_example: toy-worker failed under ddp-launch" >&2; exit 1; }
echo "$out"
# Rank 0's line: "toy-worker: world 2, device cpu, loss A -> B, w W, b B".
line=$(grep '^toy-worker: world 2,' <<<"$out") || { echo "run_example: no result line from rank 0" >&2; exit 1; }
read -r first last w b < <(sed -E 's/.*loss ([^ ]+) -> ([^,]+), w ([^,]+), b (.+)/\1 \2 \3 \4/' <<<"$line")
# Fitting y = 3x - 1: the loss falls by 100x and the weights land near (3, -1).
awk -v f="$first" -v l="$last" -v w="$w" -v b="$b" 'BEGIN {
  ok = (l < f / 100) && (w > 2.9 && w < 3.1) && (b > -1.1 && b < -0.9)
  if (!ok) { printf "run_example: did not learn y = 3x - 1: loss %s -> %s, w %s, b %s\n", f, l, w, b; exit 1 }
}'
