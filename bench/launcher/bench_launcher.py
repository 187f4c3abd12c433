#!/usr/bin/env python3
"""Launcher benchmark: ddp-launch vs spawning directly vs torchrun, in one run.

1. Launch overhead: --nproc_per_node=4 of /bin/true, wall time from spawn to
   exit. Baseline: posix_spawn of the 4 processes directly and waiting.
2. Teardown latency: 4 workers; rank 1 exits 1 once all are up, the others
   exit on SIGTERM. Latency = launcher exit - rank 1's exit timestamp.
3. stderr throughput: 2 workers each write --stream-mib MiB of 56-byte lines
   to stderr (`yes | head -c`), the launcher's stderr on /dev/null: plain
   (every worker's stderr passes through the launcher, which keeps its tail
   for the report) and with `--tee 3 --log_dir` (prefixed lines to the
   console and the raw bytes to the files). Baseline: the same workers
   spawned directly, their stderr on /dev/null, and on a file each.

torchrun 1.13 is Debian's python3-torch through bench/torchrun_patched.py
(the stock one crashes on Python 3.11); torchrun 2.11 is the stock one of the
pip wheel (--torch2-python, default: the interpreter scripts/install-torch2
made, when present). Writes its table into docs/benchmarks.md.
Usage: bench/launcher/bench_launcher.py [--runs N] [--torch2-python PY] [--stream-mib N]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import update_doc  # noqa: E402

LAUNCH = os.path.join(ROOT, "build", "bin", "ddp-launch")
TORCH_PY = "/usr/bin/python3"
TORCHRUN = [TORCH_PY, os.path.join(ROOT, "bench", "torchrun_patched.py")]
TORCH2_PY = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "ddp-launch",
                         "torch-2.11.0", "venv", "bin", "python3")
TRUE = shutil.which("true") or "/bin/true"

TEARDOWN_WORKER = r"""#!/bin/sh
trap 'exit 0' TERM
: > "$OUT/ready.$RANK"
if [ "$RANK" = 1 ]; then
  while [ "$(ls "$OUT" | grep -c '^ready\.')" -lt "$WORLD_SIZE" ]; do sleep 0.01; done
  date +%s%N > "$OUT/failed_at"
  exit 1
fi
while :; do sleep 30 & wait $!; done
"""


STREAM_WORKER = r"""#!/bin/sh
yes "ddp-launch stderr throughput: 0123456789 abcdefghijklmn" | head -c "$BYTES" >&2
"""


def have_torchrun(py=TORCH_PY):
    return os.path.exists(py) and subprocess.run(
        [py, "-c", "import torch.distributed.run"], capture_output=True).returncode == 0


def spawn_wait(argv, env=None):
    pid = os.posix_spawn(argv[0], argv, env if env is not None else os.environ)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def time_direct(n=4):
    t0 = time.perf_counter()
    pids = [os.posix_spawn(TRUE, [TRUE], os.environ) for _ in range(n)]
    for p in pids:
        os.waitpid(p, 0)
    return time.perf_counter() - t0


def time_cmd(argv, env):
    t0 = time.perf_counter()
    spawn_wait(argv, env)
    return time.perf_counter() - t0


def quiet_env(port):
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = "1"  # silences both launchers' OMP notice
    env["MASTER_PORT"] = str(port)
    return env


def build_min_launch(work):
    """bench/launcher/min_launch.c built with cc: a launcher that only spawns
    and waits, the floor of any launcher's overhead. None without a compiler."""
    exe = os.path.join(work, "min_launch")
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc or subprocess.run([cc, "-O2", "-o", exe, os.path.join(HERE, "min_launch.c")]).returncode != 0:
        return None
    return exe


def launch_overhead(runs, torch_runs, torchruns, min_launch):
    env = quiet_env(0)
    devnull = os.open(os.devnull, os.O_WRONLY)
    saved = os.dup(2)
    os.dup2(devnull, 2)  # torchrun's banner
    try:
        direct, floor, ours = [], [], []
        for _ in range(runs):  # interleaved: the machine's load moves all three alike
            direct.append(time_direct())
            if min_launch:
                floor.append(time_cmd([min_launch, "4", TRUE], env))
            # --use_env: the workers run the same argv as the direct baseline (with
            # --local_rank=N, /bin/true would also load its locale).
            ours.append(time_cmd([LAUNCH, "--nproc_per_node=4", "--standalone", "--use_env", TRUE], env))
        theirs = [[time_cmd(t + ["--nproc_per_node=4", "--standalone", "--no_python", TRUE], env)
                   for _ in range(torch_runs)] for t in torchruns]
    finally:
        os.dup2(saved, 2)
    return direct, floor, ours, theirs


def teardown_latency(argv_prefix, runs):
    out = []
    for _ in range(runs):
        d = tempfile.mkdtemp(prefix="ddp-bench-")
        try:
            worker = os.path.join(d, "worker.sh")
            with open(worker, "w") as f:
                f.write(TEARDOWN_WORKER)
            os.chmod(worker, 0o755)
            env = quiet_env(0)
            env["OUT"] = d
            proc = subprocess.Popen(argv_prefix + [worker], env=env, stderr=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL)
            proc.wait()
            end_ns = time.time_ns()
            with open(os.path.join(d, "failed_at")) as f:
                out.append((end_ns - int(f.read())) / 1e9)
        finally:
            shutil.rmtree(d, ignore_errors=True)
    return out


def stream_throughput(runs, mib):
    """MiB/s of all workers' stderr: direct to /dev/null, direct to files, plain ddp-launch, --tee 3."""
    d = tempfile.mkdtemp(prefix="ddp-bench-")
    try:
        worker = os.path.join(d, "stream.sh")
        with open(worker, "w") as f:
            f.write(STREAM_WORKER)
        os.chmod(worker, 0o755)
        env = quiet_env(0)
        env["BYTES"] = str(mib << 20)
        total = 2 * mib
        devnull = os.open(os.devnull, os.O_WRONLY)

        def direct(to_files):
            t0 = time.perf_counter()
            procs = []
            for r in range(2):
                err = open(os.path.join(d, f"direct{r}.log"), "wb") if to_files else devnull
                procs.append(subprocess.Popen([worker], env=env, stderr=err))
                if to_files:
                    err.close()
            for p in procs:
                p.wait()
            return time.perf_counter() - t0

        def launched(extra):
            logs = os.path.join(d, "logs")
            shutil.rmtree(logs, ignore_errors=True)
            t0 = time.perf_counter()
            subprocess.run([LAUNCH, "--nproc_per_node=2", "--standalone", "--use_env"] + extra + [worker], env=env,
                           stderr=devnull, stdout=devnull)
            return time.perf_counter() - t0

        rows = {
            "direct": [direct(False) for _ in range(runs)],
            "direct_files": [direct(True) for _ in range(runs)],
            "plain": [launched([]) for _ in range(runs)],
            "tee": [launched(["--tee", "3", "--log_dir", os.path.join(d, "logs")]) for _ in range(runs)],
        }
        os.close(devnull)
        return {k: total / statistics.median(v) for k, v in rows.items()}
    finally:
        shutil.rmtree(d, ignore_errors=True)


def ms(xs):
    return f"{statistics.median(xs) * 1e3:.1f}" if xs else "n/a"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--torch-runs", type=int, default=3, help="torchrun is slow; fewer runs")
    ap.add_argument("--stream-mib", type=int, default=256, help="MiB of stderr per worker for the throughput rows")
    ap.add_argument("--stream-runs", type=int, default=5)
    ap.add_argument("--torch2-python", default=TORCH2_PY, help="python3 with torch 2.x for the torchrun 2.x column")
    args = ap.parse_args()
    if not os.access(LAUNCH, os.X_OK):
        sys.exit(f"bench_launcher: {LAUNCH} is missing; run scripts/build first")
    # (name, argv prefix) of each torchrun found: 1.13 patched, 2.x stock.
    torchruns = []
    if have_torchrun():
        torchruns.append(("torchrun 1.13", TORCHRUN))
    if have_torchrun(args.torch2_python):
        ver = subprocess.run([args.torch2_python, "-c", "import torch; print(torch.__version__.split('+')[0])"],
                             capture_output=True, text=True).stdout.strip()
        torchruns.append((f"torchrun {ver}", [args.torch2_python, "-m", "torch.distributed.run"]))

    with tempfile.TemporaryDirectory() as work:
        direct, floor, ours, theirs = launch_overhead(args.runs, args.torch_runs, [t for _, t in torchruns],
                                                      build_min_launch(work))
    td_ours = teardown_latency([LAUNCH, "--nproc_per_node=4", "--standalone", "--use_env"], args.runs)
    td_theirs = [teardown_latency(t + ["--nproc_per_node=4", "--standalone", "--no_python"], args.torch_runs)
                 for _, t in torchruns]

    tp = stream_throughput(args.stream_runs, args.stream_mib)

    over = (statistics.median(ours) - statistics.median(direct)) * 1e3
    # Per-round differences (each round ran direct, the floor and ours in turn).
    over_rounds = statistics.median(o - d for o, d in zip(ours, direct)) * 1e3
    floor_rounds = statistics.median(f - d for f, d in zip(floor, direct)) * 1e3 if floor else None
    speedups = [f"{name} / ddp-launch: **{statistics.median(t) / statistics.median(ours):.0f}×**"
                for (name, _), t in zip(torchruns, theirs)]
    names = [name for name, _ in torchruns]
    lines = [
        "## Launcher (issue: foundation and launcher core)",
        "",
        f"`bench/launcher/bench_launcher.py --runs {args.runs}`, {time.strftime('%Y-%m-%d')}, "
        f"{os.cpu_count()} cores; medians in ms. torchrun 1.13 = Debian python3-torch via "
        "`bench/torchrun_patched.py`; torchrun 2.x = the pip wheel's, stock"
        + ("" if torchruns else " (neither installed: skipped)") + f"; {args.torch_runs} runs each.",
        "",
        "| measurement | direct spawn | ddp-launch | " + " | ".join(names) + " | goal |",
        "|---|---|---|" + "---|" * len(names) + "---|",
        f"| launch 4 × /bin/true (`--use_env`), wall | {ms(direct)} | {ms(ours)} | "
        + "".join(f"{ms(t)} | " for t in theirs) + "≤ direct + 5 ms; > 100× faster than torchrun |",
        f"| teardown: worker failure → launcher exit | – | {ms(td_ours)} | "
        + "".join(f"{ms(t)} | " for t in td_theirs) + "< 50 ms |",
        f"| stderr, 2 × {args.stream_mib} MiB, plain launch (MiB/s) | {tp['direct']:.0f} | {tp['plain']:.0f} | "
        + "– | " * len(names) + "≥ 200 MiB/s |",
        f"| stderr, 2 × {args.stream_mib} MiB, `--tee 3 --log_dir` (MiB/s; direct: to a file each) | "
        f"{tp['direct_files']:.0f} | {tp['tee']:.0f} | " + "– | " * len(names) + "≥ 100 MiB/s |",
        "",
        f"ddp-launch overhead above direct spawning: **{over:.1f} ms**"
        + ("; " + "; ".join(speedups) + "." if speedups else "."),
        f"Median of the per-round differences (direct, then a minimal launcher, then ddp-launch, each "
        f"round): ddp-launch **+{over_rounds:.2f} ms**"
        + (f"; a launcher that only spawns and waits (`bench/launcher/min_launch.c`: posix_spawn × 4, "
           f"waitpid × 4) **+{floor_rounds:.2f} ms**, the floor of any launcher: its own exec and exit"
           if floor_rounds is not None else "; no C compiler for the minimal launcher's floor") + ".",
        f"Teardown spread (ddp-launch): min {min(td_ours) * 1e3:.1f} ms, max {max(td_ours) * 1e3:.1f} ms.",
    ]
    table = "\n".join(lines)
    print(table)
    update_doc.update("launcher-bench", table)


if __name__ == "__main__":
    main()
