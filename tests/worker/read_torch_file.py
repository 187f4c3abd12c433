#!/usr/bin/env python3
"""Loads a file written by ddp_worker with Python's torch.load and prints what
it holds, one line each, for the C++ tests to compare:
    T <name> <numel> <sum as repr float>      (a tensor)
    I <name> <int> / F <name> <float> / S <name> <string>
Usage: read_torch_file.py PATH [default|weights_only|full]
  default       torch.load(PATH): Python's default (weights_only=True since 2.6,
                False before), as a user types it
  weights_only  torch.load(PATH, weights_only=True): tensors and plain
                containers only, on every version
  full          torch.load(PATH, weights_only=False): any pickled object"""
import sys

import torch


def emit(prefix, value):
    if isinstance(value, torch.Tensor):
        print("T", prefix, value.numel(), repr(float(value.double().sum())))
    elif isinstance(value, dict):
        for k, v in value.items():
            emit(f"{prefix}.{k}" if prefix else k, v)
    elif isinstance(value, bool) or isinstance(value, int):
        print("I", prefix, int(value))
    elif isinstance(value, float):
        print("F", prefix, repr(value))
    else:
        print("S", prefix, value)


mode = sys.argv[2] if len(sys.argv) > 2 else "default"
if mode == "default":
    obj = torch.load(sys.argv[1], map_location="cpu")
elif mode in ("weights_only", "full"):
    obj = torch.load(sys.argv[1], map_location="cpu", weights_only=(mode == "weights_only"))
else:
    sys.exit(f"unknown mode {mode!r}: use default, weights_only or full")
if not isinstance(obj, dict):
    sys.exit(f"expected a dict, got {type(obj).__name__}")
print("TYPE", type(obj).__name__)
emit("", obj)
