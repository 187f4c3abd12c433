#!/usr/bin/env python3
"""A Python rank for the interop test: env:// rendezvous and Gloo, exactly as
a torchrun-launched training script does, then the same allreduce and
all_gather as ddp-worker-test-helper's interop mode."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
t = torch.full((4,), float(rank + 1))
dist.all_reduce(t)
out = [torch.zeros(1) for _ in range(dist.get_world_size())]
dist.all_gather(out, torch.tensor([float(rank * 10)]))
print("result", f"{t[0].item():g}", f"{t[3].item():g}", "gather", *[f"{x.item():g}" for x in out], flush=True)
dist.destroy_process_group()
