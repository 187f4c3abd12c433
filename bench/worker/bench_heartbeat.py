#!/usr/bin/env python3
"""What the progress heartbeat (DDP_HEARTBEAT_FILE, docs/worker-runtime.md)
costs a training step, beside the DDP overhead table of bench_worker.py:

  1. whole runs of the C++ DDP step benchmark (ddp-worker-bench step,
     configs=ddp, 2 processes under ddp-launch, the same models and batch as
     the overhead table) with and without a heartbeat file per rank, the
     order alternating per round; the heartbeat pages are read back after
     each run (attached, every collective finished, collectives per step);
  2. the recorder's own cost per collective (ddp-worker-bench heartbeat),
     times the collectives of a step: the cost per step without the
     machine's noise.
Prints markdown.

    python3 bench/worker/bench_heartbeat.py [--build build] [--rounds 4] [--steps 30]

Both variants run through the same /bin/sh wrapper, which gives each rank
its own page (as ddp-launch does) or unsets the variable, whatever the
launcher set. Needs no torch. Run on an otherwise idle machine.
"""
import argparse
import os
import statistics
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WARMUP = 3  # ddp-worker-bench step's warm-up steps (not timed, but recorded)

# ddp/common/heartbeat.h, version 2: magic, then pid, collective_started,
# collective_finished, kind, bytes, step (native 64-bit), then the wait
# time and the rings of timed marks (not read here); one page.
MAGIC = b"DDPHB002"
PAGE = 4096
KINDS = {0: "none", 1: "allreduce", 2: "broadcast", 3: "allgather", 4: "barrier", 5: "reduce_scatter", 6: "collective"}


def create_page(path):
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, MAGIC + bytes(PAGE - len(MAGIC)))
    os.close(fd)


def read_page(path):
    with open(path, "rb") as f:
        data = f.read(PAGE)
    if data[:8] != MAGIC:
        sys.exit(f"bench_heartbeat.py: {path} is not a heartbeat page")
    pid, started, finished, kind, nbytes, step = struct.unpack("=6Q", data[8:56])
    return {"pid": pid, "started": started, "finished": finished, "kind": KINDS.get(kind, "?"), "bytes": nbytes,
            "step": step}


WRAP_WITH = 'export DDP_HEARTBEAT_FILE="$0.$LOCAL_RANK"; exec "$@"'
WRAP_WITHOUT = 'unset DDP_HEARTBEAT_FILE; exec "$@"'


def launch(build, argv, nproc):
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    cmd = [os.path.join(build, "bin", "ddp-launch"), "--use_env", f"--nproc_per_node={nproc}"] + argv
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=1800)
    if p.returncode != 0:
        sys.exit(f"bench_heartbeat.py: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    if "warning" in p.stderr and "heartbeat" in p.stderr:
        sys.exit(f"bench_heartbeat.py: a rank did not attach its heartbeat:\n{p.stderr[-3000:]}")
    return p.stdout.splitlines()


def step_ms(lines, model):
    for line in lines:
        f = line.split()
        if len(f) >= 5 and f[0] == "RESULT" and f[2] == model and f[3] == "ddp":
            return float(f[4])
    sys.exit("bench_heartbeat.py: no RESULT line for " + model)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--models", default="mlp,cnn")
    a = ap.parse_args()
    bench = os.path.join(a.build, "bin", "ddp-worker-bench")
    for b in (bench, os.path.join(a.build, "bin", "ddp-launch")):
        if not os.access(b, os.X_OK):
            sys.exit(f"bench_heartbeat.py: {b} is not built (cmake --build {a.build} --target ddp-launch ddp-worker-bench)")
    models = a.models.split(",")
    load_before = open("/proc/loadavg").read().split()[:3]

    rows = {m: [] for m in models}  # per round: (without ms, with ms)
    pages = {}  # model -> the pages of its last run with heartbeats
    with tempfile.TemporaryDirectory(prefix="ddp-hb-bench-") as tmp:
        for rnd in range(a.rounds):
            for model in models:
                argv = [bench, "step", f"model={model}", f"steps={a.steps}", f"batch={a.batch}", "configs=ddp"]
                got = {}
                for variant in (("with", "without") if rnd % 2 else ("without", "with")):
                    if variant == "with":
                        base = os.path.join(tmp, f"{model}-{rnd}")
                        for r in range(a.nproc):
                            create_page(f"{base}.{r}")
                        lines = launch(a.build, ["/bin/sh", "-c", WRAP_WITH, base] + argv, a.nproc)
                        pages[model] = [read_page(f"{base}.{r}") for r in range(a.nproc)]
                        for r, pg in enumerate(pages[model]):
                            if pg["pid"] == 0 or pg["started"] == 0 or pg["started"] != pg["finished"]:
                                sys.exit(f"bench_heartbeat.py: rank {r}'s heartbeat is not complete: {pg}")
                    else:
                        lines = launch(a.build, ["/bin/sh", "-c", WRAP_WITHOUT, "sh"] + argv, a.nproc)
                    got[variant] = step_ms(lines, model)
                rows[model].append((got["without"], got["with"]))
        micro = subprocess.run([bench, "heartbeat", "file=" + os.path.join(tmp, "micro"), "n=2000000"],
                               stdout=subprocess.PIPE, text=True, check=True).stdout.split()
    ns_per_collective = float(micro[1])

    print(f"{os.cpu_count()} cores, {a.nproc} processes, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '1')}, "
          f"batch {a.batch} per process, C++ DDP with the defaults (configs=ddp), {a.steps} steps per run (medians), "
          f"{a.rounds} rounds, order alternating; load average before {' '.join(load_before)}, after "
          f"{' '.join(open('/proc/loadavg').read().split()[:3])}")
    print()
    print("| model | round | DDP step without (ms) | with DDP_HEARTBEAT_FILE (ms) | difference |")
    print("|---|---|---|---|---|")
    for model in models:
        for i, (wo, w) in enumerate(rows[model]):
            print(f"| {model} | {i + 1} | {wo:.2f} | {w:.2f} | {100 * (w - wo) / wo:+.2f}% |")
    print()
    for model in models:
        wo = [r[0] for r in rows[model]]
        w = [r[1] for r in rows[model]]
        diffs = [100 * (b - c) / c for c, b in rows[model]]
        base = statistics.median(wo)
        noise = 100 * (max(wo) - min(wo)) / base
        pg = pages[model][0]
        per_step = pg["started"] / (a.steps + WARMUP)  # includes DDP's construction: an upper bound
        cost_ns = per_step * ns_per_collective
        verdict = ("within that noise" if abs(statistics.median(diffs)) <= noise
                   else "outside that noise: rerun on an idle machine")
        print(f"- {model}: whole runs {statistics.median(w):.2f} vs {base:.2f} ms per step, median difference "
              f"{statistics.median(diffs):+.2f}% (rounds {min(diffs):+.2f}% .. {max(diffs):+.2f}%); the runs "
              f"without heartbeats alone spread {noise:.1f}% across rounds, so the difference is {verdict}. "
              f"The page after a run: {pg['started']} collectives in {a.steps + WARMUP} steps (≤ {per_step:.1f} "
              f"per step, the bench's own barrier and DDP's collectives, DDP's construction included), all "
              f"finished, the last an {pg['kind']} of {pg['bytes']} bytes. Recorder cost (hot loop): "
              f"{ns_per_collective:.1f} ns per collective → **{cost_ns / 1000:.3f} µs per step = "
              f"{100 * cost_ns / 1e6 / base:.1e}%** of the step (goal ≤ 0.1%).")

if __name__ == "__main__":
    main()
