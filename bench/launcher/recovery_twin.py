#!/usr/bin/env python3
"""The Python twin of bench_recovery.py: the seeds' DDP loop as a user writes it
for torchrun --max_restarts, with per-epoch checkpoints and a resume from the
newest one (rank 0 saves `epoch_<N>.pt`, every rank loads it after a restart).

Same model, data, normalization, batch size, optimizer and evaluation as
ddp-train (bench/train/python_ddp.py's FashionCnn, FashionMnist and evaluate).
Rank 0 prints one line a step, in ddp-train's words plus what the bench needs:
    epoch 2/3 step 7/40 global 47 restart 0 t 12345.678901
(t: time.monotonic() at the step's end, CLOCK_MONOTONIC, the bench's clock).

Run under torchrun (torch 2.x), e.g.
    python -m torch.distributed.run --nproc_per_node 2 --max_restarts 1 recovery_twin.py --checkpoint_dir ck
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data.distributed import DistributedSampler

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
from python_ddp import FashionCnn, FashionMnist, add_training_options, evaluate  # noqa: E402


def newest_checkpoint(ckpt_dir):
    """The path of the highest epoch_<N>.pt, or None."""
    best = None
    for name in os.listdir(ckpt_dir) if os.path.isdir(ckpt_dir) else ():
        if name.startswith("epoch_") and name.endswith(".pt") and name[6:-3].isdigit():
            if best is None or int(name[6:-3]) > best[0]:
                best = (int(name[6:-3]), os.path.join(ckpt_dir, name))
    return best[1] if best else None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_training_options(p)
    p.add_argument("--checkpoint_dir", required=True)
    args = p.parse_args()

    if "OMP_NUM_THREADS" not in os.environ:  # ddp-train's rule
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_world))
    dist.init_process_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    device = torch.device("cpu")

    train = FashionMnist(args.data_dir, "train")
    test = FashionMnist(args.data_dir, "t10k")
    torch.manual_seed(args.seed)
    model = DistributedDataParallel(FashionCnn())
    optimizer = torch.optim.Adam(model.parameters(), lr=args.learning_rate)
    sampler = DistributedSampler(train, shuffle=True, seed=args.seed)
    full_steps = (len(sampler) + args.batch_size - 1) // args.batch_size
    steps = full_steps if args.max_steps == 0 else min(args.max_steps, full_steps)

    first_epoch = 1
    if rank == 0:
        os.makedirs(args.checkpoint_dir, exist_ok=True)
    path = newest_checkpoint(args.checkpoint_dir) if restart > 0 else None
    if path:  # the seeds' resume: every rank loads rank 0's file
        saved = torch.load(path, map_location="cpu")
        model.module.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        first_epoch = saved["epoch"] + 1
        if rank == 0:
            print(f"resumed from {path} (epoch {saved['epoch']}, restart {restart})", flush=True)
    dist.barrier()

    for epoch in range(first_epoch, args.epochs + 1):
        sampler.set_epoch(epoch)
        order = torch.tensor(list(sampler), dtype=torch.long)
        for step in range(steps):
            idx = order[step * args.batch_size:(step + 1) * args.batch_size]
            optimizer.zero_grad()
            loss = F.cross_entropy(model(train.images.index_select(0, idx)), train.labels.index_select(0, idx))
            loss.backward()
            optimizer.step()
            if rank == 0:
                print(f"epoch {epoch}/{args.epochs} step {step + 1}/{steps} global {(epoch - 1) * steps + step + 1} "
                      f"restart {restart} t {time.monotonic():.6f}", flush=True)
        ev = evaluate(model.module, test, rank, world, device)
        if rank == 0:
            ckpt = os.path.join(args.checkpoint_dir, f"epoch_{epoch}.pt")
            torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch},
                       ckpt + ".tmp")
            os.replace(ckpt + ".tmp", ckpt)
            print(f"epoch {epoch}/{args.epochs}: accuracy {ev['accuracy']:.4f}", flush=True)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
