"""The Python reference for ddp-worker-bench's step benchmark: the same models
(the MLP, and the Fashion-MNIST CNN with stock layers as in
bench/train/python_ddp.py), trained locally and with torch's
DistributedDataParallel in the same processes, steps interleaved in the same
rotating order, data preloaded as tensors, the same threads (OMP_NUM_THREADS).
Run one process per rank under ddp-launch --use_env (bench_worker.py does).

    python3 python_step.py --model mlp|cnn|cnn-lac --configs local,ddp,ddp:views=1 [--steps N --batch N]

Configs: local (no synchronisation), ddp[:cap=MiB][:views=1] (bucket_cap_mb,
gradient_as_bucket_view). Rank 0 prints "RESULT python <model> <config>
<median step ms> <buckets> <params> <batch>" per config, as the C++ side does.
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
from python_ddp import FashionCnn  # noqa: E402  (the stock-layer CNN of the train benchmark)


class Mlp(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.l1 = nn.Linear(256, hidden)
        self.l2 = nn.Linear(hidden, hidden)
        self.l3 = nn.Linear(hidden, hidden)
        self.l4 = nn.Linear(hidden, 10)

    def forward(self, x):
        return self.l4(F.relu(self.l3(F.relu(self.l2(F.relu(self.l1(x)))))))


def parse_config(text):
    parts = text.split(":")
    if parts[0] not in ("local", "ddp"):
        sys.exit(f"python_step.py: config '{text}': expected local or ddp[:cap=MiB][:views=1]")
    opts = {}
    for p in parts[1:]:
        k, _, v = p.partition("=")
        if parts[0] == "local" or k not in ("cap", "views"):
            sys.exit(f"python_step.py: config '{text}': unknown option '{k}' (cap, views)")
        if k == "cap":
            opts["bucket_cap_mb"] = 1e6 if v == "inf" else float(v)
        else:
            opts["gradient_as_bucket_view"] = v == "1"
    return parts[0] == "ddp", opts


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="mlp", choices=["mlp", "cnn", "cnn-lac"],
                   help="cnn-lac: the CNN with its Linear layers run as convolutions (oneDNN instead of BLAS), "
                        "python_ddp.py --linear_as_conv")
    p.add_argument("--configs", default="local,ddp")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--hidden", type=int, default=768)
    a = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()

    runs = []
    for text in a.configs.split(","):
        is_ddp, opts = parse_config(text)
        torch.manual_seed(0)
        model = Mlp(a.hidden) if a.model == "mlp" else FashionCnn(linear_as_conv=a.model == "cnn-lac")
        wrapped = DistributedDataParallel(model, **opts) if is_ddp else model
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        runs.append({"name": text, "model": wrapped, "module": model, "opt": opt, "ms": [], "loss": 0.0})

    torch.manual_seed(1 + rank)
    x = torch.randn(a.batch, 256) if a.model == "mlp" else torch.randn(a.batch, 1, 28, 28)
    y = torch.randint(0, 10, (a.batch,))
    warmup = 3
    for s in range(a.steps + warmup):
        for k in range(len(runs)):
            r = runs[(s + k) % len(runs)]
            dist.barrier()
            t0 = time.perf_counter()
            r["opt"].zero_grad()
            loss = F.cross_entropy(r["model"](x), y)
            loss.backward()
            r["opt"].step()
            t1 = time.perf_counter()
            if s >= warmup:
                r["ms"].append((t1 - t0) * 1000)
            r["loss"] = loss.item()

    params = sum(p.numel() for p in runs[0]["module"].parameters())
    # Per step, the slowest rank's local time (see ddp_bench.cpp).
    slowest = None
    for r in runs:
        if not isinstance(r["model"], DistributedDataParallel):
            mine = torch.tensor(r["ms"], dtype=torch.float64)
            all_ranks = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
            dist.all_gather(all_ranks, mine)
            slowest = torch.stack(all_ranks).max(0).values.tolist()
            break
    for r in runs:
        if r["loss"] != r["loss"]:
            sys.exit(f"python_step.py: {r['name']}: loss is not finite")
        if rank == 0:
            buckets = 0
            if isinstance(r["model"], DistributedDataParallel):
                # The reducer's bucket count (a private API; 0 when absent).
                logging_data = getattr(r["model"], "_get_ddp_logging_data", lambda: {})()
                sizes = logging_data.get("bucket_sizes", "")
                buckets = len(str(sizes).split(",")) if sizes != "" else 0
            print(f"RESULT python {a.model} {r['name']} {statistics.median(r['ms']):.3f} {buckets} {params} {a.batch}",
                  flush=True)
            if r["name"] == "local" and slowest:
                print(f"RESULT python {a.model} local-slowest {statistics.median(slowest):.3f} 0 {params} {a.batch}",
                      flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
