#!/usr/bin/env python3
"""ddp-train vs Python DDP, side by side in one run.

Same model, data, batch size per process, optimizer, steps, evaluation and
per-epoch checkpoint; both launched by our ddp-launch (Debian's torchrun 1.13
crashes on Python 3.11, bug #92319), each worker wrapped in peak_rss.sh.
Reports global training samples/s over whole epochs from the first step
(from each tool's metrics.jsonl: training steps only, evaluation excluded),
the job's wall time (start-up, data loading, training, evaluation,
checkpoint) and the peak RSS of every worker. The Python side is the fastest
honest plain-PyTorch version (python_ddp.py: data preloaded as tensors,
stock layers, the same threads per process); `--linear_as_conv` adds a row
with the one ddp-train layer trick plain Python can use too.

    python3 bench/train/bench_train.py --build build --steps 200
The driver needs no torch; the Python workers run under --python
(default /usr/bin/python3, which has python3-torch).
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(name, nproc, program, args, build, work, env_extra):
    ckpt = os.path.join(work, f"{name}-{nproc}")
    rss_dir = os.path.join(work, f"{name}-{nproc}-rss")
    os.makedirs(rss_dir)
    env = dict(os.environ, PEAK_RSS_DIR=rss_dir, **env_extra)
    # --use_env: the wrapper script must not get --local_rank=N as its first argument.
    cmd = [os.path.join(build, "bin", "ddp-launch"), "--use_env", f"--nproc_per_node={nproc}",
           f"--master_port={free_port()}", os.path.join(HERE, "peak_rss.sh")] + program + \
          args + [f"--checkpoint_dir={ckpt}"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"{name} with {nproc} process(es) failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}")
    with open(os.path.join(ckpt, "metrics.jsonl")) as f:
        epochs = [json.loads(l) for l in f if l.strip()]
    samples = sum(e["train_samples"] for e in epochs)
    seconds = sum(e["train_seconds"] for e in epochs)
    # "<peak KiB> <minor faults> <sys s>" per rank (peak_rss.sh), last line.
    usage = [open(os.path.join(rss_dir, f"rank{r}")).read().split()[-3:] for r in range(nproc)]
    return {"tool": name, "nproc": nproc, "samples_per_s": samples / seconds, "wall_s": wall,
            "accuracy": epochs[-1]["accuracy"], "peak_rss_mib": [int(u[0]) / 1024 for u in usage],
            "minor_faults": sum(int(u[1]) for u in usage), "sys_s": sum(float(u[2]) for u in usage)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"), help="build dir with bin/ddp-launch, bin/ddp-train")
    p.add_argument("--python", default="/usr/bin/python3", help="python3 with torch for the Python workers")
    p.add_argument("--steps", type=int, default=200, help="training steps per epoch (--max_steps)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--nprocs", default="1,2")
    p.add_argument("--no_linear_as_conv", action="store_true", help="skip the Python --linear_as_conv variant")
    p.add_argument("--repeats", type=int, default=1, help="rounds (tools interleaved); the table shows medians")
    p.add_argument("--json", help="also write the rows as JSON here")
    a = p.parse_args()

    common = [f"--epochs={a.epochs}", f"--batch_size={a.batch_size}", f"--max_steps={a.steps}",
              "--seed=42", "--log_interval=1000000"]
    tools = [("ddp-train", [os.path.join(a.build, "bin", "ddp-train")], [])]
    py = [a.python, "-u", os.path.join(HERE, "python_ddp.py")]
    tools.append(("python-ddp", py, []))
    if not a.no_linear_as_conv:
        tools.append(("python-ddp --linear_as_conv", py, ["--linear_as_conv"]))

    load_before = os.getloadavg()[0]
    runs = []
    for rep in range(a.repeats):
        # Interleaved so that background load hits every tool alike.
        for n in [int(x) for x in a.nprocs.split(",")]:
            for name, program, extra in tools:
                print(f"round {rep + 1}/{a.repeats}: {name} with {n} process(es) ...", file=sys.stderr, flush=True)
                work = tempfile.mkdtemp(prefix="bench-train-")
                try:
                    r = run_job("job", n, program, common + extra, a.build, work, {})
                finally:
                    shutil.rmtree(work, ignore_errors=True)
                r["tool"] = name
                runs.append(r)
    load_after = os.getloadavg()[0]

    def median(xs):
        xs = sorted(xs)
        return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2

    rows = []
    for n in [int(x) for x in a.nprocs.split(",")]:
        for name, _, _ in tools:
            mine = [r for r in runs if r["tool"] == name and r["nproc"] == n]
            rows.append({"tool": name, "nproc": n,
                         "samples_per_s": median([r["samples_per_s"] for r in mine]),
                         "samples_per_s_all": [round(r["samples_per_s"]) for r in mine],
                         "wall_s": median([r["wall_s"] for r in mine]),
                         "accuracy": mine[-1]["accuracy"],
                         "minor_faults": median([r["minor_faults"] for r in mine]),
                         "sys_s": median([r["sys_s"] for r in mine]),
                         "peak_rss_mib": [max(r["peak_rss_mib"][k] for r in mine) for k in range(n)]})

    cores = os.cpu_count()
    print(f"\nFashion-MNIST CNN, batch {a.batch_size} per process, {a.steps} steps x {a.epochs} epoch(s), "
          f"{cores} cores, launcher: ddp-launch --use_env, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, "
          f"{a.repeats} round(s), median shown; load average {load_before:.1f} before, {load_after:.1f} after\n")
    print("| tool | processes | global samples/s (each round) | vs python-ddp | job wall s | peak RSS per worker (MiB) | minor faults (all workers) | sys s | accuracy |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        base = next(b for b in rows if b["tool"] == "python-ddp" and b["nproc"] == r["nproc"])
        print(f"| {r['tool']} | {r['nproc']} | {r['samples_per_s']:.0f} ({', '.join(map(str, r['samples_per_s_all']))}) | "
              f"{r['samples_per_s'] / base['samples_per_s']:.2f}x | {r['wall_s']:.1f} | "
              f"{', '.join(f'{m:.0f}' for m in r['peak_rss_mib'])} | {r['minor_faults'] / 1000:.0f}k | "
              f"{r['sys_s']:.1f} | {r['accuracy']:.4f} |")
    ratios = []
    for n in [int(x) for x in a.nprocs.split(",")]:
        ours = next(r for r in rows if r["tool"] == "ddp-train" and r["nproc"] == n)
        base = next(r for r in rows if r["tool"] == "python-ddp" and r["nproc"] == n)
        ratios.append(f"{n} process(es) **{ours['samples_per_s'] / base['samples_per_s']:.2f}x**")
    print(f"\nddp-train vs python-ddp, whole epochs from the first step (goal >= 2x): {', '.join(ratios)}.")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
