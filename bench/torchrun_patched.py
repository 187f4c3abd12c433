#!/usr/bin/python3
"""torchrun from Debian's python3-torch 1.13, made to run on Python 3.11.

torch 1.13's Std.from_str("0") returns None on Python 3.11 (IntFlag iteration
no longer yields the zero member), so every torchrun run dies in to_map
("'NoneType' object has no attribute 'get'", pytorch#92319). The benchmarks
compare against torchrun itself, so this wrapper maps None back to Std.NONE
and then runs torch.distributed.run.main() unchanged. Usage is torchrun's:
    /usr/bin/python3 bench/torchrun_patched.py --nproc_per_node=2 ...
"""
import sys

import torch.distributed.elastic.multiprocessing as mp
from torch.distributed.elastic.multiprocessing import api

_orig_to_map = api.to_map


def _to_map(val_or_map, local_world_size):
    if val_or_map is None:
        val_or_map = api.Std.NONE
    elif isinstance(val_or_map, dict):
        val_or_map = {k: api.Std.NONE if v is None else v for k, v in val_or_map.items()}
    return _orig_to_map(val_or_map, local_world_size)


api.to_map = _to_map
mp.to_map = _to_map

from torch.distributed.run import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
