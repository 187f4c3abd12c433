#!/usr/bin/env python3
"""Python DDP twin of ddp-text: the seeds' text classifier (TextCNN over WordNet
glosses, 45 supersenses) in plain PyTorch, with the same data, tokenizer,
model, parameter names, batch, optimizer, schedule and evaluation as ddp-text,
written as fast as plain PyTorch allows: every split is
tokenized once into one padded [N, max_length] token tensor plus a length
tensor, and a batch is an index_select and a narrow to its longest sequence
(at least 5 tokens); no DataLoader, no per-sample Python in the step; stock
layers; the same threads per process as ddp-text.

It reads a prepared directory (--data_dir: train.csv, test.csv, vocab.txt,
labels.txt, prepared.json), which `ddp-text --prepare_only --data_dir DIR`
writes. Run one process per rank with the torchrun environment, e.g.
    PYTHON_EXEC=/usr/bin/python3 ddp-launch --nproc_per_node=2 bench/text/python_text.py
or as one process without it (world size 1). Writes metrics.jsonl and
epoch_N.pt in --checkpoint_dir with the keys python_ddp.py / ddp-train use.
`--evaluate PATH` loads weights (a {name: tensor} dict, ddp-text's
checkpoint or this script's), evaluates the test split and prints one JSON line.
"""
import argparse
import csv
import json
import os
import pickle
import re
import sys
import zlib

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data.distributed import DistributedSampler

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "train"))
from python_ddp import f1_scores, train_epochs  # noqa: E402  (the FMNIST twin's F1 rule and seeds' epoch loop)

PREPARED_FORMAT = "ddp-text-prepared-v2"
CHECKPOINT_FORMAT = "ddp-worker-checkpoint-v1"
MIN_LENGTH = 5  # the widest filter: every sequence has at least one window
EVAL_BATCH = 250
TOKEN = re.compile(r"[a-z0-9]+")


def fail(message):
    sys.exit(f"python_text.py: {message}")


class TextCnn(nn.Module):
    """Kim 2014: embedding, conv widths 3/4/5, relu, masked max over time, dropout, linear."""

    def __init__(self, vocab_size, num_classes, embedding_dim=128, num_filters=100, dropout=0.5, unused=False):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx=0)
        self.conv3 = nn.Conv1d(embedding_dim, num_filters, 3)
        self.conv4 = nn.Conv1d(embedding_dim, num_filters, 4)
        self.conv5 = nn.Conv1d(embedding_dim, num_filters, 5)
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(3 * num_filters, num_classes)
        if unused:  # the test variant: a parameter DDP never sees a gradient for
            self.unused = nn.Linear(3 * num_filters, num_classes)

    def forward(self, tokens, lengths):
        # Contiguous: the transposed view looks channels-last to Conv1d, whose
        # backward then leaves oneDNN (77 ms against 59 ms for a padded batch,
        # measured on torch 1.13).
        e = self.embedding(tokens).transpose(1, 2).contiguous()  # [B, E, L]
        valid_len = lengths.clamp(min=MIN_LENGTH)
        pooled = []
        for w, conv in ((3, self.conv3), (4, self.conv4), (5, self.conv5)):
            h = F.relu(conv(e))  # [B, F, L - w + 1]
            # Windows that reach past the true length read padding: zero them
            # (relu >= 0, and every row keeps one valid window) so the output
            # does not depend on how far the batch is padded.
            pad = torch.arange(h.size(2), device=h.device).unsqueeze(0) >= (valid_len - w + 1).unsqueeze(1)
            pooled.append(h.masked_fill(pad.unsqueeze(1), 0.0).max(dim=2).values)
        return self.fc(self.dropout(torch.cat(pooled, 1)))


def read_lines(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().split("\n")[:-1]
    except FileNotFoundError:
        fail(f"{path} not found; prepare the directory with `ddp-text --prepare_only --data_dir "
             f"{os.path.dirname(path) or '.'}`")


class TextSplit:
    """One split, tokenized once: tokens long [N, max_length] (0-padded), lengths long [N], labels long [N]."""

    def __init__(self, path, vocab, label_ids, max_length):
        rows = []
        try:
            with open(path, encoding="utf-8", newline="") as f:
                reader = csv.reader(f)
                if next(reader, None) != ["text", "label"]:
                    fail(f"{path}:1: the header is not 'text,label'; prepare the directory again")
                for row in reader:
                    if len(row) != 2 or row[1] not in label_ids:
                        fail(f"{path}:{reader.line_num}: expected 'text,label' with one of labels.txt's "
                             f"classes, got {row!r}; prepare the directory again")
                    rows.append(row)
        except FileNotFoundError:
            fail(f"{path} not found; prepare the directory with `ddp-text --prepare_only`")
        self.tokens = torch.zeros(len(rows), max_length, dtype=torch.long)
        self.lengths = torch.empty(len(rows), dtype=torch.long)
        ids = []
        for i, (text, _) in enumerate(rows):
            seq = [vocab.get(t, 1) for t in TOKEN.findall(text.lower())][:max_length] or [1]
            ids.extend(seq)
            self.lengths[i] = len(seq)
        # One scatter instead of N small copies: row i's tokens go to [i, 0:len_i).
        lens = self.lengths
        row = torch.repeat_interleave(torch.arange(len(rows)), lens)
        col = torch.arange(len(ids)) - torch.repeat_interleave(lens.cumsum(0) - lens, lens)
        self.tokens[row, col] = torch.tensor(ids, dtype=torch.long)
        self.labels = torch.tensor([label_ids[r[1]] for r in rows], dtype=torch.long)

    def __len__(self):
        return len(self.labels)

    def batch(self, idx, device):
        """Rows idx, padded to their longest sequence (at least MIN_LENGTH)."""
        lengths = self.lengths.index_select(0, idx)
        width = max(MIN_LENGTH, int(lengths.max()))
        tokens = self.tokens.narrow(1, 0, min(width, self.tokens.size(1))).index_select(0, idx)
        if tokens.size(1) < width:  # --max_length below 5
            tokens = F.pad(tokens, (0, width - tokens.size(1)))
        return tokens.to(device), lengths.to(device), self.labels.index_select(0, idx).to(device)


def load_data(data_dir, max_length):
    stamp_path = os.path.join(data_dir, "prepared.json")
    try:
        with open(stamp_path) as f:
            stamp = json.load(f)
    except FileNotFoundError:
        fail(f"{stamp_path} not found: '{data_dir}' is not a prepared directory; run "
             f"`ddp-text --prepare_only --data_dir {data_dir}` first")
    except ValueError as e:
        fail(f"{stamp_path} is not valid JSON ({e}); run `ddp-text --prepare_only --data_dir {data_dir}` again")
    if not isinstance(stamp, dict) or stamp.get("format") != PREPARED_FORMAT:
        fail(f"{stamp_path}: format is not {PREPARED_FORMAT}; run `ddp-text --prepare_only --data_dir {data_dir}` again")
    vocab_path = os.path.join(data_dir, "vocab.txt")
    with open(vocab_path, "rb") as f:
        if zlib.crc32(f.read()) != stamp.get("vocab_crc32"):
            fail(f"{vocab_path} is not the vocabulary {stamp_path} was written with; "
                 f"run `ddp-text --prepare_only --data_dir {data_dir}` again")
    vocab_list = read_lines(vocab_path)
    if vocab_list[:2] != ["<pad>", "<unk>"]:
        fail(f"{os.path.join(data_dir, 'vocab.txt')}: lines 1-2 must be <pad> and <unk>; prepare the directory again")
    labels = read_lines(os.path.join(data_dir, "labels.txt"))
    vocab = {t: i for i, t in enumerate(vocab_list)}
    label_ids = {name: i for i, name in enumerate(labels)}
    train = TextSplit(os.path.join(data_dir, "train.csv"), vocab, label_ids, max_length)
    test = TextSplit(os.path.join(data_dir, "test.csv"), vocab, label_ids, max_length)
    return train, test, len(vocab_list), len(labels)


def evaluate(model, test, num_classes, rank, world, device):
    # Contiguous slices in batches of 250, as ddp-text: every test sample counted once.
    n, k = len(test), num_classes
    begin, end = n * rank // world, n * (rank + 1) // world
    counts = torch.zeros(k * k + 1, dtype=torch.float64, device=device)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for b in range(begin, end, EVAL_BATCH):
            tokens, lengths, y = test.batch(torch.arange(b, min(b + EVAL_BATCH, end)), device)
            logits = model(tokens, lengths)
            counts[k * k] += F.cross_entropy(logits, y, reduction="sum").double()
            counts[:k * k] += torch.bincount(y * k + logits.argmax(1), minlength=k * k).double()
    model.train(was_training)
    dist.all_reduce(counts, op=dist.ReduceOp.SUM)
    counts = counts.cpu()
    cm = counts[:k * k].reshape(k, k)
    total = cm.sum().item()
    macro, micro = f1_scores(cm)
    return {"accuracy": cm.diag().sum().item() / total, "macro_f1": macro, "micro_f1": micro,
            "test_loss": counts[k * k].item() / total, "eval_samples": int(total)}


def load_weights(path):
    """{name: tensor} from a plain state dict, ddp-text's checkpoint or this script's epoch_N.pt."""
    try:
        try:
            obj = torch.load(path, map_location="cpu")
        except pickle.UnpicklingError:
            # torch >= 2.6 loads weights_only by default; a full load only for the runtime's checkpoint dict.
            with open(path, "rb") as f:
                if CHECKPOINT_FORMAT.encode() not in f.read():
                    raise
            obj = torch.load(path, map_location="cpu", weights_only=False)
    except FileNotFoundError:
        fail(f"--evaluate {path}: file not found")
    except Exception as e:  # a damaged or foreign file: one line, not a traceback
        first = (str(e).splitlines() or [""])[0][:200]
        fail(f"--evaluate {path}: torch.load cannot read it as weights ({type(e).__name__}: {first})")
    if isinstance(obj, dict) and (obj.get("format") == CHECKPOINT_FORMAT or
                                  ("format" not in obj and isinstance(obj.get("model"), dict))):
        obj = obj["model"]
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        fail(f"--evaluate {path}: expected {{name: tensor}} or a {CHECKPOINT_FORMAT} checkpoint")
    return obj


def build_model(args, vocab_size, num_classes, state=None):
    unused = args.model == "textcnn_unused" or (state is not None and "unused.weight" in state)
    model = TextCnn(vocab_size, num_classes, args.embedding_dim, args.num_filters, args.dropout, unused)
    if state is not None:
        mine = model.state_dict()
        if set(state) != set(mine):
            fail(f"--evaluate: the weights' parameters {sorted(state)} are not the model's {sorted(mine)}")
        for name, t in state.items():
            if t.shape != mine[name].shape:
                fail(f"--evaluate: '{name}' has shape {list(t.shape)}, the model {list(mine[name].shape)} "
                     f"(vocabulary {vocab_size}, {num_classes} classes, --embedding_dim {args.embedding_dim}, "
                     f"--num_filters {args.num_filters}): evaluate with the data dir and sizes it was trained with")
        model.load_state_dict(state)
    return model


def make_adam(params, lr, device):
    """The fastest stock Adam this torch has for the device: fused (CPU since torch 2.4, CUDA), else
    foreach (one kernel over all tensors per operation; 18 ms against 22 ms a step here on 1.13)."""
    params = list(params)
    try:
        opt = torch.optim.Adam(params, lr=lr, fused=True)
        if device.type == "cpu" and tuple(int(x) for x in torch.__version__.split(".")[:2]) < (2, 4):
            raise RuntimeError("no fused Adam on the CPU before torch 2.4")
        return opt
    except RuntimeError:
        return torch.optim.Adam(params, lr=lr, foreach=True)


def init_distributed(device_kind):
    backend = "nccl" if device_kind == "cuda" else "gloo"
    if "WORLD_SIZE" in os.environ:
        dist.init_process_group(backend=backend)
    else:  # one process without a launcher: a world of 1 over an in-memory store
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
    return dist.get_rank(), dist.get_world_size()


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--learning_rate", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--data_dir", default="text-data", help="prepared by `ddp-text --prepare_only`")
    p.add_argument("--checkpoint_dir", default="checkpoints-python-text")
    p.add_argument("--max_steps", type=int, default=0, help="steps per epoch, 0 = all")
    p.add_argument("--no_shuffle", action="store_true")
    p.add_argument("--lr_factor", type=float, default=0.1)
    p.add_argument("--lr_patience", type=int, default=10)
    p.add_argument("--log_interval", type=int, default=50)
    p.add_argument("--max_length", type=int, default=64, help="tokens kept per text")
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--embedding_dim", type=int, default=128)
    p.add_argument("--num_filters", type=int, default=100)
    p.add_argument("--model", choices=["textcnn", "textcnn_unused"], default="textcnn",
                   help="textcnn_unused: plus a parameter 'unused' that gets no gradient (ddp-text's test variant)")
    p.add_argument("--evaluate", metavar="PATH", help="evaluate these weights on the test split, print JSON, exit")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda: cuda:LOCAL_RANK and NCCL, as ddp-text --device cuda")
    p.add_argument("--local_rank", "--local-rank", type=int, default=0)
    args = p.parse_args()
    for name in ("epochs", "batch_size", "max_length", "embedding_dim", "num_filters", "log_interval"):
        if getattr(args, name) < 1:
            p.error(f"--{name} {getattr(args, name)} must be at least 1")
    if args.max_steps < 0:
        p.error(f"--max_steps {args.max_steps} must be 0 (all) or more")
    if not 0.0 <= args.dropout < 1.0:
        p.error(f"--dropout {args.dropout} must be in [0, 1)")
    return args


def main():
    args = parse_args()
    if "OMP_NUM_THREADS" not in os.environ:  # same rule as ddp-train / ddp-text
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_world))
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    state = load_weights(args.evaluate) if args.evaluate else None  # a bad file fails before the data loads
    train, test, vocab_size, num_classes = load_data(args.data_dir, args.max_length)
    rank, world = init_distributed(args.device)

    if args.evaluate:
        model = build_model(args, vocab_size, num_classes, state).to(device)
        ev = evaluate(model, test, num_classes, rank, world, device)
        if rank == 0:
            print(json.dumps({k: ev[k] for k in ("accuracy", "macro_f1", "micro_f1", "eval_samples")}), flush=True)
        dist.destroy_process_group()
        return

    torch.manual_seed(args.seed)
    model = build_model(args, vocab_size, num_classes).to(device)
    model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                                    find_unused_parameters=True)
    optimizer = make_adam(model.parameters(), args.learning_rate, device)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
        optimizer, "max", factor=args.lr_factor, patience=args.lr_patience)
    sampler = DistributedSampler(train, shuffle=not args.no_shuffle, seed=args.seed)
    if rank == 0:
        os.makedirs(args.checkpoint_dir, exist_ok=True)
        open(os.path.join(args.checkpoint_dir, "metrics.jsonl"), "w").close()
        print(f"python_text: world size {world}, batch {args.batch_size} per process, "
              f"{torch.get_num_threads()} threads per process, device {device}, "
              f"{len(train)} train / {len(test)} test texts, vocabulary {vocab_size}, {num_classes} classes", flush=True)

    full_steps = len(sampler) // args.batch_size  # drop_last: only full batches, as the seeds' loader
    if full_steps == 0:
        fail(f"--batch_size {args.batch_size} is larger than this rank's {len(sampler)} training texts")
    steps_per_epoch = full_steps if args.max_steps == 0 else min(args.max_steps, full_steps)
    def train_batch(idx):
        tokens, lengths, y = train.batch(idx, device)
        return (tokens, lengths), y

    train_epochs(args, model, optimizer, scheduler, sampler, steps_per_epoch, train_batch,
                 lambda module: evaluate(module, test, num_classes, rank, world, device), rank, world, device)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
