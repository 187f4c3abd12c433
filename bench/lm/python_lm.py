#!/usr/bin/env python3
"""Python DDP twin of examples/char-lm: the same character-level causal
Transformer on WordNet's glosses, in plain PyTorch.

The same corpus (every gloss of data.noun/verb/adj/adv, each 20th held out),
alphabet, windows of --context + 1 characters tiling the training stream,
model (GPT-style pre-norm blocks with the attention written out, as
char-lm's main.cpp), AdamW, linear warm-up then cosine decay per step,
gradient clipping after DDP's average, accumulation with no_sync on all but
the last batch, DistributedSampler(drop_last) with set_epoch, and
evaluation (perplexity on --test_sequences windows spread evenly). The
initial weights are PyTorch's defaults, not char-lm's own. Same threads per
process as char-lm (cores / local world size unless OMP_NUM_THREADS is set).

Run one process per rank with the torchrun environment, e.g.
    /usr/bin/python3 bench/torchrun_patched.py --nproc_per_node=2 bench/lm/python_lm.py --total_steps 200
Writes metrics.jsonl in --checkpoint_dir with char-lm's keys (train_samples,
train_seconds: training steps only; test_loss, perplexity, bits_per_char).
No checkpoints: the bench compares training throughput.
"""
import argparse
import contextlib
import json
import math
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data.distributed import DistributedSampler


def fail(message):
    sys.exit(f"python_lm.py: {message}")


def read_corpus(wordnet_dir):
    """(alphabet, train tokens, test tokens) exactly as char-lm's read_corpus."""
    train, test, glosses = [], [], 0
    for name in ("data.noun", "data.verb", "data.adj", "data.adv"):
        path = os.path.join(wordnet_dir, name)
        try:
            data = open(path, "rb").read()
        except OSError as e:
            fail(f"{path}: {e.strerror}; install Debian's wordnet-base (apt-get install wordnet-base) "
                 f"or pass --wordnet_dir DIR")
        for no, line in enumerate(data.split(b"\n"), 1):
            if line.startswith(b"  ") or not line:
                continue
            bar = line.find(b"|")
            if bar < 0:
                fail(f"{path}:{no}: no '|' before a gloss; the file is damaged")
            gloss = line[bar + 1:].strip(b" \t\r")
            if not gloss:
                continue
            (test if glosses % 20 == 0 else train).append(gloss + b"\n")
            glosses += 1
    train, test = b"".join(train), b"".join(test)
    alphabet = sorted(set(train) | set(test))
    table = torch.zeros(256, dtype=torch.long)
    table[torch.tensor(alphabet)] = torch.arange(len(alphabet))
    encode = lambda b: table[torch.frombuffer(bytearray(b), dtype=torch.uint8).long()]
    return alphabet, encode(train), encode(test)


class Block(nn.Module):
    def __init__(self, d, heads, dropout):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, mask):
        B, T, d = x.shape
        dh = d // self.heads
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.heads, dh).permute(2, 0, 3, 1, 4)
        att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(dh))
        att = self.drop(torch.softmax(att.masked_fill(mask, float("-inf")), -1))
        y = torch.matmul(att, v).transpose(1, 2).reshape(B, T, d)
        x = x + self.drop(self.proj(y))
        return x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)))))


class CharTransformer(nn.Module):
    def __init__(self, vocab, context, d_model, heads, layers, dropout):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(context, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)
        self.mask = None  # not a buffer: DDP would broadcast it every step

    def forward(self, idx):
        T = idx.shape[1]
        if self.mask is None or self.mask.shape[0] != T or self.mask.device != idx.device:
            self.mask = torch.ones(T, T, dtype=torch.bool, device=idx.device).triu(1)
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x, self.mask)
        return self.head(self.ln_f(x))


def windows(stream, starts, context):
    w = stream[starts.unsqueeze(1) + torch.arange(context + 1)]
    return w[:, :context], w[:, 1:]


def cosine_lr(step, peak, warmup, total):
    """Hugging Face's get_cosine_schedule_with_warmup, as the loop's --lr_schedule cosine."""
    if step < warmup:
        return peak * step / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def evaluate(model, test, starts, context, rank, world, device):
    n = starts.numel()
    begin, end = n * rank // world, n * (rank + 1) // world
    sums = torch.zeros(2, dtype=torch.float64, device=device)
    model.eval()
    with torch.no_grad():
        for b in range(begin, end, 250):
            x, y = windows(test, starts[b:min(b + 250, end)], context)
            logits = model(x.to(device))
            sums[0] += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.to(device).reshape(-1),
                                       reduction="sum").double()
            sums[1] += y.numel()
    model.train()
    dist.all_reduce(sums)
    ce = (sums[0] / sums[1]).item()
    return {"test_loss": ce, "perplexity": math.exp(ce), "bits_per_char": ce / math.log(2)}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--wordnet_dir", default="/usr/share/wordnet")
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--d_model", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--test_sequences", type=int, default=1024)
    p.add_argument("--batch_size", type=int, default=32, help="per process")
    p.add_argument("--learning_rate", type=float, default=3e-3)
    p.add_argument("--warmup_steps", type=int, default=100)
    p.add_argument("--total_steps", type=int, default=2000)
    p.add_argument("--accumulate_batches", type=int, default=1)
    p.add_argument("--grad_clip_norm", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--checkpoint_dir", default="python-lm")
    p.add_argument("--log_interval", type=int, default=1000000)  # accepted for the bench's common arguments
    a = p.parse_args()
    for name in ("context", "d_model", "heads", "layers", "batch_size", "total_steps", "accumulate_batches"):
        if getattr(a, name) < 1:
            p.error(f"--{name} {getattr(a, name)} must be at least 1")
    if a.d_model % a.heads:
        p.error(f"--d_model {a.d_model} is not a multiple of --heads {a.heads}")
    return a


def main():
    a = parse_args()
    if "OMP_NUM_THREADS" not in os.environ:  # char-lm's rule (the loop's configure_threads)
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_world))
    alphabet, train, test = read_corpus(a.wordnet_dir)
    if "RANK" in os.environ:
        dist.init_process_group("gloo")
    else:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu")

    test_windows = (test.numel() - 1) // a.context
    n_test = min(a.test_sequences, test_windows) if a.test_sequences > 0 else test_windows
    test_starts = (torch.arange(n_test) * test_windows // n_test) * a.context
    train_size = (train.numel() - 1) // a.context

    torch.manual_seed(a.seed)
    model = DistributedDataParallel(CharTransformer(len(alphabet), a.context, a.d_model, a.heads, a.layers,
                                                    a.dropout).to(device))
    optimizer = torch.optim.AdamW(model.parameters(), lr=a.learning_rate)
    sampler = DistributedSampler(range(train_size), num_replicas=world, rank=rank, shuffle=True, seed=a.seed,
                                 drop_last=False)
    step, epoch, samples, seconds = 0, 0, 0, 0.0
    os.makedirs(a.checkpoint_dir, exist_ok=True)
    while step < a.total_steps:
        epoch += 1
        sampler.set_epoch(epoch)
        index = torch.tensor(list(sampler), dtype=torch.long)
        batches = index.numel() // a.batch_size  # drop_last, as char-lm
        t0 = time.perf_counter()
        epoch_steps = 0
        for first in range(0, batches - a.accumulate_batches + 1, a.accumulate_batches):
            if step >= a.total_steps:
                break
            lr = cosine_lr(step, a.learning_rate, a.warmup_steps, a.total_steps)
            for g in optimizer.param_groups:
                g["lr"] = lr
            optimizer.zero_grad(set_to_none=True)
            for k in range(a.accumulate_batches):
                b = index[(first + k) * a.batch_size:(first + k + 1) * a.batch_size]
                x, y = windows(train, b * a.context, a.context)
                last = k == a.accumulate_batches - 1
                with contextlib.nullcontext() if last else model.no_sync():
                    logits = model(x.to(device))
                    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.to(device).reshape(-1))
                    (loss / a.accumulate_batches).backward()
                samples += b.numel()
            if a.grad_clip_norm > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip_norm)
            optimizer.step()
            step += 1
            epoch_steps += 1
        seconds += time.perf_counter() - t0
        if epoch_steps == 0:
            fail(f"--batch_size {a.batch_size} x --accumulate_batches {a.accumulate_batches} is more than a rank's "
                 f"{index.numel()} sequences")
    ev = evaluate(model, test, test_starts, a.context, rank, world, device)
    global_samples = torch.tensor([float(samples)], dtype=torch.float64)
    dist.all_reduce(global_samples)
    if rank == 0:
        rec = {"epoch": epoch, "global_step": step, "train_samples": int(global_samples.item()),
               "train_seconds": seconds, "samples_per_second": global_samples.item() / seconds,
               "tokens_per_second": global_samples.item() * a.context / seconds, "eval_samples": n_test,
               "world_size": world, **ev}
        with open(os.path.join(a.checkpoint_dir, "metrics.jsonl"), "a") as f:
            f.write(json.dumps(rec) + "\n")
        print(f"python-lm: {step} steps, perplexity {ev['perplexity']:.4f}, "
              f"{rec['tokens_per_second']:.0f} tokens/s", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
