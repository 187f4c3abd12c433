#!/usr/bin/env bash
# examples.regression: the third training program on the loop library, built
# as a user outside this repository builds it. Installs this build
# (cmake --install) into a fresh prefix, builds examples/regression against it
# with find_package(ddp_worker), trains it with the installed ddp-launch on 2
# ranks, and checks what the loop did with the program's own loss, metric
# and "lower is better": the test loss fell, the best epoch is the one with
# the lowest test loss, and metrics.jsonl carries the program's mae.
#   run_regression.sh BUILD_DIR EXAMPLE_SOURCE WORK_DIR [cmake args for the example...]
set -euo pipefail
. "$(dirname "$0")/install_and_build.sh"
work=$3
install_and_build "$@"
ck=$work/ck
out=$(OMP_NUM_THREADS=1 "$work/prefix/bin/ddp-launch" --standalone --nproc_per_node=2 "$work/build/regression" \
        --epochs 4 --checkpoint_dir "$ck" 2>&1) ||
  { echo "$out"; echo "run_regression: regression failed under ddp-launch" >&2; exit 1; }
echo "$out"
fail() { echo "run_regression: $*" >&2; exit 1; }
grep -q '^regression: world size 2, ' <<<"$out" || fail "no start line naming the program and world size 2"
[[ $(wc -l < "$ck/metrics.jsonl") == 4 ]] || fail "metrics.jsonl has not 4 lines"
# Each epoch's test_loss and mae; the best (lowest) test loss's epoch.
read -r first last best_epoch mae_ok < <(python3 - "$ck/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
losses = [r["test_loss"] for r in rows]
best = min(range(len(rows)), key=lambda i: losses[i]) + 1
mae_ok = all(0 < r["mae"] < 10 and r["eval_samples"] == 1024 for r in rows)
print(losses[0], losses[-1], best, int(mae_ok))
PY
)
[[ $mae_ok == 1 ]] || fail "metrics.jsonl lacks a sane mae or does not count all 1024 test samples"
awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < f / 2) }' || fail "test loss did not fall by half: $first -> $last"
grep -q "^best test loss: [0-9.]* in epoch: $best_epoch, saved in: $ck/epoch_$best_epoch.pt\$" <<<"$out" ||
  fail "no 'best test loss ... in epoch: $best_epoch' line (lower is better)"
grep -q '^best mae: ' <<<"$out" || fail "no best mae line"
! grep -qi 'f1\|accuracy' <<<"$out" || fail "classifier metrics in a regression's output"
echo "run_regression: ok (test loss $first -> $last, best epoch $best_epoch)"
