#!/usr/bin/env python3
"""Stack dump benchmark: how long ddp-launch takes to dump every thread of
every rank (launcher/include/ddp/launcher/diagnose/stack_dump.h), goal <= 5 s
for 8 ranks and for 64 (issue 23 item 9).

Each case starts a job, waits until its ranks are up, then sends the launcher
SIGUSR2 (a live dump) --dumps times, each after the previous summary is
printed; the time is the launcher's own "stacks of N ranks (...) in T s"
line. Then SIGTERM ends the job (a dump stops no rank).
  - 8 ranks of ddp-train (LibTorch, 6 threads each) training on Fashion-MNIST;
  - 64 ranks of ddp-train waiting for a store nobody serves (each a LibTorch
    process in connect_store; 64 training ranks do not fit 2 cores);
  - 64 idle shell workers.
Native tools: ddp-stack (beside ddp-launch, with nothing on PATH: no
debugging tool installed), eu-stack and gdb (a copy of ddp-launch in a folder
without ddp-stack, so it falls back to PATH's tools).
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


def cpu_ticks(name):
    total = 0
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/stat") as f:
                st = f.read()
        except OSError:
            continue
        if st[st.index("(") + 1:st.rindex(")")] == name:
            fields = st[st.rindex(")") + 2:].split()
            total += int(fields[11]) + int(fields[12])
    return total


def settle(name, deadline):
    """Until the processes called `name` use less than 0.05 s of CPU a second."""
    before = cpu_ticks(name)
    while time.time() < deadline:
        time.sleep(1)
        now = cpu_ticks(name)
        if now - before < 5:
            return
        before = now


def run_job(launch, nproc, worker_argv, env, dumps, ready_text, tmp, quiet_name=None):
    out_path = os.path.join(tmp, "out.log")
    with open(out_path, "w") as out:
        p = subprocess.Popen([launch, "--standalone", "--nproc_per_node", str(nproc)] + worker_argv, stdout=out,
                             stderr=subprocess.STDOUT, env=env, cwd=tmp)
    read = lambda: open(out_path).read()  # noqa: E731
    deadline = time.time() + 300
    while ready_text not in read() and time.time() < deadline and p.poll() is None:
        time.sleep(0.1)
    if quiet_name:
        settle(quiet_name, deadline)
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
    own = os.path.join(os.path.dirname(launch), "ddp-stack")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["TMPDIR"] = tmp  # the kept run directories go with it
        tools = {}
        for name, tool in (("none", None), ("gdb", gdb), ("eu", eu)):
            d = os.path.join(tmp, "path-" + name)
            os.mkdir(d)
            if tool:
                os.symlink(tool, os.path.join(d, os.path.basename(tool)))
            tools[name] = d
        # ddp-launch without ddp-stack beside it: the PATH tools' fallback.
        alone = os.path.join(tmp, "alone")
        os.mkdir(alone)
        shutil.copy2(launch, os.path.join(alone, "ddp-launch"))
        launch_alone = os.path.join(alone, "ddp-launch")
        train_argv = [train, "--epochs", "1", "--max_steps", "100000", "--batch_size", "16",
                      "--checkpoint_dir", os.path.join(tmp, "ck")]
        idle = os.path.join(tmp, "idle.sh")
        with open(idle, "w") as f:
            f.write("#!/bin/sh\necho \"rank $RANK is up\"\nexec /bin/sleep 600\n")
        waiting = os.path.join(tmp, "waiting.sh")
        with open(waiting, "w") as f:  # rank 1 of 2 whose store (port 1) never comes
            f.write("#!/bin/sh\necho \"rank $RANK is up\"\n"
                    f"RANK=1 WORLD_SIZE=2 MASTER_PORT=1 exec {train} --epochs 1\n")
        for script in (idle, waiting):
            os.chmod(script, 0o755)
        have_own = os.access(own, os.X_OK)
        cases = [
            ("8 × ddp-train (training), ddp-stack, no tool on PATH", have_own, launch, 8, train_argv, "none", "step 50/", None),
            ("8 × ddp-train (training), eu-stack", eu, launch_alone, 8, train_argv, "eu", "step 50/", None),
            ("8 × ddp-train (training), gdb only", gdb, launch_alone, 8, train_argv, "gdb", "step 50/", None),
            ("64 × ddp-train (waiting for its store), ddp-stack, no tool on PATH", have_own, launch, 64, [waiting], "none",
             "rank 63 is up", "ddp-train"),
            ("64 × ddp-train (waiting for its store), eu-stack", eu, launch_alone, 64, [waiting], "eu", "rank 63 is up",
             "ddp-train"),
            ("64 × idle sh workers (sleep), ddp-stack, no tool on PATH", have_own, launch, 64, [idle], "none",
             "rank 63 is up", None),
        ]
        for name, tool, launcher, nproc, argv, path, ready, quiet in cases:
            if not tool:
                rows.append((name, "tool not installed", "", ""))
                continue
            env = dict(os.environ, PATH=tools[path], OMP_NUM_THREADS="1")
            times, p, read = run_job(launcher, nproc, argv, env, args.dumps, ready, tmp, quiet)
            p.send_signal(signal.SIGTERM)
            p.wait(120)
            notes = sorted(set(re.findall(r"  note[^:]*: (.*)", read())))
            rows.append((name, f"{statistics.median(times):.2f}" if times else "-",
                         f"{max(times):.2f}" if times else "-", "; ".join(notes) or "-"))
            print(name, times, notes, flush=True)
    date = datetime.date.today().isoformat()
    body = [f"## Stack dumps of every rank (issues 17, 23)", "",
            f"`bench/launcher/bench_stack_dump.py --dumps {args.dumps}`, {date}, 2 cores; the launcher's own "
            "\"stacks of N ranks ... in T s\" of each SIGUSR2 live dump (every thread of every rank; timeout 5 s). "
            "Goal: ≤ 5 s for 8 ranks and for 64.", "",
            "| workers | median s | max s | notes |", "|---|---|---|---|"]
    body += [f"| {n} | {m} | {x} | {t} |" for n, m, x, t in rows]
    update_doc.update("stack-dump-bench", "\n".join(body) + "\n")


if __name__ == "__main__":
    main()
