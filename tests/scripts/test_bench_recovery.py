#!/usr/bin/env python3
"""bench/launcher/bench_recovery.py's reading of a run, on made-up lines and a
made-up --trace_file laid out as launcher/src/report/trace_file.cpp writes it:
the progress lines it parses, the first step after the failure (a step that
was finishing when the kill came is not it), the steps redone, and
plot_recovery.py drawing the trace with its recovery events.

usage: test_bench_recovery.py BENCH_DIR (bench/launcher)"""
import io
import json
import os
import sys
import tempfile
from contextlib import redirect_stdout

sys.path.insert(0, sys.argv[1])
sys.path.insert(0, os.path.join(sys.argv[1], ".."))
import bench_recovery as b  # noqa: E402
import plot_recovery  # noqa: E402


def check(got, want, what):
    if got != want:
        sys.exit(f"FAIL {what}: got {got!r}, want {want!r}")


# Progress lines: ddp-train's, the twin's (with its restart), a prefixed one, others.
check(b.parse_step("epoch 2/2 step 5/16 loss 0.5123 812 samples/s ETA 0:01"), (21, None, None), "ddp-train line")
check(b.parse_step("epoch 2/3 step 7/40 global 47 restart 1 t 12.5"), (47, 1, 12.5), "twin line")
check(b.parse_step("[rank0]: epoch 1/2 step 3/16 loss 1.0"), (3, None, None), "prefixed line")
check(b.parse_step("epoch 1/2: train_loss 0.61 test_loss 0.55"), None, "epoch summary line")
check(b.parse_step("resumed from ck/epoch_1.pt (epoch 1, step 16, restart 1)"), None, "resume line")

# A full restart from epoch 1's checkpoint (16 steps an epoch), killed after step 20
# at t=10: step 21 was finishing and its line comes after the kill; the restart
# redoes 17..21 and goes on.
lines = [(0.4 * g, g, None) for g in range(1, 21)] + [(10.01, 21, None)]
lines += [(12.0 + 0.1 * i, g, None) for i, g in enumerate(range(17, 25))]
trace_first = 17  # what the trace says began first after the death
first = next(i for i, l in enumerate(lines) if l[0] > 10.0 and l[1] == trace_first)
m = b.analyse(lines, 10.0, lambda i, l: i == first)
check(round(m["next_step_s"], 3), 2.0, "restart: next step")
check((m["last_done"], m["resumed_at"], m["redone"]), (21, 17, 5), "restart: steps redone")
check(round(m["back_s"], 3), 2.5, "restart: back at step 22")

# In place: the in-flight step 21's line comes first; the step that began after the
# death is 22, none redone.
lines = [(0.4 * g, g, None) for g in range(1, 21)] + [(10.01, 21, None), (10.4, 22, None), (10.5, 23, None)]
first = next(i for i, l in enumerate(lines) if l[0] > 10.0 and l[1] == 22)
m = b.analyse(lines, 10.0, lambda i, l: i == first)
check((round(m["next_step_s"], 3), m["redone"], round(m["back_s"], 3)), (0.4, 0, 0.4), "in place")

# The twin: the first line of restart 1.
lines = [(float(g), g, 0) for g in range(1, 21)] + [(30.0, 17, 1), (30.2, 18, 1)]
m = b.analyse(lines, 20.5, lambda i, l: (l[2] or 0) > 0)
check((round(m["next_step_s"], 3), m["redone"]), (9.5, 4), "twin")

# The trace: rank 1 killed at 2.0 s while both ranks are in step 21 (begun 1.95 s);
# rank 0's step 21 is ended by the teardown; the restart's steps 17.. begin at 4.0 s.
ev = [{"name": "process_name", "ph": "M", "pid": 1000000, "args": {"name": "ddp-launch (h)"}}]
for r in range(2):
    ev.append({"name": "process_name", "ph": "M", "pid": r + 1, "args": {"name": f"rank {r} (local_rank {r}, host h)"}})
    for g, ts in [(20, 1.9e6), (21, 1.95e6)] + [(17 + i, 4.0e6 + i * 5e4) for i in range(4)]:
        ev.append({"name": f"step {g}", "cat": "step", "ph": "X", "ts": ts, "dur": 5e4, "pid": r + 1,
                   "tid": 2 * r + 1000002, "args": {"step": g, "wait_ms": 0}})
ev.append({"name": "exited: signal 15 (SIGTERM)", "cat": "launcher", "ph": "i", "s": "t", "ts": 2.1e6, "pid": 1,
           "tid": 1000002})
ev.append({"name": "exited: signal 9 (SIGKILL)", "cat": "launcher", "ph": "i", "s": "t", "ts": 2.0e6, "pid": 2,
           "tid": 1000004})
ev.append({"name": "failure: rank 1 signal 9 (SIGKILL)", "cat": "launcher", "ph": "i", "s": "t", "ts": 2.001e6,
           "pid": 1000000, "tid": 1000000})
ev.append({"name": "attempt 1 started (restart 1)", "cat": "launcher", "ph": "i", "s": "t", "ts": 3.0e6,
           "pid": 1000000, "tid": 1000000})
tr = b.trace_recovery({"traceEvents": ev}, 1)
check((tr["step"], tr["death_s"], round(tr["end_s"], 3)), (17, 2.0, 4.05), "trace: first step after the death")
check(b.trace_recovery({"traceEvents": [e for e in ev if e["ph"] != "i"]}, 1), None, "trace: no exit event")

# The in-place recovery's report in --summary_json, wherever it puts it.
check(b.recover_keys({"exit_code": 0, "attempts": [{"recoveries": [{"rank": 1, "s": 0.4}]}]}),
      {"attempts.0.recoveries": [{"rank": 1, "s": 0.4}]}, "summary: recovery keys")

# --before_build: the in-place mode once more with the other build's binaries
# (and --recovery in_place), the usual mode with --build's.
args = type("Args", (), dict(build="/after", before_build="/before", nproc=4, epochs=2, steps_per_epoch=60,
                               every=10, has_recovery=True))()
for mode, build in ((b.BEFORE, "/before"), ("in_place", "/after")):
    cmd = b.command(mode, args, "/w", 1234)
    check((cmd[0], next(c for c in cmd if c.endswith("ddp-train")), "--recovery=in_place" in cmd),
          (f"{build}/bin/ddp-launch", f"{build}/bin/ddp-train", True), f"command of {mode}")
check(b.label(b.BEFORE, args), "ddp-train, in-place recovery, --before_build /before", "label of the before build")

# The picture: without recovery events (a full restart), then with an in-place
# recovery's instant and slice.
with tempfile.TemporaryDirectory() as d:
    for extra, want in ([], "0 recovery instants, 0 recovery slices"), (
            [{"name": "rank 1 recovered", "cat": "launcher", "ph": "i", "s": "t", "ts": 2.5e6, "pid": 1000000,
              "tid": 1000000},
             {"name": "recovery", "cat": "launcher", "ph": "X", "ts": 2.0e6, "dur": 5e5, "pid": 1000000,
              "tid": 1000000}], "1 recovery instants, 1 recovery slices"):
        path = os.path.join(d, "t.json")
        with open(path, "w") as f:
            json.dump({"traceEvents": ev + extra}, f)
        out = io.StringIO()
        with redirect_stdout(out):
            ok = plot_recovery.plot(path, os.path.join(d, "t.png"))
        if not ok:
            sys.exit(77)
        check(want in out.getvalue() and "2 ranks, 12 steps" in out.getvalue(), True, f"plot: {out.getvalue()!r}")
        with open(os.path.join(d, "t.png"), "rb") as f:
            check(f.read(8), b"\x89PNG\r\n\x1a\n", "plot: a PNG")
print("bench_recovery: parsing and picture checked")
