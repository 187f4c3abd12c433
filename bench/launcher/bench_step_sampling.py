#!/usr/bin/env python3
"""What the launcher's step sampling (straggler scores) and --trace_file cost
ddp-train, in whole runs side by side:

  off       --straggler_threshold 0: no sampling at all
  sampling  the default: every heartbeat page read every 100 ms, a verdict
            each --straggler_window
  trace     the default and --trace_file (every step and collective kept,
            written at the end)

ddp-train with 2 processes, --max_steps steps of one epoch, the variants in
turn, the order rotating per round. Reported per variant: ddp-train's own
samples/s (metrics.jsonl: train samples / train seconds, whole epoch), the
launcher's own CPU time (the launcher's rusage with its reaped children,
less the workers' CPU from --summary_json) and, for the trace, the file's
size and slices. The runtime's side (the clock reads per mark) is
bench/worker/bench_heartbeat.py's recorder cost. Prints markdown.

    python3 bench/launcher/bench_step_sampling.py [--build build] [--rounds 3] [--steps 300]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VARIANTS = ("off", "sampling", "trace")


def run(build, variant, steps, batch, work):
    ckpt = os.path.join(work, "ckpt")
    summary = os.path.join(work, "summary.json")
    trace = os.path.join(work, "trace.json")
    opts = {"off": ["--straggler_threshold", "0"], "sampling": [], "trace": ["--trace_file", trace]}[variant]
    cmd = [os.path.join(build, "bin", "ddp-launch"), "--standalone", "--nproc_per_node", "2", "--summary_json",
           summary] + opts + [os.path.join(build, "bin", "ddp-train"), "--epochs=1", f"--max_steps={steps}",
                              f"--batch_size={batch}", "--seed=42", "--log_interval=1000000",
                              f"--checkpoint_dir={ckpt}"]
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"bench_step_sampling.py: {' '.join(cmd)} failed ({p.returncode}):\n{out[-3000:]}")
    with open(os.path.join(ckpt, "metrics.jsonl")) as f:
        epoch = [json.loads(l) for l in f if l.strip()][-1]
    with open(summary) as f:
        workers = json.load(f)["attempts"][-1]["workers"]
    launcher_cpu = ru.ru_utime + ru.ru_stime - sum(w["cpu_s"] for w in workers)
    r = {"samples_per_s": epoch["train_samples"] / epoch["train_seconds"], "wall_s": wall,
         "launcher_cpu_s": launcher_cpu, "steps": max((w["steps"] or {}).get("steps", 0) for w in workers)}
    if variant == "trace":
        r["trace_bytes"] = os.path.getsize(trace)
        m = re.search(r"trace of \d+ ranks \((\d+) slices", out)
        r["slices"] = int(m.group(1)) if m else 0
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=64)
    a = ap.parse_args()
    for b in ("ddp-launch", "ddp-train"):
        if not os.access(os.path.join(a.build, "bin", b), os.X_OK):
            sys.exit(f"bench_step_sampling.py: {a.build}/bin/{b} is not built")
    load_before = open("/proc/loadavg").read().split()[:3]
    runs = {v: [] for v in VARIANTS}
    for rnd in range(a.rounds):
        order = VARIANTS[rnd % 3:] + VARIANTS[:rnd % 3]
        for v in order:
            print(f"round {rnd + 1}/{a.rounds}: {v} ...", file=sys.stderr, flush=True)
            with tempfile.TemporaryDirectory(prefix="bench-sampling-") as work:
                runs[v].append(run(a.build, v, a.steps, a.batch, work))
    med = {v: statistics.median(r["samples_per_s"] for r in runs[v]) for v in VARIANTS}
    off = [r["samples_per_s"] for r in runs["off"]]
    noise = 100 * (max(off) - min(off)) / med["off"]
    print(f"{os.cpu_count()} cores, ddp-train with 2 processes, OMP_NUM_THREADS="
          f"{os.environ.get('OMP_NUM_THREADS', '1')}, batch {a.batch} per process, {a.steps} steps (one epoch) a run, "
          f"{a.rounds} rounds, order rotating; load average before {' '.join(load_before)}, after "
          f"{' '.join(open('/proc/loadavg').read().split()[:3])}")
    print()
    print("| variant | samples/s (each round) | median | vs off | launcher CPU s a run (median) | launcher CPU per run second |")
    print("|---|---|---|---|---|---|")
    for v in VARIANTS:
        sps = [r["samples_per_s"] for r in runs[v]]
        cpu = statistics.median(r["launcher_cpu_s"] for r in runs[v])
        wall = statistics.median(r["wall_s"] for r in runs[v])
        print(f"| {v} | {', '.join(f'{x:.0f}' for x in sps)} | {med[v]:.0f} | "
              f"{100 * (med[v] - med['off']) / med['off']:+.2f}% | {cpu:.3f} | {100 * cpu / wall:.2f}% of a core |")
    t = runs["trace"][-1]
    cpu_share = {v: statistics.median(r["launcher_cpu_s"] / r["wall_s"] for r in runs[v]) for v in VARIANTS}
    print()
    print(f"- The runs with sampling off spread {noise:.1f}% across rounds: a samples/s difference inside that is noise.")
    print(f"- What sampling takes from the ranks is the launcher's CPU on their cores: "
          f"{100 * (cpu_share['sampling'] - cpu_share['off']):.3f}% of one core over the run with sampling, "
          f"{100 * (cpu_share['trace'] - cpu_share['off']):.3f}% with the trace (the launcher alone, against off), "
          f"of the {os.cpu_count()} cores the 2 ranks use.")
    print(f"- The trace of the last run: {t['steps']} steps a rank, {t['slices']} slices, "
          f"{t['trace_bytes'] / 1e6:.1f} MB ({t['trace_bytes'] / max(1, t['slices']):.0f} bytes a slice).")


if __name__ == "__main__":
    main()
