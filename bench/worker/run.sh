#!/usr/bin/env bash
# Worker runtime benchmark: per-step time of 2-process DDP against 2
# processes training the same model without synchronisation, DDP without
# overlap (one bucket), and allreduce throughput of ddp_worker vs raw
# ProcessGroupGloo. Prints markdown tables (paste into docs/worker-runtime.md).
#
#   bench/worker/run.sh [build-dir]      (default: build)
# Environment: NPROC (2), BATCH (64), HIDDEN (768), STEPS (30), REPS (2), MAX_MB (64).
set -euo pipefail
build=${1:-build}
bin=$build/bin
launch=$bin/ddp-launch
bench=$bin/ddp-worker-bench
for b in "$launch" "$bench"; do
  [[ -x $b ]] || { echo "run.sh: $b is not built (cmake --build $build --target ddp-launch ddp-worker-bench)" >&2; exit 2; }
done
nproc=${NPROC:-2} batch=${BATCH:-64} hidden=${HIDDEN:-768} steps=${STEPS:-30} reps=${REPS:-2}
cores=$(nproc --all)  # before OMP_NUM_THREADS: GNU nproc honours it
# One thread per process: the baseline and DDP runs then share the cores the
# same way (ddp-launch's default would also give cores / nproc).
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

run() { "$launch" --use_env --nproc_per_node="$nproc" "$bench" "$@" 2>/dev/null | grep '^|'; }

echo "machine: $cores cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), OMP_NUM_THREADS=$OMP_NUM_THREADS, load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| mode | processes | parameters | batch / rank | median step (ms) | vs local | buckets |"
echo "|---|---|---|---|---|---|---|"
for ((rep = 1; rep <= reps; rep++)); do
  run step batch="$batch" hidden="$hidden" steps="$steps"
done
echo
echo "| message | ddp_worker allreduce (ms) | MiB/s | raw ProcessGroupGloo (ms) | MiB/s |"
echo "|---|---|---|---|---|"
run allreduce max_mb="${MAX_MB:-64}"
