#!/usr/bin/env python3
"""char-lm (examples/char-lm) vs its Python twin (python_lm.py), side by side in one run.

The same character-level causal Transformer on WordNet's glosses, the same
batch per process, context, steps, AdamW, warm-up + cosine, clipping and
accumulation. char-lm runs under our ddp-launch, the twin under torchrun:
Debian's torch 1.13 (/usr/bin/python3, the reference of the other benches,
the LibTorch char-lm is built on) through bench/torchrun_patched.py, which
fixes only pytorch#92319, and torch 2.11 (scripts/install-torch2's venv,
when installed) through its stock torchrun. The tools are interleaved in
every round so that background load hits them alike. Reports global
training tokens/s (characters a second: sequences x context, training steps
only, from each tool's metrics.jsonl), the job's wall time and the held-out
perplexity after the same steps. bench/lm/CMakeLists.txt builds char-lm in
tree from examples/char-lm/main.cpp as build/bin/char-lm; each --build gives
a char-lm row, named by the LibTorch it was configured with.

    python3 bench/lm/bench_lm.py --build build --build build-torch2 --repeats 3   # the full comparison
    python3 bench/lm/bench_lm.py --build build --total_steps 30                   # a quick look
The driver needs no torch.
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "train"))
from bench_train import add_job_timeout, free_port  # noqa: E402

TORCHRUN_PATCHED = os.path.join(os.path.dirname(HERE), "torchrun_patched.py")

TORCH2_PYTHON = os.path.join(os.environ.get("DDP_TORCH2_CACHE") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ddp-launch", "torch-2.11.0"), "venv", "bin",
    "python")


def torch_version(python):
    proc = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        sys.exit(f"bench_lm.py: {python} cannot import torch:\n{proc.stdout[-1000:]}")
    return proc.stdout.strip().split("+")[0]


def libtorch_version(build):
    """The LibTorch version a build directory was configured with (its Torch_DIR's TorchConfigVersion.cmake)."""
    try:
        cache = open(os.path.join(build, "CMakeCache.txt")).read()
        torch_dir = re.search(r"^Torch_DIR:PATH=(.*)$", cache, re.M).group(1)
        return re.search(r'set\(PACKAGE_VERSION "([^"]+)"\)',
                         open(os.path.join(torch_dir, "TorchConfigVersion.cmake")).read()).group(1)
    except (OSError, AttributeError):
        sys.exit(f"bench_lm.py: {build} is not a configured build (no CMakeCache.txt naming Torch_DIR with "
                 f"TorchConfigVersion.cmake); pass the build directory that holds bin/char-lm")


def run_job(name, nproc, launcher, program, args, work, timeout):
    ckpt = os.path.join(work, f"{name}-{nproc}")
    cmd = launcher + [f"--nproc_per_node={nproc}", f"--master_port={free_port()}"] + program + args + \
          [f"--checkpoint_dir={ckpt}"]
    t0 = time.perf_counter()
    # Its own session, so that a job past --job_timeout is killed with its
    # workers (torch 1.13's ranks can hang at exit in Gloo's destructor).
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        sys.exit(f"bench_lm.py: {name} with {nproc} process(es) had not ended after {timeout:g} s and was killed "
                 f"(raise --job_timeout for a longer run)")
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"bench_lm.py: {name} with {nproc} process(es) failed (exit {proc.returncode}):\n{out[-3000:]}")
    with open(os.path.join(ckpt, "metrics.jsonl")) as f:
        rows = [json.loads(l) for l in f if l.strip()]
    samples = sum(r["train_samples"] for r in rows)
    seconds = sum(r["train_seconds"] for r in rows)
    return {"tool": name, "nproc": nproc, "tokens_per_s": samples * int(args_value(args, "context")) / seconds,
            "wall_s": wall, "perplexity": rows[-1]["perplexity"], "steps": rows[-1]["global_step"]}


def args_value(args, name):
    return next(a.split("=", 1)[1] for a in args if a.startswith(f"--{name}="))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", action="append",
                   help="build dir with bin/ddp-launch and bin/char-lm; repeat for several (a build against "
                        "LibTorch 2.11, build-torch2, beside Debian's 1.13); default: build")
    p.add_argument("--python", action="append",
                   help="python3 with torch for the twin; repeat for several (default: /usr/bin/python3 and "
                        "scripts/install-torch2's venv when installed)")
    p.add_argument("--total_steps", type=int, default=150)
    p.add_argument("--batch_size", type=int, default=32, help="per process")
    p.add_argument("--accumulate_batches", type=int, default=1)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--d_model", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--wordnet_dir", default="/usr/share/wordnet")
    p.add_argument("--nprocs", default="2", help="comma-separated process counts (default 2)")
    p.add_argument("--repeats", type=int, default=1, help="rounds (tools interleaved); the table shows medians")
    p.add_argument("--json", help="also write the rows as JSON here")
    add_job_timeout(p)
    a = p.parse_args()

    programs = {}  # name -> (launcher, program)
    for build in a.build or [os.path.join(ROOT, "build")]:
        launch, char_lm = os.path.join(build, "bin", "ddp-launch"), os.path.join(build, "bin", "char-lm")
        for path, target in ((launch, "ddp-launch"), (char_lm, "char-lm")):
            if not os.access(path, os.X_OK):
                sys.exit(f"bench_lm.py: {path} not found; build it (cmake --build {build} --target {target})")
        # The twin evaluates at the end only.
        programs[f"char-lm (LibTorch {libtorch_version(build)}, ddp-launch)"] = ([launch], [char_lm, "--eval_every_steps=0"])
    pythons = a.python or ["/usr/bin/python3"] + ([TORCH2_PYTHON] if os.access(TORCH2_PYTHON, os.X_OK) else [])
    for py in pythons:
        version = torch_version(py)
        # torch 1.x's stock torchrun dies on Python 3.11 (pytorch#92319); 2.x's runs as it is.
        torchrun = [py, TORCHRUN_PATCHED] if version.startswith("1.") else [py, "-m", "torch.distributed.run"]
        programs[f"python-lm (torch {version}, torchrun)"] = (torchrun, [os.path.join(HERE, "python_lm.py")])
    common = [f"--total_steps={a.total_steps}", f"--batch_size={a.batch_size}",
              f"--accumulate_batches={a.accumulate_batches}", f"--context={a.context}", f"--d_model={a.d_model}",
              f"--heads={a.heads}", f"--layers={a.layers}", f"--wordnet_dir={a.wordnet_dir}", "--warmup_steps=20",
              "--learning_rate=0.003", "--grad_clip_norm=1", "--test_sequences=256", "--seed=42",
              "--log_interval=1000000"]
    nprocs = [int(x) for x in a.nprocs.split(",")]
    load_before = os.getloadavg()[0]
    runs = []
    for rep in range(a.repeats):
        for n in nprocs:
            for name, (launcher, program) in programs.items():
                print(f"round {rep + 1}/{a.repeats}: {name} with {n} process(es) ...", file=sys.stderr, flush=True)
                work = tempfile.mkdtemp(prefix="bench-lm-")
                try:
                    runs.append(run_job(name, n, launcher, program, common, work, a.job_timeout))
                finally:
                    shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()[0]

    rows = []
    for n in nprocs:
        for name in programs:
            mine = [r for r in runs if r["tool"] == name and r["nproc"] == n]
            rows.append({"tool": name, "nproc": n, "tokens_per_s": statistics.median(r["tokens_per_s"] for r in mine),
                         "tokens_per_s_all": [round(r["tokens_per_s"]) for r in mine],
                         "wall_s": statistics.median(r["wall_s"] for r in mine), "perplexity": mine[-1]["perplexity"]})
    print(f"\nchar-lm: {a.layers} layers, d_model {a.d_model}, {a.heads} heads, context {a.context}, batch "
          f"{a.batch_size} per process x {a.accumulate_batches}, {a.total_steps} steps, global training tokens/s "
          f"(steps only), {os.cpu_count()} cores, char-lm under ddp-launch, the twin under torchrun, OMP_NUM_THREADS="
          f"{os.environ.get('OMP_NUM_THREADS', 'unset')}, {a.repeats} round(s), median shown; load average "
          f"{load_before:.1f} before, {load_after:.1f} after\n")
    print("| tool | processes | global tokens/s (each round) | vs the first row | job wall s | perplexity |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        base = next(b for b in rows if b["nproc"] == r["nproc"])  # the first build's char-lm
        print(f"| {r['tool']} | {r['nproc']} | {r['tokens_per_s']:.0f} ({', '.join(map(str, r['tokens_per_s_all']))}) | "
              f"{r['tokens_per_s'] / base['tokens_per_s']:.2f}x | {r['wall_s']:.1f} | {r['perplexity']:.3f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
