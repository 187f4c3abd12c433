#!/usr/bin/env python3
"""Two builds' ddp-worker-bench side by side, alternated round by round in one run
(2 processes under ddp-launch, OMP_NUM_THREADS=1): the DDP overhead over the
slowest rank's local step, and the runtime's allreduce plain and in shared buffers.
usage: ab_builds.py BASE_BENCH NEW_BENCH DDP_LAUNCH [ROUNDS [MODELS]]
  MODELS: comma-separated (cnn,mlp), "" for the allreduce rows only."""
import os, statistics, subprocess, sys
if len(sys.argv) < 4:
    sys.exit(__doc__)
BASE, NEW, LAUNCH = sys.argv[1:4]
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 4
models = (sys.argv[5] if len(sys.argv) > 5 else "cnn,mlp").split(",")

def run(bench, args):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run([LAUNCH, "--use_env", "--nproc_per_node=2", bench] + args, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=900)
    if p.returncode:
        sys.exit(f"failed: {bench} {args}\n{p.stderr[-2000:]}")
    return p.stdout.splitlines()

res = {"base": {}, "new": {}}
def add(which, key, v):
    res[which].setdefault(key, []).append(v)

for r in range(rounds):
    order = [("base", BASE), ("new", NEW)] if r % 2 == 0 else [("new", NEW), ("base", BASE)]
    for which, bench in order:
        for m in [m for m in models if m]:
            steps = "30" if m == "cnn" else "20"
            out = run(bench, ["step", f"model={m}", f"steps={steps}", "configs=local,ddp"])
            ms = {}
            for line in out:
                f = line.split()
                if f and f[0] == "RESULT":
                    ms[f[3]] = float(f[4])
            add(which, f"{m} ddp ms", ms["ddp"])
            add(which, f"{m} local-slowest ms", ms["local-slowest"])
            add(which, f"{m} overhead %", 100 * (ms["ddp"] - ms["local-slowest"]) / ms["local-slowest"])
        for shared in ("0", "1"):
            out = run(bench, ["allreduce", "sizes=1048576,4194304,16777216", "runtime_only=1", f"shared={shared}"])
            for line in out:
                f = line.split()
                if f and f[0] == "ALLREDUCE":
                    add(which, f"allreduce {int(f[1]) >> 20} MiB{' shared' if shared == '1' else ''} ms", float(f[2]))
    print(f"round {r + 1} done, load {open('/proc/loadavg').read().split()[:3]}", flush=True)

print(f"{'measure':32} {'base: median (rounds)':44} {'new: median (rounds)':44}")
for key in res["base"]:
    fmt = lambda v: f"{statistics.median(v):8.3f} (" + " ".join(f"{x:.2f}" for x in v) + ")"
    print(f"{key:32} {fmt(res['base'][key]):44} {fmt(res['new'][key]):44}")
