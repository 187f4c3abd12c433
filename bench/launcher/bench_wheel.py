#!/usr/bin/env python3
"""The Python wheel: its size, and the installed launcher's start beside the CMake build's, in one run.

Uses the wheel and the venv that the wheel's tests make (build/wheel-test:
`ctest --test-dir build -R '^wheel:'`). Start-up: `ddp-launch --standalone
--nproc_per_node 4 --use_env /bin/true`, wall time from spawn to exit, the two
binaries alternating, median and p90 of --runs launches each. Writes its
table into docs/benchmarks.md (wheel-bench).
Usage: bench/launcher/bench_wheel.py [--build build] [--runs 300]
"""
import argparse
import glob
import os
import statistics
import sys
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import update_doc  # noqa: E402


def launch_s(binary):
    argv = [binary, "--standalone", "--nproc_per_node=4", "--use_env", "/bin/true"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    devnull = os.open(os.devnull, os.O_WRONLY)
    t0 = time.perf_counter()
    pid = os.posix_spawn(binary, argv, env, file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1),
                                                          (os.POSIX_SPAWN_DUP2, devnull, 2)])
    os.waitpid(pid, 0)
    dt = time.perf_counter() - t0
    os.close(devnull)
    return dt


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--no-doc", action="store_true")
    a = ap.parse_args()
    wheels = glob.glob(os.path.join(a.build, "wheel-test", "repaired", "*.whl"))
    venv = os.path.join(a.build, "wheel-test", "venv")
    if not wheels or not os.path.exists(os.path.join(venv, "bin", "ddp-launch")):
        sys.exit(f"bench_wheel: no wheel under {a.build}/wheel-test: run ctest --test-dir {a.build} -R '^wheel:' first")
    wheel = wheels[0]
    with zipfile.ZipFile(wheel) as z:
        files = {os.path.basename(i.filename): i.file_size for i in z.infolist() if "/scripts/" in i.filename and not i.is_dir()}
    ours = {"CMake build": os.path.join(a.build, "bin", "ddp-launch"), "wheel (venv)": os.path.join(venv, "bin", "ddp-launch")}
    times = {k: [] for k in ours}
    for _ in range(a.runs):
        for k, b in ours.items():
            times[k].append(launch_s(b))

    def q(xs, p):
        return sorted(xs)[int(p * (len(xs) - 1))] * 1000

    rows = [f"| {k} | {statistics.median(v) * 1000:.2f} ms | {q(v, 0.9):.2f} ms |" for k, v in times.items()]
    body = "\n".join([
        "## The Python wheel: size and start-up",
        "",
        f"The Python wheel (`bench/launcher/bench_wheel.py --runs {a.runs}`, {time.strftime('%Y-%m-%d')}, load "
        f"average {os.getloadavg()[0]:.1f}): `{os.path.basename(wheel)}` is **{os.path.getsize(wheel) / 1e6:.2f} MB** "
        "(goal: under 5 MB); inside, " + ", ".join(f"`{n}` {s / 1e6:.2f} MB" for n, s in sorted(files.items())) +
        " uncompressed. Start-up of the installed launcher beside the CMake build's, 4 × `/bin/true`, the two "
        "alternating:",
        "",
        "| ddp-launch | median | p90 |",
        "|---|---|---|",
        *rows,
    ])
    print(body)
    if not a.no_doc:
        update_doc.update("wheel-bench", body)


if __name__ == "__main__":
    main()
