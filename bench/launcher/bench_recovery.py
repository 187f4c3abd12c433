#!/usr/bin/env python3
"""What a failure costs: one rank SIGKILLed mid-epoch, side by side in one run.

Modes (each round runs them one after the other, interleaved over rounds):
  python    Python DDP (recovery_twin.py: the seeds' loop, per-epoch checkpoints,
            resume from the newest) under stock torchrun 2.11 --max_restarts 1;
  restart   ddp-train under ddp-launch --max_restarts 1, per-epoch checkpoints,
            the whole group restarted (--recovery restart where ddp-launch has it);
  every     the same with ddp-train --checkpoint_every_steps N;
  in_place  ddp-train under ddp-launch --recovery in_place: only the lost rank comes
            back (run only when `ddp-launch --help` lists --recovery), in the standby
            process (LibTorch already loaded) where ddp-launch has --recovery_standby;
  in_place_cold  the same with --recovery_standby off: the lost rank starts afresh
            (run only when `ddp-launch --help` lists --recovery_standby).
With --before_build DIR the in_place mode also runs with that build's ddp-launch and
ddp-train, before the other in each round: a change to the recovery path, before and
after, side by side in one run.
Every job trains the same CNN on Fashion-MNIST (--steps_per_epoch steps of batch 64
per rank an epoch, --epochs epochs), with --nproc ranks and OMP_NUM_THREADS =
cores / ranks for both tools. When rank 0 reports global step --kill_step (mid-epoch
2 by default), the bench SIGKILLs rank --kill_rank (found by its environment:
this run's tag and RANK).

Measured, on the bench's CLOCK_MONOTONIC (time.monotonic), from the SIGKILL:
  - next step: until rank 0's line of the first step completed after the failure
    reaches the bench (every rank took part in it: DDP); the same method for every
    mode: a line is stamped when the bench reads it. For ddp-train that is the
    first rank-0 step of the --trace_file that began after the killed rank's exit
    (so a step that was already finishing when the kill came is not counted); for
    the twin the first line of its restart (it prints TORCHELASTIC_RESTART_COUNT);
  - back: until rank 0 completes the step after the last one done before the failure
    (the next step plus the redone work);
  - redone: completed steps trained again = last step done before the failure -
    first step after it + 1 (the step in flight at the kill is lost in every mode
    and not counted);
  - inside the job, for a check: ddp-train, from the killed rank's exit event to the
    end of that step, both from the --trace_file (what the bench adds: the kill seen,
    the line forwarded); the twin, its own time.monotonic() at the step's end.
Writes a markdown table (stdout), --json, the docs/benchmarks.md section
(recovery-bench) and docs/recovery.png (plot_recovery.py, from the trace of the
last in-place run, or the last full-restart run without --recovery).

Full size, on a quiet machine (about 10 minutes on 2 cores: an estimate from the short run):
  /usr/bin/python3 bench/launcher/bench_recovery.py --build build
A short check (2 ranks, 1 round, short epochs): ... --short --no-doc
Needs torch 2.11's venv (scripts/install-torch2) for the python mode, matplotlib
(Debian's python3-matplotlib: run it with /usr/bin/python3) for the picture.
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, HERE)
import update_doc  # noqa: E402

TORCH2_PY = os.path.join(os.environ.get("DDP_TORCH2_CACHE") or os.path.join(
    os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "ddp-launch", "torch-2.11.0"),
    "venv", "bin", "python3")
PLOT = os.path.join(ROOT, "docs", "recovery.png")
MODES = ("python", "restart", "every", "in_place_cold", "in_place")
BEFORE = "in_place_before"  # the in_place mode with --before_build's binaries
# Stock torchrun 2.11 shares its rendezvous store with the workers, and a
# restarted Gloo group here read the killed attempt's addresses from it and
# failed to connect (connectFullMesh: Connection refused): 3 of the 4 restarts
# tried, static and --standalone rendezvous, the twin and a 20-line script,
# 2026-12-07; pytorch/pytorch#135712. With the variable: 2 of 2 restarted. Its documented way out is what the python mode runs with.
SHARED_STORE_NOTE = ("torchrun 2.11 runs with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: with its default shared store "
                     "the restarted Gloo group read the killed attempt's addresses and failed to connect "
                     "(pytorch/pytorch#135712; 3 of the 4 restarts tried here, 2026-12-07)")

# ddp-train's progress line (worker/loop/src/progress.cpp) and the twin's, which
# adds "global G restart R t T"; ddp-launch may put a prefix before either.
STEP_LINE = re.compile(r"epoch (\d+)/\d+ step (\d+)/(\d+)\b(?:.*? restart (\d+))?(?: t (\d+\.\d+))?")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_step(text):
    """(global step, restart count or None, the twin's own time.monotonic() or None) of a progress line, or None."""
    m = STEP_LINE.search(text)
    if not m:
        return None
    epoch, step, per_epoch = int(m.group(1)), int(m.group(2)), int(m.group(3))
    return ((epoch - 1) * per_epoch + step, int(m.group(4)) if m.group(4) is not None else None,
            float(m.group(5)) if m.group(5) is not None else None)


def trace_recovery(trace, kill_rank):
    """From a ddp-launch --trace_file: the killed rank's exit (s), the first rank-0 step that
    began after it (its global step: the loop marks global_step + 1 on the heartbeat page;
    its end in s), or None where the trace lacks them."""
    events = trace["traceEvents"]
    death = next((e["ts"] for e in sorted(events, key=lambda e: e.get("ts", 0))
                  if e.get("ph") == "i" and e.get("pid") == kill_rank + 1 and e["name"].startswith("exited")), None)
    if death is None:
        return None
    steps = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") == "step" and e.get("pid") == 1),
                   key=lambda e: e["ts"])
    after = next((e for e in steps if e["ts"] >= death), None)
    if after is None:
        return None
    return {"death_s": death / 1e6, "step": after["args"]["step"], "end_s": (after["ts"] + after["dur"]) / 1e6}


def analyse(lines, t_kill, first_after):
    """lines: [(t, global, restart, own stamp)] of rank 0 in the order read; first_after(i, line) says
    whether line i is the first completed step after the failure. Returns the measures."""
    post = next((i for i, l in enumerate(lines) if l[0] > t_kill and first_after(i, l)), None)
    if post is None:
        return None
    t_post, g_post = lines[post][:2]
    last_done = max((l[1] for l in lines[:post]), default=0)
    back = next((l[0] for l in lines[post:] if l[1] == last_done + 1), None)
    return {"next_step_s": t_post - t_kill, "post": post, "back_s": None if back is None else back - t_kill,
            "last_done": last_done, "resumed_at": g_post, "redone": max(0, last_done - g_post + 1)}


def recover_keys(obj, path=""):
    """{path: value} of every key of --summary_json that names a recovery (the in-place
    recovery's own report; the bench keeps it beside its own measures)."""
    found = {}
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        here = f"{path}.{k}" if path else str(k)
        if isinstance(k, str) and "recover" in k.lower():
            found[here] = v
        else:
            found.update(recover_keys(v, here))
    return found


def job_processes(tag):
    """(pid, environment entries) of every process of this job (its environment tag)."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if f"BENCH_RECOVERY_TAG={tag}".encode() in env:
            yield int(d), env


def worker_pids(tag, rank):
    """The processes of this job whose RANK is rank and that were not restarted."""
    return [pid for pid, env in job_processes(tag)
            if f"RANK={rank}".encode() in env and b"TORCHELASTIC_RESTART_COUNT=0" in env]


def has_recovery_option(launcher, option="--recovery"):
    r = subprocess.run([launcher, "--help"], capture_output=True, text=True)
    return option + " " in r.stdout + r.stderr


def standby_usage(tag):
    """RSS (kB) and CPU seconds so far of this job's standby process (DDP_STANDBY_FD in its
    environment), or None when it has none."""
    for pid, env in job_processes(tag):
        if not any(e.startswith(b"DDP_STANDBY_FD=") for e in env):
            continue
        try:
            with open(f"/proc/{pid}/status") as f:
                rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return {"rss_kb": rss, "cpu_s": (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")}
        except (OSError, StopIteration, ValueError, IndexError):
            continue
    return None


def command(mode, a, work, port):
    per_epoch = [f"--epochs={a.epochs}", f"--max_steps={a.steps_per_epoch}"]
    ck = os.path.join(work, "ck")
    if mode == "python":
        # --standalone: a c10d rendezvous on a free port. Its restart needs
        # TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (run_once): see SHARED_STORE_NOTE.
        return [a.torch2_python, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={a.nproc}",
                "--max_restarts=1", os.path.join(HERE, "recovery_twin.py"),
                f"--checkpoint_dir={ck}"] + per_epoch
    build = a.before_build if mode == BEFORE else a.build
    launch = [os.path.join(build, "bin", "ddp-launch"), f"--nproc_per_node={a.nproc}", "--max_restarts=1",
              f"--master_port={port}", f"--trace_file={os.path.join(work, 'trace.json')}",
              f"--summary_json={os.path.join(work, 'summary.json')}"]
    if a.has_recovery:
        launch.append("--recovery=in_place" if mode in ("in_place", "in_place_cold", BEFORE) else "--recovery=restart")
    if mode == "in_place_cold":
        launch.append("--recovery_standby=off")
    train = [os.path.join(build, "bin", "ddp-train"), "--device=cpu", "--log_interval=1",
             f"--checkpoint_dir={ck}"] + per_epoch
    if mode == "every":
        train.append(f"--checkpoint_every_steps={a.every}")
    return launch + train


def run_once(mode, a, work):
    """One job with one kill; returns the row of its measures (failed: the reason)."""
    tag = uuid.uuid4().hex
    env = dict(os.environ, BENCH_RECOVERY_TAG=tag, OMP_NUM_THREADS=str(max(1, (os.cpu_count() or 1) // a.nproc)))
    if mode == "python":
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"  # SHARED_STORE_NOTE
    proc = subprocess.Popen(command(mode, a, work, free_port()), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    expired = threading.Event()

    def expire():
        expired.set()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    timer = threading.Timer(a.timeout, expire)
    timer.start()
    lines, out, t_kill, victims, standby = [], [], None, [], None
    resumed_after = None  # index in lines of the first step after a "resumed from" line
    seen_resume = False
    try:
        for raw in proc.stdout:
            t = time.monotonic()
            text = raw.decode(errors="replace").rstrip("\n")
            out.append(text)
            if t_kill is not None and "resumed from" in text:
                seen_resume = True
            s = parse_step(text)
            if s is None:
                continue
            if seen_resume and resumed_after is None:
                resumed_after = len(lines)
            lines.append((t, s[0], s[1], s[2]))
            if not victims and t_kill is None:
                victims = worker_pids(tag, a.kill_rank)
            if t_kill is None and s[0] >= a.kill_step and (s[1] or 0) == 0:
                victims = [p for p in victims if os.path.exists(f"/proc/{p}")] or worker_pids(tag, a.kill_rank)
                if not victims:
                    return {"failed": f"no process of rank {a.kill_rank} to kill at step {s[0]}"}
                standby = standby_usage(tag) if mode == "in_place" else None
                t_kill = time.monotonic()
                for p in victims:
                    os.kill(p, signal.SIGKILL)
        rc = proc.wait()
    finally:
        timer.cancel()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    def failed(why):
        # The whole output kept where the bench's temporary files are not removed.
        fd, log = tempfile.mkstemp(prefix=f"bench-recovery-{mode}-failed-", suffix=".log")
        with os.fdopen(fd, "w") as f:
            f.write("\n".join(out) + "\n")
        return {"failed": f"{why} (its output: {log}): " + " | ".join(out[-3:])}

    if expired.is_set():
        return failed(f"not done after {a.timeout:g} s (--timeout); killed")
    if t_kill is None:
        return failed(f"exit {rc} before step {a.kill_step}")
    if rc != 0:
        return failed(f"exit {rc} after the kill")
    row = {"killed_pids": victims, "lines": len(lines)}
    if mode == "in_place":
        row["from_standby"] = any("starts in the standby process" in l for l in out)
        if standby:
            row["standby_rss_kb"], row["standby_cpu_s"] = standby["rss_kb"], standby["cpu_s"]
    if mode == "python":
        m = analyse(lines, t_kill, lambda i, l: (l[2] or 0) > 0)
        if m is not None and lines[m["post"]][3] is not None:
            m["inside_s"] = lines[m["post"]][3] - t_kill  # the twin's own stamp at the step's end
    else:
        tr = None
        path = os.path.join(work, "trace.json")
        if os.path.exists(path):
            with open(path) as f:
                tr = trace_recovery(json.load(f), a.kill_rank)
        if tr is not None:
            # The line of that step read after the kill; after a restart's "resumed
            # from" line where there is one (a step that was finishing when the
            # kill came may print the same number first).
            first = next((i for i, l in enumerate(lines) if l[0] > t_kill and l[1] == tr["step"]
                          and (resumed_after is None or i >= resumed_after)), None)
            m = analyse(lines, t_kill, lambda i, l: i == first)
            if m is not None:
                m["inside_s"] = tr["end_s"] - tr["death_s"]
        else:
            m = analyse(lines, t_kill, lambda i, l: resumed_after is not None and i >= resumed_after)
        summary = os.path.join(work, "summary.json")
        if os.path.exists(summary):
            with open(summary) as f:
                row["summary_recovery"] = recover_keys(json.load(f))
    if m is None:
        return {"failed": "no completed step after the failure found in the output"}
    row.update(m)
    return row


def fmt_s(x):
    return "–" if x is None else (f"{x * 1000:.0f} ms" if x < 1 else f"{x:.2f} s")


def median_of(rows, key):
    xs = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(xs) if xs else None


def label(mode, a):
    return {"python": "Python DDP, torchrun 2.11 --max_restarts 1, per-epoch checkpoints",
            "restart": "ddp-train, full restart, per-epoch checkpoints",
            "every": f"ddp-train, full restart, --checkpoint_every_steps {a.every}",
            "in_place": "ddp-train, in-place recovery" + (", from the standby process" if getattr(a, "has_standby", False) else ""),
            "in_place_cold": "ddp-train, in-place recovery, --recovery_standby off (a fresh process)",
            BEFORE: f"ddp-train, in-place recovery, --before_build {getattr(a, 'before_build', None)}"}[mode]


def table(results, a):
    out = ["| mode | to the next completed step (each round) | back at the failure step | completed steps redone | "
           "inside the job | runs failed |", "|---|---|---|---|---|---|"]
    for mode, rows in results.items():
        ok = [r for r in rows if "failed" not in r]
        each = ", ".join(fmt_s(r["next_step_s"]) for r in ok)
        redone = sorted({r["redone"] for r in ok})
        view = median_of(ok, "inside_s")
        out.append(f"| {label(mode, a)} | {fmt_s(median_of(ok, 'next_step_s'))} ({each}) | "
                   f"{fmt_s(median_of(ok, 'back_s'))} | {', '.join(map(str, redone)) or '–'} | "
                   f"{fmt_s(view)} | {len(rows) - len(ok)}/{len(rows)} |")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--before_build", help="also run the in_place mode with this build (the commit before a change)")
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps_per_epoch", type=int, default=60)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--every", type=int, default=10, help="--checkpoint_every_steps of the 'every' mode")
    ap.add_argument("--kill_step", type=int, help="global step after which a rank is killed "
                    "(default: mid-epoch 2, between two step checkpoints)")
    ap.add_argument("--kill_rank", type=int, default=1)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--short", action="store_true", help="2 ranks, 1 round, 16-step epochs: a check that it works")
    ap.add_argument("--timeout", type=float, default=900, help="seconds a job may take before it is killed")
    ap.add_argument("--torch2-python", dest="torch2_python", default=TORCH2_PY)
    ap.add_argument("--json", help="also write every run's measures here")
    ap.add_argument("--plot", default=PLOT, help="the picture (default docs/recovery.png)")
    ap.add_argument("--keep_trace", help="copy the plotted run's --trace_file here")
    ap.add_argument("--no-doc", dest="no_doc", action="store_true", help="leave docs/ alone")
    a = ap.parse_args()
    if a.short:
        a.nproc, a.rounds, a.steps_per_epoch, a.every = 2, 1, 16, 4
    if a.kill_step is None:
        a.kill_step = a.steps_per_epoch + a.steps_per_epoch // 2 + a.every // 2
    if not 0 <= a.kill_rank < a.nproc or not 0 < a.kill_step < a.epochs * a.steps_per_epoch:
        sys.exit(f"bench_recovery: --kill_rank {a.kill_rank} / --kill_step {a.kill_step} out of range "
                 f"(ranks 0..{a.nproc - 1}, steps 1..{a.epochs * a.steps_per_epoch - 1})")
    launcher = os.path.join(a.build, "bin", "ddp-launch")
    if not os.access(launcher, os.X_OK):
        sys.exit(f"bench_recovery: {launcher} is missing; build it (cmake --build {a.build} --target ddp-launch ddp-train)")
    a.has_recovery = has_recovery_option(launcher)
    a.has_standby = has_recovery_option(launcher, "--recovery_standby")
    modes = [m for m in a.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad:
        sys.exit(f"bench_recovery: unknown mode {bad[0]!r}; pick from {','.join(MODES)}")
    if "in_place" in modes and not a.has_recovery:
        print("in_place skipped: this ddp-launch has no --recovery", file=sys.stderr)
        modes.remove("in_place")
    if "in_place_cold" in modes and not a.has_standby:
        print("in_place_cold skipped: this ddp-launch has no --recovery_standby", file=sys.stderr)
        modes.remove("in_place_cold")
    if a.before_build:
        before = os.path.join(a.before_build, "bin", "ddp-launch")
        if "in_place" not in modes:
            sys.exit("bench_recovery: --before_build compares the in_place mode: keep in_place in --modes")
        if not os.access(before, os.X_OK) or not has_recovery_option(before):
            sys.exit(f"bench_recovery: --before_build: {before} is missing or has no --recovery; build it "
                     f"(cmake --build {a.before_build} --target ddp-launch ddp-train)")
        modes.insert(modes.index("in_place"), BEFORE)
    if "python" in modes and not os.access(a.torch2_python, os.X_OK):
        print(f"python skipped: {a.torch2_python} is missing (scripts/install-torch2)", file=sys.stderr)
        modes.remove("python")

    load_before = os.getloadavg()[0]
    results = {m: [] for m in modes}
    plotted = None
    keep = tempfile.mkdtemp(prefix="bench-recovery-trace-")
    for rnd in range(a.rounds):
        for mode in modes:
            print(f"round {rnd + 1}/{a.rounds}: {mode} ...", file=sys.stderr, flush=True)
            work = tempfile.mkdtemp(prefix=f"bench-recovery-{mode}-")
            try:
                row = run_once(mode, a, work)
                trace = os.path.join(work, "trace.json")
                if mode in ("in_place", "restart") and "failed" not in row and os.path.exists(trace):
                    if mode == "in_place" or plotted is None or plotted[0] != "in_place":
                        shutil.copy(trace, os.path.join(keep, f"{mode}.json"))
                        plotted = (mode, os.path.join(keep, f"{mode}.json"))
            finally:
                shutil.rmtree(work, ignore_errors=True)
            row["round"] = rnd + 1
            results[mode].append(row)
            print(f"  {json.dumps(row)}", file=sys.stderr, flush=True)
    load_after = os.getloadavg()[0]

    # The command as rerun: where this run wrote its own files is left out.
    shown, skip = [], False
    for arg in sys.argv[1:]:
        if skip or arg.split("=")[0] in ("--json", "--keep_trace", "--plot"):
            skip = not skip and "=" not in arg
            continue
        shown.append(arg)
    cmd = "bench/launcher/bench_recovery.py " + " ".join(shown)
    head = (f"`{cmd.strip()}`, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, load average "
            f"{load_before:.1f} before and {load_after:.1f} after. {a.nproc} ranks, Fashion-MNIST CNN, batch 64 a "
            f"rank, {a.steps_per_epoch} steps an epoch, rank {a.kill_rank} SIGKILLed when rank 0 reports global step "
            f"{a.kill_step} (epoch {(a.kill_step - 1) // a.steps_per_epoch + 1}, step "
            f"{(a.kill_step - 1) % a.steps_per_epoch + 1}), {a.rounds} round(s), median shown. Times from the kill, "
            "on the bench's clock, to rank 0's line of the step read by the bench. Inside the job, a check: "
            "ddp-train, the killed rank's exit to the end of that step in the --trace_file; the twin, its own "
            "time.monotonic() at the step's end." +
            (" " + SHARED_STORE_NOTE + "." if "python" in modes else ""))
    lines = table(results, a)
    used = [r for r in results.get("in_place", []) if "failed" not in r]
    if used and a.has_standby:
        rss = median_of(used, "standby_rss_kb")
        cpu = median_of(used, "standby_cpu_s")
        lines += ["", f"In-place runs whose returning rank started in the standby process: "
                      f"{sum(1 for r in used if r.get('from_standby'))}/{len(used)}. The standby (one idle process "
                      "per node, LibTorch loaded): RSS " + ("–" if rss is None else f"{rss / 1024:.0f} MiB") +
                      ", CPU " + ("–" if cpu is None else f"{cpu:.2f} s") + " spent at its start, none while it waits."]
    if "in_place" not in modes and "in_place" in a.modes:
        lines.append("| ddp-train, in-place recovery | skipped: this ddp-launch has no --recovery | | | | |")
    # The load before: the bench's own ranks raise the load after past the
    # cores on a small machine.
    if a.short or load_before > (os.cpu_count() or 1):
        head = ("**A short check on a loaded machine, not the measurement: rerun at full size on a quiet one "
                "(below).** " + head)
    body = "\n".join([head, ""] + lines)
    print(body)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": {k: v for k, v in vars(a).items()}, "results": results}, f, indent=1)
    drawn = False
    if plotted and a.plot:
        import plot_recovery
        if a.no_doc and a.plot == PLOT:
            print(f"(--no-doc: no picture in docs/; --plot PATH draws the {plotted[0]} run's trace)", file=sys.stderr)
        else:
            drawn = plot_recovery.plot(plotted[1], a.plot, f"{label(plotted[0], a)}: rank {a.kill_rank} SIGKILLed")
        if a.keep_trace:
            shutil.copy(plotted[1], a.keep_trace)
    shutil.rmtree(keep, ignore_errors=True)
    if not a.no_doc:
        picture = (f"\n\nThe {label(plotted[0], a)} run of the last round, drawn from its --trace_file "
                   "(bench/launcher/plot_recovery.py):\n\n![a recovery in the --trace_file](recovery.png)"
                   if drawn and a.plot == PLOT else "")
        update_doc.update("recovery-bench", "## Recovery: what one killed rank costs (issue 48)\n\n" + body + picture)
    if any("failed" in r for rows in results.values() for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
