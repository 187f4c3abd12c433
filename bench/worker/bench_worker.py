#!/usr/bin/env python3
"""What DDP costs, side by side: C++ (ddp-worker-bench on the worker runtime)
and Python (torch DistributedDataParallel, python_step.py), each trained
locally (no synchronisation) and with DDP in the same processes, for the MLP
and the Fashion-MNIST CNN; 2 processes under ddp-launch, one thread each, the
same data preloaded as tensors. Prints markdown:

  1. the overhead of DDP over the slowest rank's local step, C++ and
     Python, per round, with the median and spread of the rounds;
  2. C++ DDP configurations (bucket sizes, no overlap, private buckets);
  3. the timeline of a C++ DDP step (where the overhead goes);
  4. allreduce time through the runtime (shared memory on one machine) vs
     raw ProcessGroupGloo, also at the models' gradient sizes: the floors of
     the overhead on this machine.
C++ DDP also runs with DDP_SHM_ALLREDUCE=0 (its sums on Gloo, as Python's).

    python3 bench/worker/bench_worker.py [--build build] [--rounds 5] [--steps 30]

The driver needs no torch; the Python workers run under --python (default
/usr/bin/python3, Debian's python3-torch). Run on an otherwise idle machine.
"""
import argparse
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# ddp: the defaults (on the CPU one bucket up to 25 MiB: both models fit);
# first=1: Python's small first bucket (overlap); views=0: private buckets.
CPP_CONFIGS = "local,ddp,ddp:first=1,ddp:views=0,ddp:cap=1:first=1,ddp:cap=0.25:first=0.25"
PY_CONFIGS = "local,ddp,ddp:views=1"


def launch(build, argv, nproc, env_extra=None):
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    env.update(env_extra or {})
    cmd = [os.path.join(build, "bin", "ddp-launch"), "--use_env", f"--nproc_per_node={nproc}"] + argv
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=1800)
    if p.returncode != 0:
        sys.exit(f"bench_worker.py: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return p.stdout.splitlines()


def parse(lines):
    """RESULT lang model config ms buckets params batch / TIMELINE lang model config k=v ..."""
    results, timelines, allreduce = {}, {}, []
    for line in lines:
        f = line.split()
        if not f:
            continue
        if f[0] == "RESULT":
            results[(f[1], f[2], f[3])] = {"ms": float(f[4]), "buckets": int(f[5]), "params": int(f[6])}
        elif f[0] == "TIMELINE":
            timelines[(f[1], f[2], f[3])] = dict(kv.split("=", 1) for kv in f[4:])
        elif f[0] == "ALLREDUCE":
            allreduce.append((int(f[1]), float(f[2]), float(f[3])))
    return results, timelines, allreduce


def pct(x, base):
    return 100.0 * (x - base) / base


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--python", default="/usr/bin/python3", help="python3 with torch for the Python workers")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--cpp-configs", default=CPP_CONFIGS)
    a = ap.parse_args()
    bench = os.path.join(a.build, "bin", "ddp-worker-bench")
    for b in (bench, os.path.join(a.build, "bin", "ddp-launch")):
        if not os.access(b, os.X_OK):
            sys.exit(f"bench_worker.py: {b} is not built (cmake --build {a.build} --target ddp-launch ddp-worker-bench)")
    models = a.models.split(",")
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    load_before = open("/proc/loadavg").read().split()[:3]

    rounds = []  # per round: results and timelines of every run
    for rnd in range(a.rounds):
        res, tl = {}, {}
        for model in models:
            cpp = [bench, "step", f"model={model}", f"steps={a.steps}", f"batch={a.batch}", f"configs={a.cpp_configs}"]
            py_models = [model] + (["cnn-lac"] if model == "cnn" else [])
            pys = [[a.python, "-u", os.path.join(HERE, "python_step.py"), "--model", m, "--steps", str(a.steps),
                    "--batch", str(a.batch), "--configs", PY_CONFIGS] for m in py_models]
            # The same C++ DDP with its sums on Gloo's loopback TCP instead of
            # shared memory (what it did before; what Python DDP does).
            gloo = [bench, "step", f"model={model}", f"steps={a.steps}", f"batch={a.batch}", "configs=local,ddp"]
            runs = [(cpp, None, "")] + [(p, None, "") for p in pys] + [(gloo, {"DDP_SHM_ALLREDUCE": "0"}, ":gloo")]
            if rnd % 2:
                runs.reverse()  # alternate who goes first
            for argv, env_extra, suffix in runs:
                r, t, _ = parse(launch(a.build, argv, a.nproc, env_extra))
                res.update({(k[0], k[1], k[2] + suffix): v for k, v in r.items()})
                tl.update({(k[0], k[1], k[2] + suffix): v for k, v in t.items()})
        rounds.append((res, tl))

    grad_bytes = [rounds[0][0][("c++", model, "local")]["params"] * 4 for model in models]
    sizes = [k * 1024 for k in (4, 16, 64, 256, 1024, 4096, 16384)] + grad_bytes
    _, _, allreduce = parse(launch(a.build, [bench, "allreduce", "sizes=" + ",".join(map(str, sizes))], a.nproc))
    ar_by_bytes = {b: (w, r) for b, w, r in allreduce}
    # The floor: the same allreduce right after each rank computed for as
    # long as its local step (what a DDP step's gradients meet), raw Gloo.
    after_compute = {}
    for model, nbytes in zip(models, grad_bytes):
        local = statistics.median(r[0][("c++", model, "local-slowest")]["ms"] for r in rounds)
        _, _, ar = parse(launch(a.build, [bench, "allreduce", f"sizes={nbytes}", f"compute_ms={round(local)}"],
                                a.nproc))
        after_compute[model] = (ar[0][1], ar[0][2])  # through the runtime (shared memory), raw Gloo

    print(f"machine: {os.cpu_count()} cores, {cpu}, {a.nproc} processes, OMP_NUM_THREADS="
          f"{os.environ.get('OMP_NUM_THREADS', '1')}, batch {a.batch} per process, {a.steps} steps per config "
          f"(medians), {a.rounds} rounds; load average before {' '.join(load_before)}, after "
          f"{' '.join(open('/proc/loadavg').read().split()[:3])}")
    print()
    print("### DDP overhead over local training, C++ and Python side by side")
    print()
    print("Overhead over the **slowest rank's local step**: each step the ranks start together (a barrier), "
          "so a synchronous step cannot be shorter than the slowest rank's local one; that floor, per step "
          "the maximum over ranks, median over steps, is what DDP is measured against (rank 0's own local "
          "step is shorter by the ranks' skew, which is noise on a shared machine, not synchronisation). "
          "C++ DDP sums through shared memory (the default on one machine); the Gloo column is the same C++ "
          "DDP with DDP_SHM_ALLREDUCE=0, its sums on Gloo's loopback TCP as Python's are. Python: the better "
          "of its two DDP configurations each round.")
    print()
    print("| model | round | C++ local: rank 0 / slowest (ms) | C++ DDP (ms) | **C++ overhead** "
          "| C++ DDP on Gloo (ms), overhead | Python local: rank 0 / slowest (ms) | Python DDP (ms) "
          "| **Python overhead** |")
    print("|---|---|---|---|---|---|---|---|---|")
    summary = []
    for model in models + (["cnn-lac"] if "cnn" in models else []):
        cpp_model = "cnn" if model == "cnn-lac" else model
        label = "cnn (Python: Linear as conv)" if model == "cnn-lac" else model
        over_c, over_p, abs_c, abs_p = [], [], [], []
        for i, (res, _) in enumerate(rounds):
            cl, cd = res[("c++", cpp_model, "local")]["ms"], res[("c++", cpp_model, "ddp")]["ms"]
            cs = res[("c++", cpp_model, "local-slowest")]["ms"]
            pl, ps = res[("python", model, "local")]["ms"], res[("python", model, "local-slowest")]["ms"]
            pd = min(res[("python", model, "ddp")]["ms"], res[("python", model, "ddp:views=1")]["ms"])
            gs, gd = res[("c++", cpp_model, "local-slowest:gloo")]["ms"], res[("c++", cpp_model, "ddp:gloo")]["ms"]
            over_c.append(pct(cd, cs))
            over_p.append(pct(pd, ps))
            abs_c.append(cd - cs)
            abs_p.append(pd - ps)
            print(f"| {label} | {i + 1} | {cl:.2f} / {cs:.2f} | {cd:.2f} | **{pct(cd, cs):+.1f}%** | "
                  f"{gd:.2f}, {pct(gd, gs):+.1f}% | {pl:.2f} / {ps:.2f} | {pd:.2f} | **{pct(pd, ps):+.1f}%** |")
        summary.append((label, cpp_model, over_c, over_p, abs_c, abs_p))
    print()
    for label, cpp_model, over_c, over_p, abs_c, abs_p in summary:
        params = rounds[0][0][("c++", cpp_model, "local")]["params"]
        alone = ar_by_bytes[params * 4][0]
        local = statistics.median(r[0][("c++", cpp_model, "local-slowest")]["ms"] for r in rounds)
        floor, floor_gloo = after_compute[cpp_model]
        c, p = statistics.median(over_c), statistics.median(over_p)
        verdict = "met" if c <= 3.0 and c < p else "not met"
        print(f"- {label}: C++ DDP **{c:+.1f}%** over the slowest rank's local step = {statistics.median(abs_c):+.2f} ms "
              f"(median of {len(over_c)} rounds; spread {min(over_c):+.1f}% to {max(over_c):+.1f}%), "
              f"Python's best {p:+.1f}% = {statistics.median(abs_p):+.2f} ms (spread {min(over_p):+.1f}% to "
              f"{max(over_p):+.1f}%); goal ≤ 3% and below Python's: **{verdict}**. Allreducing all "
              f"{params * 4 / 1048576:.2f} MiB of gradients alone takes {alone:.2f} ms = {100 * alone / local:.1f}% "
              f"of that step ({local:.1f} ms), and right after a compute phase as long as it {floor:.2f} ms = "
              f"**{100 * floor / local:.1f}%** through shared memory (the floor of the runtime's overhead here), "
              f"{floor_gloo:.2f} ms = {100 * floor_gloo / local:.1f}% on raw ProcessGroupGloo (the floor of Python's).")
    print()
    print("### C++ DDP configurations (bucket sizes in MiB; ddp: the defaults, on the CPU one bucket of up to "
          "25 MiB sent after backward, summed through shared memory; first=1: Python's 1 MiB first bucket, sent during backward; views=0: "
          "private buckets, gradients copied in and out)")
    print()
    print("| model | config | buckets | step (ms), each round | vs local, each round |")
    print("|---|---|---|---|---|")
    for model in models:
        for cfg in a.cpp_configs.split(","):
            steps = [r[0][("c++", model, cfg)]["ms"] for r in rounds]
            locs = [r[0][("c++", model, "local")]["ms"] for r in rounds]
            buckets = rounds[0][0][("c++", model, cfg)]["buckets"] or "-"
            print(f"| {model} | {cfg} | {buckets} | {' / '.join(f'{s:.2f}' for s in steps)} | "
                  f"{' / '.join(f'{pct(s, l):+.1f}%' for s, l in zip(steps, locs))} |")
        steps = [r[0][("c++", model, "ddp:gloo")]["ms"] for r in rounds]
        locs = [r[0][("c++", model, "local:gloo")]["ms"] for r in rounds]
        print(f"| {model} | ddp, DDP_SHM_ALLREDUCE=0 (vs its own local run) | "
              f"{rounds[0][0][('c++', model, 'ddp:gloo')]['buckets']} | {' / '.join(f'{s:.2f}' for s in steps)} | "
              f"{' / '.join(f'{pct(s, l):+.1f}%' for s, l in zip(steps, locs))} |")
    print()
    print("### Timeline of a C++ DDP step (round 1, medians in ms)")
    print()
    print("forward includes zero_grad; backward = until autograd finished; end wait = from then until the averaged "
          "gradients are in .grad (the allreduces still running + the status exchange); per bucket (in launch order): "
          "size, delay from its last gradient to its launch (on Gloo and NCCL it includes the 1/world scaling; through shared memory the allreduce does that), allreduce time from "
          "launch to completion. The local row is the same model without DDP: the difference in backward is what "
          "the allreduces running beside autograd (and the hooks) cost it.")
    print()
    print("| model | config | forward | backward | end wait | optimizer | buckets: MiB, launch delay / allreduce |")
    print("|---|---|---|---|---|---|---|")
    for model in models:
        for cfg in a.cpp_configs.split(","):
            t = rounds[0][1].get(("c++", model, cfg))
            if not t:
                continue
            bk = []
            for item in filter(None, t["buckets"].split(",")):
                delay, ar, mb = item.split("/")
                bk.append(f"{float(mb[:-2]):.2f}: {float(delay):.2f} / {float(ar):.2f}")
            print(f"| {model} | {cfg} | {float(t['fwd']):.2f} | {float(t['bwd']):.2f} | {float(t['end_wait']):.2f} | "
                  f"{float(t['opt']):.2f} | {'; '.join(bk)} |")
    print()
    print("### Allreduce: through the runtime (shared memory) vs raw ProcessGroupGloo (order alternating, medians)")
    print()
    print("| message | ddp_worker allreduce (ms) | MiB/s | raw ProcessGroupGloo (ms) | MiB/s |")
    print("|---|---|---|---|---|")
    for b, w, r in allreduce:
        size = f"{b / 1024:.0f} KiB" if b < 1048576 else f"{b / 1048576:.2f} MiB"
        print(f"| {size} | {w:.3f} | {b / 1048576 / (w / 1000):.0f} | {r:.3f} | {b / 1048576 / (r / 1000):.0f} |")


if __name__ == "__main__":
    main()
