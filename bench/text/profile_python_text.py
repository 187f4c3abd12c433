#!/usr/bin/env python3
"""Where python_text.py's training step spends its time, phase by phase.

Runs the twin's model, data, batch, Adam and threads (python_text.py's rule)
for --steps steps after --warmup and prints, on rank 0:
  1. the step without DDP (the same module and optimizer), under torch.profiler,
     split into phases: batch (index_select + narrow), zero_grad, embedding /
     convolutions / fc forward (module hooks), relu + mask + max + cat + loss
     forward (the rest of the forward), and the backward by autograd node
     (conv, relu + mask + max, embedding, fc + loss, gradient accumulation),
     then Adam's step;
  2. the wall time per step without the profiler: local, and wrapped in DDP
     (find_unused_parameters=True) when launched with more than one process,
     and one Gloo all_reduce of all gradients (one flat tensor) for scale.
Run alone (world 1) or under a launcher:
    PYTHON_EXEC=/usr/bin/python3 ddp-launch --nproc_per_node=2 bench/text/profile_python_text.py --data_dir D
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import python_text as pt  # noqa: E402

# Autograd nodes -> phase (the rest goes to "other backward").
BACKWARD = {"ConvolutionBackward0": "conv backward", "MkldnnConvolutionBackward0": "conv backward",
            "EmbeddingBackward0": "embedding backward",
            "ReluBackward0": "relu + mask + max backward", "MaskedFillBackward0": "relu + mask + max backward",
            "MaxBackward0": "relu + mask + max backward", "CatBackward0": "relu + mask + max backward",
            "AddmmBackward0": "fc + dropout + loss backward", "TBackward0": "fc + dropout + loss backward",
            "NllLossBackward0": "fc + dropout + loss backward", "LogSoftmaxBackward0": "fc + dropout + loss backward",
            "MulBackward0": "fc + dropout + loss backward", "NativeDropoutBackward0": "fc + dropout + loss backward",
            "torch::autograd::AccumulateGrad": "accumulate grad"}
ORDER = ["batch (index_select + narrow)", "zero_grad", "embedding forward", "conv forward",
         "relu + mask + max + cat forward", "fc + dropout + loss forward", "fc + dropout + loss backward",
         "relu + mask + max backward", "conv backward", "embedding backward", "accumulate grad",
         "other backward", "Adam step"]


def scoped(module, name):
    """Wrap each call of module in a profiler scope (forward pre/post hooks)."""
    scope = {}

    def pre(_m, _in):
        scope["r"] = record_function(name)
        scope["r"].__enter__()

    def post(_m, _in, _out):
        scope.pop("r").__exit__(None, None, None)
    module.register_forward_pre_hook(pre)
    module.register_forward_hook(post)


def make_step(model, optimizer, train, batch, order, device):
    def step(s):
        n = len(order) // batch
        idx = order[(s % n) * batch:(s % n + 1) * batch]
        with record_function("phase: batch"):
            tokens, lengths, y = train.batch(idx, device)
        with record_function("phase: zero_grad"):
            optimizer.zero_grad()
        with record_function("phase: forward"):
            loss = F.cross_entropy(model(tokens, lengths), y)
        with record_function("phase: backward"):
            loss.backward()
        with record_function("phase: adam"):
            optimizer.step()
        return loss.item()
    return step


def phases(prof, steps):
    totals = {}
    ev = {e.key: e.cpu_time_total / 1000.0 / steps for e in prof.key_averages()}  # ms per step
    nodes = {k[len("autograd::engine::evaluate_function: "):]: v for k, v in ev.items()
             if k.startswith("autograd::engine::evaluate_function: ")}

    def add(name, ms):
        totals[name] = totals.get(name, 0.0) + ms
    add("batch (index_select + narrow)", ev.get("phase: batch", 0))
    add("zero_grad", ev.get("phase: zero_grad", 0))
    modules = {n: ev.get(f"module: {n}", 0) for n in ("embedding", "conv", "fc", "dropout")}
    add("embedding forward", modules["embedding"])
    add("conv forward", modules["conv"])
    add("fc + dropout + loss forward", modules["fc"] + modules["dropout"])
    rest = ev.get("phase: forward", 0) - sum(modules.values())
    add("relu + mask + max + cat forward", rest)  # includes cross_entropy: moved below
    loss_fwd = ev.get("aten::cross_entropy_loss", 0)
    totals["relu + mask + max + cat forward"] -= loss_fwd
    add("fc + dropout + loss forward", loss_fwd)
    known = 0.0
    for node, ms in nodes.items():
        add(BACKWARD.get(node, "other backward"), ms)
        known += ms
    add("other backward", ev.get("phase: backward", 0) - known)  # engine overhead, the hooks' own time
    add("Adam step", ev.get("phase: adam", 0))
    return totals


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data_dir", default="text-data")
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--max_length", type=int, default=64)
    p.add_argument("--local_rank", "--local-rank", type=int, default=0)
    a = p.parse_args()
    if "OMP_NUM_THREADS" not in os.environ:  # python_text.py's rule
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_world))
    device = torch.device("cpu")
    train, _test, vocab, classes = pt.load_data(a.data_dir, a.max_length)
    rank, world = pt.init_distributed("cpu")
    g = torch.Generator().manual_seed(42 + rank)
    order = torch.randperm(len(train), generator=g)

    torch.manual_seed(42)
    local = pt.TextCnn(vocab, classes)
    for name in ("embedding", "conv3", "conv4", "conv5", "fc", "dropout"):
        scoped(getattr(local, name), "module: " + name.rstrip("345"))
    opt = torch.optim.Adam(local.parameters(), lr=1e-3)
    step = make_step(local, opt, train, a.batch_size, order, device)
    for s in range(a.warmup):
        step(s)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for s in range(a.steps):
            step(a.warmup + s)
    totals = phases(prof, a.steps)

    def wall(fn, first):
        times = []
        for s in range(first, first + a.steps):
            t0 = time.perf_counter()
            fn(s)
            times.append((time.perf_counter() - t0) * 1000)
        return statistics.median(times)
    local_ms = wall(step, a.warmup + a.steps)
    ddp_ms = allreduce_ms = None
    if world > 1:
        torch.manual_seed(42)
        inner = pt.TextCnn(vocab, classes)
        ddp = DistributedDataParallel(inner, find_unused_parameters=True)
        dopt = torch.optim.Adam(ddp.parameters(), lr=1e-3)
        dstep = make_step(ddp, dopt, train, a.batch_size, order, device)
        for s in range(a.warmup):
            dstep(s)
        ddp_ms = wall(dstep, a.warmup)
        flat = torch.zeros(sum(q.numel() for q in inner.parameters()))
        times = []
        for _ in range(a.steps):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(flat)
            times.append((time.perf_counter() - t0) * 1000)
        allreduce_ms = statistics.median(times)

    if rank == 0:
        profiled = sum(totals.values())
        params = sum(q.numel() for q in local.parameters())
        print(f"python_text step profile: torch {torch.__version__}, world {world}, batch {a.batch_size}, "
              f"{torch.get_num_threads()} thread(s), {a.steps} steps after {a.warmup}, {params} parameters "
              f"({local.embedding.weight.numel()} in the embedding), load average {os.getloadavg()[0]:.1f}")
        print("| phase (profiled, no DDP) | ms/step | share |")
        print("|---|---|---|")
        for k in ORDER:
            print(f"| {k} | {totals.get(k, 0):.2f} | {100 * totals.get(k, 0) / profiled:.1f}% |")
        print(f"| total under the profiler | {profiled:.2f} | 100% |")
        print(f"\nwall per step without the profiler (median): local {local_ms:.2f} ms "
              f"({a.batch_size / local_ms * 1000:.0f} samples/s per process)")
        if ddp_ms is not None:
            print(f"DDP (find_unused_parameters=True): {ddp_ms:.2f} ms ({a.batch_size * world / ddp_ms * 1000:.0f} "
                  f"global samples/s), DDP's cost {ddp_ms - local_ms:.2f} ms/step; one Gloo all_reduce of all "
                  f"{params} gradient elements ({params * 4 / 2**20:.1f} MiB): {allreduce_ms:.2f} ms")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
