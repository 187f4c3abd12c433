#!/usr/bin/env python3
"""Writes a ddp-launch --trace_file of RANKS ranks and about SLICES slices
(steps of 10 ms, each with its wait, and collectives inside them), as
launcher/src/report/trace_file.cpp lays it out, for scripts/plot-trace's
tests and timing.

usage: make_trace.py OUT.json SLICES [RANKS]"""
import json
import sys


def main():
    out, slices = sys.argv[1], int(sys.argv[2])
    ranks = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    events = [{"name": "process_name", "ph": "M", "pid": 1000000, "args": {"name": "ddp-launch (h)"}}]
    for r in range(ranks):
        events.append({"name": "process_name", "ph": "M", "pid": r + 1,
                       "args": {"name": f"rank {r} (local_rank {r}, host h)"}})
    per_step = 4  # a step and 3 collectives
    steps = max(1, slices // (ranks * per_step))
    for r in range(ranks):
        for i in range(steps):
            ts = i * 10000.0
            events.append({"name": f"step {i + 1}", "cat": "step", "ph": "X", "ts": ts, "dur": 10000.0,
                           "pid": r + 1, "tid": 2 * r + 1000002, "args": {"step": i + 1, "wait_ms": 1.5 * (r == 0)}})
            for k in range(per_step - 1):
                events.append({"name": "allreduce", "cat": "collective", "ph": "X", "ts": ts + 6000 + k * 1000,
                               "dur": 800.0, "pid": r + 1, "tid": 2 * r + 1000003,
                               "args": {"seq": i * 3 + k + 1, "bytes": 64, "queued_ms": 0}})
    events.append({"name": "straggler: rank 1 (score 0.50, the others wait 15%)", "cat": "launcher", "ph": "i",
                   "s": "t", "ts": 5000.0, "pid": 2, "tid": 1000004})
    with open(out, "w") as f:
        json.dump({"displayTimeUnit": "ms", "otherData": {"producer": "ddp-launch", "host": "h", "dropped_slices": 0},
                   "traceEvents": events}, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
