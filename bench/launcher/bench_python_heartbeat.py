#!/usr/bin/env python3
"""What --python_heartbeat (python/ddp_launch/heartbeat.py) costs a Python
DDP step: bench/worker/python_step.py (torch's DDP, data preloaded, the
models of the DDP-overhead table) under ddp-launch with 2 processes, with
and without the option, the order alternating per round. With it every
collective is recorded, DDP's gradient sync is recorded from autograd's
final callbacks (DDP keeps its built-in allreduce), and every optimizer
step marks a step: that is what is measured. Reports the median
DDP step (ms) of each run and the difference; the page's own contents are
checked after the run (steps in the summary). Then, without the machine's
noise, in one process (python_heartbeat_cost.py): the page writes of a step
in a hot loop, and one DDP step with DDP's built-in allreduce, torch's own
Python allreduce hook (what any Python hook costs) and with the module,
interleaved, and the module's cost in µs on a DDP step so small that
little else is in it. Prints markdown.

    python3 bench/launcher/bench_python_heartbeat.py [--build build] [--python /usr/bin/python3] [--rounds 4]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def run(build, python, model, steps, batch, with_hb, work):
    summary = os.path.join(work, "summary.json")
    cmd = [os.path.join(build, "bin", "ddp-launch"), "--standalone", "--use_env", "--nproc_per_node", "2",
           "--summary_json", summary] + (["--python_heartbeat"] if with_hb else []) + [
        os.path.join(ROOT, "bench", "worker", "python_step.py"), "--model", model, "--configs", "ddp",
        "--steps", str(steps), "--batch", str(batch)]
    env = dict(os.environ, PYTHON_EXEC=python, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=1800)
    if p.returncode != 0:
        sys.exit(f"bench_python_heartbeat.py: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    ms = None
    for line in p.stdout.splitlines():
        f = line.split()
        if len(f) >= 5 and f[0] == "RESULT" and f[3] == "ddp":
            ms = float(f[4])
    if ms is None:
        sys.exit("bench_python_heartbeat.py: no RESULT line:\n" + p.stdout[-2000:])
    with open(summary) as f:
        steps_seen = [(w["steps"] or {}).get("steps", 0) for w in json.load(f)["attempts"][-1]["workers"]]
    if with_hb and min(steps_seen) == 0:
        sys.exit("bench_python_heartbeat.py: --python_heartbeat recorded no steps:\n" + p.stderr[-2000:])
    return ms, steps_seen


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--models", default="mlp,cnn")
    a = ap.parse_args()
    torch_version = subprocess.run([a.python, "-c", "import torch; print(torch.__version__)"],
                                   stdout=subprocess.PIPE, text=True).stdout.strip()
    load_before = open("/proc/loadavg").read().split()[:3]
    rows = {m: [] for m in a.models.split(",")}
    seen = {}
    with tempfile.TemporaryDirectory(prefix="bench-pyhb-") as work:
        for rnd in range(a.rounds):
            for model in rows:
                got = {}
                for with_hb in ((True, False) if rnd % 2 else (False, True)):
                    print(f"round {rnd + 1}/{a.rounds}: {model} {'with' if with_hb else 'without'} ...",
                          file=sys.stderr, flush=True)
                    got[with_hb], s = run(a.build, a.python, model, a.steps, a.batch, with_hb, work)
                    if with_hb:
                        seen[model] = s
                rows[model].append((got[False], got[True]))
    print(f"{os.cpu_count()} cores, 2 processes, torch {torch_version} ({a.python}), OMP_NUM_THREADS="
          f"{os.environ.get('OMP_NUM_THREADS', '1')}, batch {a.batch} per process, torch DDP (python_step.py "
          f"--configs ddp), {a.steps} steps a run (median step), {a.rounds} rounds, order alternating; load average "
          f"before {' '.join(load_before)}, after {' '.join(open('/proc/loadavg').read().split()[:3])}")
    print()
    print("| model | round | DDP step without (ms) | with --python_heartbeat (ms) | difference |")
    print("|---|---|---|---|---|")
    for model, rs in rows.items():
        for i, (wo, w) in enumerate(rs):
            print(f"| {model} | {i + 1} | {wo:.2f} | {w:.2f} | {100 * (w - wo) / wo:+.2f}% |")
    print()
    micro = {}
    for model in rows:
        out = subprocess.run([a.python, os.path.join(HERE, "python_heartbeat_cost.py"), ROOT, model, "100",
                              str(a.batch)], stdout=subprocess.PIPE, text=True, check=True).stdout.split()
        micro[model] = (float(out[1]), [float(x) for x in out[3:6]], [float(x) for x in out[7:9]])
    for model, rs in rows.items():
        wo = [r[0] for r in rs]
        diffs = [100 * (w - o) / o for o, w in rs]
        noise = 100 * (max(wo) - min(wo)) / statistics.median(wo)
        print(f"- {model}: median difference {statistics.median(diffs):+.2f}% (rounds {min(diffs):+.2f}% .. "
              f"{max(diffs):+.2f}%; the runs without alone spread {noise:.1f}%); steps the launcher saw per rank: "
              f"{seen[model]}.")
    print()
    print("Without the noise, one process (a group of one, Gloo), 100 steps each, interleaved, medians:")
    print()
    print("| model | page writes a step | DDP built-in allreduce (ms) | torch's Python allreduce hook (ms) | "
          "with the module (ms) | the module over built-in | the module over torch's hook | "
          "the module's own cost a step (a Linear(8, 8) DDP step without → with) |")
    print("|---|---|---|---|---|---|---|---|")
    for model, (page_ns, (builtin, torch_hook, ours), (tiny_wo, tiny_w)) in micro.items():
        print(f"| {model} | {page_ns / 1000:.1f} µs | {builtin:.2f} | {torch_hook:.2f} | {ours:.2f} | "
              f"{100 * (ours - builtin) / builtin:+.2f}% | {100 * (ours - torch_hook) / torch_hook:+.2f}% | "
              f"{tiny_w - tiny_wo:+.1f} µs ({tiny_wo:.1f} → {tiny_w:.1f} µs) |")


if __name__ == "__main__":
    main()
