#!/usr/bin/env python3
"""ddp-train under different malloc settings, rounds interleaved.

One process, one epoch of --steps steps (the first epoch is where glibc's
default thresholds hurt: until an evaluation frees a large block, every step
maps, unmaps and faults in its activations), --num_threads 1 so that CPU
time is the model's work and not OpenMP spinning on a shared machine.
Variants: glibc's defaults (DDP_MALLOC_TUNING=0), the runtime's settings
(malloc_tuning.h, the default), and jemalloc / tcmalloc via LD_PRELOAD when
Debian's libjemalloc2 / libtcmalloc-minimal4 are installed. Reports medians
of samples/s (training steps only), minor page faults and system CPU
seconds (GNU time) and peak RSS.

    python3 bench/train/bench_malloc.py --build build --steps 100 --rounds 4
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile

LIB = "/usr/lib/x86_64-linux-gnu"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_once(binary, steps, extra_env):
    work = tempfile.mkdtemp(prefix="bench-malloc-")
    try:
        env = dict(os.environ, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), **extra_env)
        usage = os.path.join(work, "usage")
        cmd = ["/usr/bin/time", "-f", "%R %S %M", "-o", usage, binary, "--epochs=1", f"--max_steps={steps}",
               "--num_threads=1", "--log_interval=1000000", f"--checkpoint_dir={work}/ck"]
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if p.returncode != 0:
            sys.exit(f"ddp-train failed ({extra_env}):\n{p.stdout[-2000:]}")
        faults, sys_s, rss_kib = open(usage).read().split()[-3:]
        rec = json.loads(open(f"{work}/ck/metrics.jsonl").readline())
        return {"sps": rec["samples_per_second"], "faults": int(faults), "sys": float(sys_s),
                "rss": int(rss_kib) / 1024}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default="build")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--rounds", type=int, default=4)
    a = p.parse_args()
    binary = os.path.join(a.build, "bin", "ddp-train")
    variants = [("glibc defaults (DDP_MALLOC_TUNING=0)", {"DDP_MALLOC_TUNING": "0"}),
                ("runtime's mallopt settings (default)", {})]
    for name, lib in [("jemalloc (LD_PRELOAD)", "libjemalloc.so.2"), ("tcmalloc (LD_PRELOAD)", "libtcmalloc_minimal.so.4")]:
        if os.path.exists(os.path.join(LIB, lib)):
            variants.append((name, {"DDP_MALLOC_TUNING": "0", "LD_PRELOAD": os.path.join(LIB, lib)}))
    runs = {name: [] for name, _ in variants}
    load_before = os.getloadavg()[0]
    for r in range(a.rounds):
        for name, env in variants:  # interleaved: background load hits every variant alike
            print(f"round {r + 1}/{a.rounds}: {name} ...", file=sys.stderr, flush=True)
            runs[name].append(run_once(binary, a.steps, env))
    load_after = os.getloadavg()[0]
    med = statistics.median
    base = med([x["sps"] for x in runs[variants[0][0]]])
    print(f"1 process, 1 thread, batch 64, 1 epoch of {a.steps} steps (the first epoch), {a.rounds} rounds "
          f"interleaved, medians; load average {load_before:.1f} before, {load_after:.1f} after\n")
    print("| malloc | samples/s (each round) | vs glibc defaults | minor faults (whole run) | sys s | peak RSS MiB |")
    print("|---|---|---|---|---|---|")
    for name, _ in variants:
        xs = runs[name]
        sps = med([x["sps"] for x in xs])
        each = ", ".join(f"{x['sps']:.0f}" for x in xs)
        print(f"| {name} | {sps:.0f} ({each}) | {sps / base:.2f}x | "
              f"{med([x['faults'] for x in xs]) / 1000:.0f}k | {med([x['sys'] for x in xs]):.2f} | "
              f"{med([x['rss'] for x in xs]):.0f} |")


if __name__ == "__main__":
    main()
