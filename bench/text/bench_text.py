#!/usr/bin/env python3
"""ddp-text vs its Python twin (python_text.py), side by side in one run.

The seeds' text classifier on WordNet glosses: same prepared data, tokenizer,
TextCNN, batch size per process, Adam, plateau schedule, evaluation and
per-epoch checkpoint; both launched by our ddp-launch (--use_env), each worker
wrapped in bench/train/peak_rss.sh. Reports global training samples/s over
whole epochs from the first step (from each tool's metrics.jsonl: training
steps only, evaluation excluded), the job's wall time (start-up, loading and
tokenizing the CSVs, training, evaluation, checkpoint), the peak RSS of every
worker and macro-F1 / micro-F1 after the same epochs. The data directory is
prepared once before anything is timed (`ddp-text --prepare_only`).

    python3 bench/text/bench_text.py --build build --epochs 1
    python3 bench/text/bench_text.py --only python --data_dir text-data   # without ddp-text
The driver needs no torch; the Python workers run under --python
(default /usr/bin/python3, which has python3-torch).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "train"))
from bench_train import add_job_timeout, run_job  # noqa: E402  (one launcher + peak-RSS harness for every bench)

TOOLS = ("ddp-text", "python-text")


def prepare(ddp_text, data_dir, wordnet_dir):
    cmd = [ddp_text, "--prepare_only", f"--data_dir={data_dir}"]
    if wordnet_dir:
        cmd.append(f"--wordnet_dir={wordnet_dir}")
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        sys.exit(f"bench_text.py: {' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"), help="build dir with bin/ddp-launch, bin/ddp-text")
    p.add_argument("--python", default="/usr/bin/python3", help="python3 with torch for the Python workers")
    p.add_argument("--epochs", type=int, default=1, help="whole epochs unless --max_steps")
    p.add_argument("--max_steps", type=int, default=0, help="steps per epoch, 0 = whole epochs")
    p.add_argument("--batch_size", type=int, default=64, help="per process")
    p.add_argument("--data_dir", help="prepared directory to use (prepared there first when ddp-text runs); "
                                      "default: a temporary one, removed afterwards")
    p.add_argument("--wordnet_dir", help="passed to ddp-text (default: its own, /usr/share/wordnet)")
    p.add_argument("--nprocs", default="1,2")
    p.add_argument("--only", choices=["python"], help="python: only the Python twin's rows (no ddp-text needed; "
                                                       "--data_dir must be prepared already)")
    p.add_argument("--repeats", type=int, default=1, help="rounds (tools interleaved); the table shows medians")
    p.add_argument("--json", help="also write the rows as JSON here")
    add_job_timeout(p)
    a = p.parse_args()

    ddp_text = os.path.join(a.build, "bin", "ddp-text")
    if a.only == "python":
        if not a.data_dir:
            sys.exit("bench_text.py: --only python needs --data_dir DIR, a directory prepared by "
                     "`ddp-text --prepare_only --data_dir DIR`")
        if not os.path.exists(os.path.join(a.data_dir, "prepared.json")):
            sys.exit(f"bench_text.py: {os.path.join(a.data_dir, 'prepared.json')} not found: --data_dir "
                     f"{a.data_dir} is not prepared; run `ddp-text --prepare_only --data_dir {a.data_dir}` first")
        tools = [TOOLS[1]]
    else:
        if not os.access(ddp_text, os.X_OK):
            sys.exit(f"bench_text.py: {ddp_text} not found; build it (cmake --build {a.build} --target ddp-text) "
                     f"or pass --only python")
        tools = list(TOOLS)
    if not os.access(os.path.join(a.build, "bin", "ddp-launch"), os.X_OK):
        sys.exit(f"bench_text.py: {os.path.join(a.build, 'bin', 'ddp-launch')} not found; build it "
                 f"(cmake --build {a.build} --target ddp-launch)")

    data_dir = a.data_dir or tempfile.mkdtemp(prefix="bench-text-data-")
    try:
        if "ddp-text" in tools:
            prepare(ddp_text, data_dir, a.wordnet_dir)  # once, before anything is timed
        common = [f"--epochs={a.epochs}", f"--max_steps={a.max_steps}", f"--batch_size={a.batch_size}",
                  "--seed=42", "--log_interval=1000000", f"--data_dir={data_dir}"]
        programs = {"ddp-text": [ddp_text] + ([f"--wordnet_dir={a.wordnet_dir}"] if a.wordnet_dir else []),
                    "python-text": [a.python, "-u", os.path.join(HERE, "python_text.py")]}
        nprocs = [int(x) for x in a.nprocs.split(",")]
        load_before = os.getloadavg()[0]
        runs = []
        for rep in range(a.repeats):
            for n in nprocs:  # interleaved so that background load hits every tool alike
                for name in tools:
                    print(f"round {rep + 1}/{a.repeats}: {name} with {n} process(es) ...", file=sys.stderr, flush=True)
                    work = tempfile.mkdtemp(prefix="bench-text-")
                    try:
                        r = run_job("job", n, programs[name], common, a.build, work, {}, timeout=a.job_timeout)
                    finally:
                        shutil.rmtree(work, ignore_errors=True)
                    r["tool"] = name
                    runs.append(r)
        load_after = os.getloadavg()[0]
    finally:
        if not a.data_dir:
            shutil.rmtree(data_dir, ignore_errors=True)

    rows = []
    for n in nprocs:
        for name in tools:
            mine = [r for r in runs if r["tool"] == name and r["nproc"] == n]
            last = mine[-1]["last_epoch"]
            rows.append({"tool": name, "nproc": n,
                         "samples_per_s": statistics.median(r["samples_per_s"] for r in mine),
                         "samples_per_s_all": [round(r["samples_per_s"]) for r in mine],
                         "wall_s": statistics.median(r["wall_s"] for r in mine),
                         "peak_rss_mib": [max(r["peak_rss_mib"][k] for r in mine) for k in range(n)],
                         "macro_f1": last["macro_f1"], "micro_f1": last["micro_f1"], "accuracy": last["accuracy"],
                         "macro_f1_all": [r["last_epoch"]["macro_f1"] for r in mine]})

    steps = f"{a.max_steps} steps x {a.epochs} epoch(s)" if a.max_steps else f"{a.epochs} whole epoch(s)"
    print(f"\nWordNet supersenses (45 classes), TextCNN, batch {a.batch_size} per process, {steps}, "
          f"samples/s over whole epochs from the first step, {os.cpu_count()} cores, launcher: ddp-launch --use_env, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, {a.repeats} round(s), median shown; "
          f"load average {load_before:.1f} before, {load_after:.1f} after\n")
    print("| tool | processes | global samples/s (each round) | vs python-text | job wall s | "
          "peak RSS per worker (MiB) | macro-F1 | micro-F1 | accuracy |")
    print("|---|---|---|---|---|---|---|---|---|")

    def base_of(r):
        return next(b for b in rows if b["tool"] == "python-text" and b["nproc"] == r["nproc"])

    for r in rows:
        print(f"| {r['tool']} | {r['nproc']} | {r['samples_per_s']:.0f} ({', '.join(map(str, r['samples_per_s_all']))}) | "
              f"{r['samples_per_s'] / base_of(r)['samples_per_s']:.2f}x | {r['wall_s']:.1f} | "
              f"{', '.join(f'{m:.0f}' for m in r['peak_rss_mib'])} | {r['macro_f1']:.4f} | {r['micro_f1']:.4f} | "
              f"{r['accuracy']:.4f} |".replace("nan", "n/a"))
    if "ddp-text" in tools:
        ratios = [f"{r['nproc']} process(es) **{r['samples_per_s'] / base_of(r)['samples_per_s']:.2f}x** "
                  f"(macro-F1 {r['macro_f1']:.4f} vs {base_of(r)['macro_f1']:.4f})"
                  for r in rows if r["tool"] == "ddp-text"]
        print(f"\nddp-text vs python-text, whole epochs from the first step (goal >= 2.5x at the same macro-F1, issue 25): "
              f"{', '.join(ratios)}.")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
