#!/usr/bin/env python3
"""Python DDP reference for ddp-train's benchmark: the seeds' training loop
(DistributedSampler + set_epoch, DDP, reduce_mean of the loss, rank-0
checkpoint each epoch, ReduceLROnPlateau on macro-F1) with the same model,
data, normalization, batch size, optimizer and evaluation split as ddp-train,
written as fast as plain PyTorch allows: the whole dataset is decoded and
normalized once into tensors and each batch is an index_select (no
DataLoader, no per-sample Python), stock layers, the same threads per
process as ddp-train.

Run one process per rank with the torchrun environment set (RANK,
WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), e.g.
    PYTHON_EXEC=/usr/bin/python3 ddp-launch --nproc_per_node=2 bench/train/python_ddp.py
Needs python3-torch (Debian: /usr/bin/python3). Writes metrics.jsonl in
--checkpoint_dir with the same keys ddp-train uses. With --device cuda it runs
as ddp-train does there: cuda:LOCAL_RANK, NCCL, the data kept on the CPU and
each batch copied to the GPU.
"""
import argparse
import gzip
import json
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data.distributed import DistributedSampler

PIXEL_MEAN, PIXEL_STD = 0.2860, 0.3530


class FashionCnn(nn.Module):
    def __init__(self, linear_as_conv=False):
        super().__init__()
        self.linear_as_conv = linear_as_conv
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        if self.linear_as_conv:
            # Same math through oneDNN instead of Debian's reference BLAS
            # (the one ddp-train trick that plain Python can use too).
            x = F.relu(F.conv2d(x, self.fc1.weight.view(128, 64, 7, 7), self.fc1.bias))
            return F.conv2d(x, self.fc2.weight.view(10, 128, 1, 1), self.fc2.bias).flatten(1)
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return self.fc2(x)


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)
    return torch.from_numpy(arr.copy())


class FashionMnist:
    """One split, decoded and normalized once: images float [N, 1, 28, 28]."""

    def __init__(self, data_dir, prefix):
        raw = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
        self.images = raw.float().div_(255).sub_(PIXEL_MEAN).div_(PIXEL_STD).unsqueeze_(1)
        self.labels = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz")).long()

    def __len__(self):
        return len(self.labels)


def reduce_mean(value, world, device):
    t = torch.tensor([float(value)], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.item() / world


def f1_scores(cm):
    """macro/micro F1 from a confusion matrix (rows: target), as sklearn."""
    cm = cm.double()
    tp = cm.diag()
    fp = cm.sum(0) - tp
    fn = cm.sum(1) - tp
    present = (cm.sum(0) + cm.sum(1)) > 0
    denom = 2 * tp + fp + fn
    f1 = torch.where(denom > 0, 2 * tp / denom.clamp(min=1), torch.zeros_like(tp))
    macro = f1[present].mean().item() if present.any() else 0.0
    total = cm.sum().item()
    micro = tp.sum().item() / total if total else 0.0
    return macro, micro


def evaluate(model, test, rank, world, device):
    # Contiguous slices, as ddp-train: every test sample counted once.
    n = len(test)
    begin, end = n * rank // world, n * (rank + 1) // world
    counts = torch.zeros(10 * 10 + 1, dtype=torch.float64, device=device)
    model.eval()
    with torch.no_grad():
        for b in range(begin, end, 1000):
            idx = torch.arange(b, min(b + 1000, end))
            x = test.images.index_select(0, idx).to(device)
            y = test.labels.index_select(0, idx).to(device)
            logits = model(x)
            counts[100] += F.cross_entropy(logits, y, reduction="sum").double()
            counts[:100] += torch.bincount(y * 10 + logits.argmax(1), minlength=100).double()
    model.train()
    dist.all_reduce(counts, op=dist.ReduceOp.SUM)
    counts = counts.cpu()
    cm = counts[:100].reshape(10, 10)
    total = cm.sum().item()
    macro, micro = f1_scores(cm)
    return {"accuracy": cm.diag().sum().item() / total, "macro_f1": macro, "micro_f1": micro,
            "test_loss": counts[100].item() / total, "eval_samples": int(total)}


def train_epochs(args, model, optimizer, scheduler, sampler, steps_per_epoch, batch, evaluate_module,
                 rank, world, device):
    """The seeds' epoch loop, shared by this script and bench/text/python_text.py: set_epoch, the
    steps (batch(idx) -> (model inputs, labels)), the epoch loss averaged over ranks, evaluation
    (evaluate_module(model.module) -> its metrics dict), ReduceLROnPlateau on macro-F1, best scores,
    rank 0's metrics.jsonl line and checkpoint, and the seeds' best-F1 lines at the end."""
    global_step = 0
    best_macro, best_micro = (0.0, 0, ""), (0.0, 0, "")
    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)
        order = torch.tensor(list(sampler), dtype=torch.long)
        lr = optimizer.param_groups[0]["lr"]
        t0 = time.perf_counter()
        loss_sum, samples = 0.0, 0
        for step in range(steps_per_epoch):
            inputs, y = batch(order[step * args.batch_size:(step + 1) * args.batch_size])
            optimizer.zero_grad()
            loss = F.cross_entropy(model(*inputs), y)
            loss.backward()
            optimizer.step()
            loss_sum += loss.item()
            samples += len(y)
            global_step += 1
            if rank == 0 and ((step + 1) % args.log_interval == 0 or step + 1 == steps_per_epoch):
                el = time.perf_counter() - t0
                print(f"epoch {epoch}/{args.epochs} step {step + 1}/{steps_per_epoch} "
                      f"loss {loss_sum / (step + 1):.4f} {samples * world / el:.0f} samples/s", flush=True)
        train_seconds = time.perf_counter() - t0
        train_loss = reduce_mean(loss_sum / max(1, steps_per_epoch), world, device)
        global_samples = reduce_mean(samples, world, device) * world
        ev = evaluate_module(model.module)
        scheduler.step(ev["macro_f1"])
        ckpt = os.path.join(args.checkpoint_dir, f"epoch_{epoch}.pt")
        if ev["macro_f1"] > best_macro[0]:
            best_macro = (ev["macro_f1"], epoch, ckpt)
        if ev["micro_f1"] > best_micro[0]:
            best_micro = (ev["micro_f1"], epoch, ckpt)
        if rank == 0:
            rec = {"epoch": epoch, "global_step": global_step, "train_loss": train_loss, **ev,
                   "learning_rate": lr, "train_samples": int(global_samples),
                   "train_seconds": train_seconds,
                   "samples_per_second": global_samples / train_seconds, "world_size": world,
                   "checkpoint": ckpt}
            with open(os.path.join(args.checkpoint_dir, "metrics.jsonl"), "a") as f:
                f.write(json.dumps(rec) + "\n")
            torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                        "epoch": epoch, "step": global_step}, ckpt)
            print(f"epoch {epoch}/{args.epochs}: train_loss {train_loss:.4f} accuracy "
                  f"{ev['accuracy']:.4f} macro_f1 {ev['macro_f1']:.4f} micro_f1 {ev['micro_f1']:.4f} "
                  f"{rec['samples_per_second']:.0f} samples/s", flush=True)
        dist.barrier()
    if rank == 0:
        print(f"best macro f1: {best_macro[0]:.4f} in epoch: {best_macro[1]}, saved in: {best_macro[2]}")
        print(f"best micro f1: {best_micro[0]:.4f} in epoch: {best_micro[1]}, saved in: {best_micro[2]}")


def add_training_options(p):
    """ddp-train's options that decide the run, with its defaults (bench/launcher/recovery_twin.py too)."""
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--learning_rate", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--max_steps", type=int, default=0, help="steps per epoch, 0 = all")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_training_options(p)
    p.add_argument("--checkpoint_dir", default="checkpoints-python")
    p.add_argument("--no_shuffle", action="store_true")
    p.add_argument("--lr_factor", type=float, default=0.1)
    p.add_argument("--lr_patience", type=int, default=10)
    p.add_argument("--log_interval", type=int, default=50)
    p.add_argument("--linear_as_conv", action="store_true",
                   help="compute the Linear layers with conv2d (oneDNN), as ddp-train does")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda: cuda:LOCAL_RANK and NCCL, as ddp-train --device cuda")
    p.add_argument("--local_rank", "--local-rank", type=int, default=0)
    args = p.parse_args()

    if "OMP_NUM_THREADS" not in os.environ:  # same rule as ddp-train
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_world))

    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        dist.init_process_group(backend="nccl")
    else:
        device = torch.device("cpu")
        dist.init_process_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    train = FashionMnist(args.data_dir, "train")
    test = FashionMnist(args.data_dir, "t10k")

    torch.manual_seed(args.seed)
    model = FashionCnn(args.linear_as_conv).to(device)
    model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.learning_rate)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
        optimizer, "max", factor=args.lr_factor, patience=args.lr_patience)
    sampler = DistributedSampler(train, shuffle=not args.no_shuffle, seed=args.seed)
    if rank == 0:
        os.makedirs(args.checkpoint_dir, exist_ok=True)
        open(os.path.join(args.checkpoint_dir, "metrics.jsonl"), "w").close()
        print(f"python_ddp: world size {world}, batch {args.batch_size} per process, "
              f"{torch.get_num_threads()} threads per process, device {device}", flush=True)

    full_steps = (len(sampler) + args.batch_size - 1) // args.batch_size
    steps_per_epoch = full_steps if args.max_steps == 0 else min(args.max_steps, full_steps)
    train_epochs(args, model, optimizer, scheduler, sampler, steps_per_epoch,
                 lambda idx: ((train.images.index_select(0, idx).to(device),), train.labels.index_select(0, idx).to(device)),
                 lambda module: evaluate(module, test, rank, world, device), rank, world, device)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
