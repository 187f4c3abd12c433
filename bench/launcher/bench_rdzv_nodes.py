#!/usr/bin/env python3
"""c10d rendezvous: N simulated nodes on one machine, ddp-launch beside torchrun, in one run.

Each node is a launcher with --nnodes N --nproc_per_node 1 --rdzv_backend c10d
at one endpoint (127.0.0.1 and a free port), its one worker /bin/true; all N
are started at once. Measured per launcher count:
  - join-to-exit wall time: from the first node's start until every node has
    exited (the rendezvous, the workers, the exit barrier);
  - per node: CPU time (user + system) and peak RSS of the launcher and
    everything it started (its rendezvous helper, its worker), as GNU time
    reports them (wait4 of the launcher; a process forked from this Python
    would count Python's own RSS from before its exec).
The reference is stock torchrun (torch 2.11 of the pip wheel, --torch2-python)
with the same arguments and --no_python. Writes its table into
docs/benchmarks.md (rdzv-nodes-bench).
Usage: bench/launcher/bench_rdzv_nodes.py [--nodes 8,32,64] [--torchrun-nodes 8,32] [--runs 2]
"""
import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import update_doc  # noqa: E402

TIME = "/usr/bin/time"  # GNU time (Debian: time; scripts/install-deps --test)
TORCH2_PY = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "ddp-launch",
                         "torch-2.11.0", "venv", "bin", "python3")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_nodes(argv_of, n):
    """Starts n nodes at once; returns (wall s, [cpu s per node], [peak RSS MiB per node], failures)."""
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1", LOGLEVEL="ERROR")
    with tempfile.TemporaryDirectory() as tmp:
        outs = [os.path.join(tmp, f"node{i}") for i in range(n)]
        t0 = time.perf_counter()
        procs = [subprocess.Popen([TIME, "-f", "%M %U %S", "-o", out] + argv_of(port, n), env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for out in outs]
        failed = sum(p.wait() != 0 for p in procs)
        wall = time.perf_counter() - t0
        cpu, rss = [], []
        for out in outs:
            kib, user, system = open(out).read().split()[-3:]
            cpu.append(float(user) + float(system))
            rss.append(int(kib) / 1024)
    return wall, cpu, rss, failed


def cpu_text(s):
    # GNU time counts in 10 ms ticks.
    return "< 10 ms" if s < 0.005 else f"{s * 1000:.0f} ms"


def ddp_launch(binary):
    return lambda port, n: [binary, f"--nnodes={n}", "--nproc_per_node=1", "--rdzv_backend=c10d",
                            f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=bench", "--use_env", "/bin/true"]


def torchrun(py):
    return lambda port, n: [py, "-m", "torch.distributed.run", f"--nnodes={n}", "--nproc_per_node=1",
                            "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=bench",
                            "--no_python", "/bin/true"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--nodes", default="8,32,64")
    # 64 torchrun nodes did not finish within 10 minutes on the 2-core development machine.
    ap.add_argument("--torchrun-nodes", default="8,32")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--torch2-python", default=TORCH2_PY)
    ap.add_argument("--no-doc", action="store_true")
    a = ap.parse_args()
    binary = os.path.join(a.build, "bin", "ddp-launch")
    # The static case for comparison: one node, no rendezvous helper.
    static = lambda port, n: [binary, "--standalone", "--nproc_per_node=1", "--use_env", "/bin/true"]  # noqa: E731
    launchers = [("ddp-launch, static (`--standalone`)", static, [1]),
                 ("ddp-launch", ddp_launch(binary), [int(x) for x in a.nodes.split(",")])]
    if os.path.exists(a.torch2_python):
        launchers.append(("torchrun 2.11", torchrun(a.torch2_python), [int(x) for x in a.torchrun_nodes.split(",")]))
    rows = []
    for name, argv_of, counts in launchers:
        for n in counts:
            walls, cpus, rsss, fails = [], [], [], 0
            for _ in range(a.runs):
                wall, cpu, rss, failed = run_nodes(argv_of, n)
                walls.append(wall)
                cpus += cpu
                rsss += rss
                fails += failed
            row = (f"| {name} | {n} | {statistics.median(walls):.2f} s ({min(walls):.2f}–{max(walls):.2f}) | "
                   f"{cpu_text(statistics.median(cpus))} | {statistics.median(rsss):.1f} MiB | "
                   f"{fails}/{n * a.runs} |")
            print(row, flush=True)
            rows.append(row)
    loadavg = os.getloadavg()[0]
    body = "\n".join([
        "## Launcher: c10d rendezvous with N nodes on one machine",
        "",
        f"c10d rendezvous, N nodes on one machine (`bench/launcher/bench_rdzv_nodes.py --runs {a.runs}`, "
        f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, load average {loadavg:.1f} at the end): every "
        "node `--nnodes N --nproc_per_node 1 --rdzv_backend c10d` at one endpoint, its worker `/bin/true`, all N "
        "started at once. Wall: first start to last exit, median (range) of the runs. Per node: the launcher and "
        "everything it started (rendezvous helper, worker), medians over every node of every run, as GNU time "
        "reports them (CPU in 10 ms ticks). torchrun at 64 nodes is left out: on this 2-core machine 64 "
        "torchrun nodes had not finished after 10 minutes (2026-12-02, `--torchrun-nodes 64 --runs 1` under "
        "`timeout 600`; 18 of 23 GiB in use at the peak).",
        "",
        "| launcher | nodes | wall | CPU per node | peak RSS per node | nodes failed |",
        "|---|---|---|---|---|---|",
        *rows,
    ])
    print(body)
    if not a.no_doc:
        update_doc.update("rdzv-nodes-bench", body)


if __name__ == "__main__":
    main()
