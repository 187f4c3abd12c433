#!/usr/bin/env python3
"""Stack dump benchmark: how long ddp-launch takes to dump every thread of
every rank (launcher/include/ddp/launcher/diagnose/stack_dump.h), goal <= 5 s for 8.

8 ranks of ddp-train (LibTorch, 6 threads each) train on Fashion-MNIST; once
they print their first progress line the launcher gets SIGUSR2 (a live dump)
--dumps times, each after the previous summary is printed. The time is the
launcher's own "stacks of 8 ranks (...) in T s" line. Once with eu-stack (the
native tool it picks), once with only gdb on PATH (its fallback), then
SIGTERM ends the job (the ranks train on between dumps: a dump stops none).
Also 8 idle shell workers.
Writes its table into docs/benchmarks.md.
Usage: bench/launcher/bench_stack_dump.py [--build build] [--train PATH] [--dumps 5]
"""
import argparse
import datetime
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
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import update_doc  # noqa: E402

DUMP_LINE = re.compile(r"ddp-launch: stacks of (\d+) ranks? \(.*?\) in ([0-9.e+-]+) s:")


def run_job(launch, worker_argv, env, dumps, ready_text, tmp):
    out_path = os.path.join(tmp, "out.log")
    with open(out_path, "w") as out:
        p = subprocess.Popen([launch, "--standalone", "--nproc_per_node", "8"] + worker_argv, stdout=out,
                             stderr=subprocess.STDOUT, env=env, cwd=tmp)
    read = lambda: open(out_path).read()  # noqa: E731
    deadline = time.time() + 120
    while ready_text not in read() and time.time() < deadline and p.poll() is None:
        time.sleep(0.1)
    times = []
    for _ in range(dumps):
        if p.poll() is not None:
            break
        seen = len(DUMP_LINE.findall(read()))
        p.send_signal(signal.SIGUSR2)
        deadline = time.time() + 60
        while len(DUMP_LINE.findall(read())) == seen and time.time() < deadline:
            time.sleep(0.05)
        found = DUMP_LINE.findall(read())
        if len(found) > seen:
            times.append(float(found[-1][1]))
    return times, p, read


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--train", help="ddp-train (default: <build>/bin/ddp-train)")
    ap.add_argument("--dumps", type=int, default=5)
    args = ap.parse_args()
    launch = os.path.abspath(os.path.join(args.build, "bin", "ddp-launch"))
    train = os.path.abspath(args.train or os.path.join(args.build, "bin", "ddp-train"))
    gdb, eu = shutil.which("gdb"), shutil.which("eu-stack")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["TMPDIR"] = tmp  # the kept run directories go with it
        gdb_only = os.path.join(tmp, "gdb-only")
        os.mkdir(gdb_only)
        if gdb:
            os.symlink(gdb, os.path.join(gdb_only, "gdb"))
        train_argv = [train, "--epochs", "1", "--max_steps", "100000", "--batch_size", "16",
                      "--checkpoint_dir", os.path.join(tmp, "ck")]
        idle = os.path.join(tmp, "idle.sh")
        with open(idle, "w") as f:
            f.write("#!/bin/sh\necho \"rank $RANK is up\"\nexec sleep 600\n")
        os.chmod(idle, 0o755)
        cases = [("8 × ddp-train (training), eu-stack", eu, train_argv, os.environ["PATH"], "step 50/"),
                 ("8 × ddp-train (training), gdb only", gdb, train_argv, gdb_only, "step 50/"),
                 ("8 × idle sh workers (sleep), eu-stack", eu, [idle], os.environ["PATH"], "rank 7 is up")]
        for name, tool, argv, path, ready in cases:
            if not tool:
                rows.append((name, "tool not installed", "", ""))
                continue
            env = dict(os.environ, PATH=path, OMP_NUM_THREADS="1")
            times, p, read = run_job(launch, argv, env, args.dumps, ready, tmp)
            p.send_signal(signal.SIGTERM)
            p.wait(120)
            notes = sorted(set(re.findall(r"  note[^:]*: (.*)", read())))
            rows.append((name, f"{statistics.median(times):.2f}" if times else "-",
                         f"{max(times):.2f}" if times else "-", "; ".join(notes) or "-"))
            print(name, times, notes, flush=True)
    date = datetime.date.today().isoformat()
    body = [f"## Stack dumps of every rank (issue 17)", "",
            f"`bench/launcher/bench_stack_dump.py --dumps {args.dumps}`, {date}, 2 cores; the launcher's own "
            "\"stacks of 8 ranks ... in T s\" of each SIGUSR2 live dump (every thread of every rank; timeout 5 s). "
            "Goal: ≤ 5 s for 8 ranks.", "",
            "| workers | median s | max s | notes |", "|---|---|---|---|"]
    body += [f"| {n} | {m} | {x} | {t} |" for n, m, x, t in rows]
    update_doc.update("stack-dump-bench", "\n".join(body) + "\n")


if __name__ == "__main__":
    main()
