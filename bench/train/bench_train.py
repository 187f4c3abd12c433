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

On a GPU (scripts/gpu-check): --device cuda (both tools on cuda:LOCAL_RANK
over NCCL), several batch sizes in one run (--batch_size 64,512), and
--warmup_epochs 1 to leave CUDA's start-up out of samples/s. Without GNU time
(/usr/bin/time) the peak-RSS columns say n/a.
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


HAVE_GNU_TIME = os.access("/usr/bin/time", os.X_OK)

# A job that has not ended after this many seconds is killed and the bench
# fails (bench/run-all then keeps the table it had): torch 1.13's Python ranks
# can deadlock at exit in ProcessGroupGloo's destructor (a Gloo thread waiting
# for the GIL its joiner holds), which once held a bench for 27 minutes. A
# whole job here takes seconds to a few minutes.
JOB_TIMEOUT_S = 900


def add_job_timeout(parser):
    parser.add_argument("--job_timeout", type=float, default=JOB_TIMEOUT_S,
                        help="seconds after which a job is killed and the bench fails (default %(default)s)")


def run_job(name, nproc, program, args, build, work, env_extra, warmup_epochs=0, timeout=JOB_TIMEOUT_S):
    ckpt = os.path.join(work, f"{name}-{nproc}")
    rss_dir = os.path.join(work, f"{name}-{nproc}-rss")
    os.makedirs(rss_dir)
    env = dict(os.environ, PEAK_RSS_DIR=rss_dir, **env_extra)
    # --use_env: the wrapper script must not get --local_rank=N as its first argument.
    wrapper = [os.path.join(HERE, "peak_rss.sh")] if HAVE_GNU_TIME else []
    cmd = [os.path.join(build, "bin", "ddp-launch"), "--use_env", f"--nproc_per_node={nproc}",
           f"--master_port={free_port()}"] + wrapper + program + args + [f"--checkpoint_dir={ckpt}"]
    t0 = time.perf_counter()
    try:
        # On the timeout, SIGKILL to ddp-launch: its watchdog kills the workers.
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        sys.exit(f"{' '.join(program)} with {nproc} process(es) had not ended after {timeout:g} s and was killed; its results "
                 f"are not used (a hung rank: torch 1.13's ranks can deadlock at exit; run the bench again, or "
                 f"raise --job_timeout if the job is that long):\n{out[-3000:]}")
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"{name} with {nproc} process(es) failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}")
    with open(os.path.join(ckpt, "metrics.jsonl")) as f:
        epochs = [json.loads(l) for l in f if l.strip()]
    timed = epochs[warmup_epochs:]
    samples = sum(e["train_samples"] for e in timed)
    seconds = sum(e["train_seconds"] for e in timed)
    # "<peak KiB> <minor faults> <sys s>" per rank (peak_rss.sh), last line.
    usage = [open(os.path.join(rss_dir, f"rank{r}")).read().split()[-3:] if HAVE_GNU_TIME else ["nan"] * 3
             for r in range(nproc)]
    return {"tool": name, "nproc": nproc, "samples_per_s": samples / seconds, "wall_s": wall,
            "accuracy": epochs[-1]["accuracy"], "peak_rss_mib": [float(u[0]) / 1024 for u in usage],
            "minor_faults": sum(float(u[1]) for u in usage), "sys_s": sum(float(u[2]) for u in usage),
            "last_epoch": epochs[-1]}


# ddp-train's CNN (programs/fashion/src/model.cpp): conv 1->32 3x3 on 28x28,
# pool, conv 32->64 3x3 on 14x14, pool, linear 3136->128, linear 128->10.
# Forward FLOPs a sample: 2 per multiply-add; a training step ~3x forward
# (the backward computes the gradients of the inputs and of the weights).
CNN_LAYERS_MACS = [28 * 28 * 32 * 1 * 9, 14 * 14 * 64 * 32 * 9, 64 * 7 * 7 * 128, 128 * 10]
CNN_TRAIN_FLOPS = 3 * 2 * sum(CNN_LAYERS_MACS)


def conv2_op(batch):
    """The layer that bounds the model: conv2, 32 -> 64 channels, 3x3 on 14x14."""
    return f"conv3x3:{batch}x32x14x64"


# A matrix product (LibTorch's BLAS: Debian's is the generic reference one)
# and a large 3x3 convolution (oneDNN, what the model's convolutions use; the
# bench times it in NCHW and in channels-last memory and keeps the faster, as
# ddp-train runs its conv2 channels last).
ROOF_OPS = ["mm:2048x2048x2048", "conv3x3:16x256x28x256"]


def measure_roof(build, nproc, threads, ops):
    """GFLOP/s per op, nproc processes at once, summed over them."""
    cmd = [os.path.join(build, "bin", "ddp-launch"), "--use_env", "--standalone", f"--nproc_per_node={nproc}",
           os.path.join(build, "bin", "ddp-worker-bench"), "roof", f"threads={threads}", "ops=" + ",".join(ops)]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"bench_train.py: {' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    total = {op: 0.0 for op in ops}
    for line in proc.stdout.splitlines():
        f = line.split()
        if len(f) == 5 and f[0] == "ROOF":
            total[f[2]] += float(f[4])
    return total


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"), help="build dir with bin/ddp-launch, bin/ddp-train")
    p.add_argument("--python", default="/usr/bin/python3", help="python3 with torch for the Python workers")
    p.add_argument("--steps", type=int, default=200, help="training steps per epoch (--max_steps)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch_size", default="64", help="per process; several: 64,512 (rows for each)")
    p.add_argument("--device", choices=["cpu", "cuda"], help="passed to both tools (default: theirs, the CPU here)")
    p.add_argument("--data_dir", help="Fashion-MNIST folder, passed to both tools")
    p.add_argument("--warmup_epochs", type=int, default=0,
                   help="leave the first N epochs out of samples/s (e.g. CUDA's start-up)")
    p.add_argument("--nprocs", default="1,2")
    p.add_argument("--no_linear_as_conv", action="store_true", help="skip the Python --linear_as_conv variant")
    p.add_argument("--repeats", type=int, default=1, help="rounds (tools interleaved); the table shows medians")
    p.add_argument("--json", help="also write the rows as JSON here")
    add_job_timeout(p)
    a = p.parse_args()

    if a.warmup_epochs >= a.epochs:
        sys.exit(f"bench_train.py: --warmup_epochs {a.warmup_epochs} leaves none of --epochs {a.epochs} to time")
    batches = [int(b) for b in a.batch_size.split(",")]
    common = [f"--epochs={a.epochs}", f"--max_steps={a.steps}", "--seed=42", "--log_interval=1000000"]
    if a.device:
        common.append(f"--device={a.device}")
    if a.data_dir:
        common.append(f"--data_dir={a.data_dir}")
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
            for batch in batches:
                for name, program, extra in tools:
                    print(f"round {rep + 1}/{a.repeats}: {name} with {n} process(es), batch {batch} ...",
                          file=sys.stderr, flush=True)
                    work = tempfile.mkdtemp(prefix="bench-train-")
                    try:
                        r = run_job("job", n, program, common + extra + [f"--batch_size={batch}"], a.build, work, {},
                                    a.warmup_epochs, a.job_timeout)
                    finally:
                        shutil.rmtree(work, ignore_errors=True)
                    r["tool"] = name
                    r["batch"] = batch
                    runs.append(r)
    load_after = os.getloadavg()[0]

    def median(xs):
        xs = sorted(xs)
        return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2

    rows = []
    for n, batch in [(int(x), b) for x in a.nprocs.split(",") for b in batches]:
        for name, _, _ in tools:
            mine = [r for r in runs if r["tool"] == name and r["nproc"] == n and r["batch"] == batch]
            rows.append({"tool": name, "nproc": n, "batch": batch,
                         "samples_per_s": median([r["samples_per_s"] for r in mine]),
                         "samples_per_s_all": [round(r["samples_per_s"]) for r in mine],
                         "wall_s": median([r["wall_s"] for r in mine]),
                         "accuracy": mine[-1]["accuracy"],
                         "minor_faults": median([r["minor_faults"] for r in mine]),
                         "sys_s": median([r["sys_s"] for r in mine]),
                         "peak_rss_mib": [max(r["peak_rss_mib"][k] for r in mine) for k in range(n)]})

    cores = os.cpu_count()
    timed = f"epochs {a.warmup_epochs + 1}..{a.epochs} timed" if a.warmup_epochs else "whole epochs from the first step"
    print(f"\nFashion-MNIST CNN, batch {a.batch_size} per process, {a.steps} steps x {a.epochs} epoch(s) ({timed}), "
          f"device {a.device or 'default'}, {cores} cores, launcher: ddp-launch --use_env, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, "
          f"{a.repeats} round(s), median shown; load average {load_before:.1f} before, {load_after:.1f} after\n")
    print("| tool | processes | batch | global samples/s (each round) | vs python-ddp | job wall s | peak RSS per worker (MiB) | minor faults (all workers) | sys s | accuracy |")
    print("|---|---|---|---|---|---|---|---|---|---|")

    def base_of(r):
        return next(b for b in rows if b["tool"] == "python-ddp" and b["nproc"] == r["nproc"] and b["batch"] == r["batch"])

    for r in rows:
        print(f"| {r['tool']} | {r['nproc']} | {r['batch']} | {r['samples_per_s']:.0f} "
              f"({', '.join(map(str, r['samples_per_s_all']))}) | "
              f"{r['samples_per_s'] / base_of(r)['samples_per_s']:.2f}x | {r['wall_s']:.1f} | "
              f"{', '.join(f'{m:.0f}' for m in r['peak_rss_mib'])} | {r['minor_faults'] / 1000:.0f}k | "
              f"{r['sys_s']:.1f} | {r['accuracy']:.4f} |".replace("nank", "n/a").replace("nan", "n/a"))
    ratios = [f"{r['nproc']} process(es) batch {r['batch']} **{r['samples_per_s'] / base_of(r)['samples_per_s']:.2f}x**"
              for r in rows if r["tool"] == "ddp-train"]
    goal = "goal >= 1.5x at batch 64" if a.device == "cuda" else "goal >= 3x, issue 25"
    print(f"\nddp-train vs python-ddp, {timed} ({goal}): {', '.join(ratios)}.")
    if a.device != "cuda" and os.access(os.path.join(a.build, "bin", "ddp-worker-bench"), os.X_OK):
        # The practical FP32 roof, measured here through the same LibTorch with
        # the processes and threads ddp-train uses (cores / processes each).
        print(f"\nThe roof, measured here through the same LibTorch with the processes and threads ddp-train "
              f"uses (all processes at once): a matrix product (its BLAS) and a large 3x3 convolution (oneDNN, "
              f"the faster of NCHW and channels-last memory, as each convolution below); the roof is the faster. "
              f"FLOPs are direct counts (2 a multiply-add; oneDNN may compute a 3x3 convolution with fewer). "
              f"ddp-train's CNN: {CNN_TRAIN_FLOPS / 1e6:.1f} MFLOP a training sample (3 x forward).\n")
        for n in [int(x) for x in a.nprocs.split(",")]:
            threads = max(1, cores // n)
            for batch in batches:
                ops = ROOF_OPS + [conv2_op(batch)]
                g = measure_roof(a.build, n, threads, ops)
                roof = max(g[ROOF_OPS[0]], g[ROOF_OPS[1]])
                r = next(r for r in rows if r["tool"] == "ddp-train" and r["nproc"] == n and r["batch"] == batch)
                rate = r["samples_per_s"] * CNN_TRAIN_FLOPS / 1e9
                print(f"- {n} process(es) x {threads} thread(s), batch {batch}: {ROOF_OPS[0]} {g[ROOF_OPS[0]]:.0f} "
                      f"GFLOP/s, {ROOF_OPS[1]} {g[ROOF_OPS[1]]:.0f}, the model's conv2 ({ops[2]}) "
                      f"{g[ops[2]]:.0f}; ddp-train's {r['samples_per_s']:.0f} samples/s are {rate:.0f} GFLOP/s = "
                      f"**{100 * rate / roof:.0f}% of the roof** (goal >= 50%).")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
