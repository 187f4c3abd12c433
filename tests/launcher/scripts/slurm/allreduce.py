"""Worker for the real Slurm test: joins the group through MASTER_ADDR and
MASTER_PORT (gloo) and prints the sum of rank + 1 over all ranks."""
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(t)
print(f"allreduce rank={dist.get_rank()} world_size={dist.get_world_size()} sum={int(t.item())}", flush=True)
dist.destroy_process_group()
