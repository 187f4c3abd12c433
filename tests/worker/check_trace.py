#!/usr/bin/env python3
"""Loads a ddp-launch --trace_file in Perfetto's trace processor (PyPI
`perfetto`) and checks what a person opening it in ui.perfetto.dev sees:
one process per rank named "rank N (...)" with a "steps" and a
"collectives" thread, the expected step slices per rank, collectives with
their args, and the launcher's instants.

usage: check_trace.py TRACE RANKS STEPS_OF_RANK_0
Exits 77 (skipped) when the trace processor cannot be run here: the
`perfetto` package fetches its trace_processor_shell binary from the
internet on first use; DDP_TRACE_PROCESSOR may name one instead.
"""
import os
import sys

SKIP = 77


def main():
    path, ranks, steps0 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    try:
        from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig
    except ImportError as e:
        print(f"skipped: the perfetto package is not installed ({e}); pip install perfetto")
        return SKIP
    shell = os.environ.get("DDP_TRACE_PROCESSOR")
    try:
        config = TraceProcessorConfig(bin_path=shell) if shell else TraceProcessorConfig()
        tp = TraceProcessor(trace=path, config=config)
    except Exception as e:  # no binary and no network to fetch it
        print("skipped: Perfetto's trace processor cannot be started here "
              f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
              "set DDP_TRACE_PROCESSOR to a trace_processor_shell binary")
        return SKIP
    rows = list(tp.query("""
        select p.name as process, t.name as thread, count(s.id) as n,
               sum(s.dur) as dur
        from slice s join thread_track tt on s.track_id = tt.id
        join thread t using (utid) join process p using (upid)
        group by p.name, t.name order by p.name, t.name"""))
    by = {(r.process, r.thread): r for r in rows}
    failures = []
    rank_processes = sorted({r.process for r in rows if r.process.startswith("rank ")})
    if len(rank_processes) != ranks:
        failures.append(f"{len(rank_processes)} rank processes, expected {ranks}: {rank_processes}")
    for p in rank_processes:
        for thread in ("steps", "collectives"):
            if (p, thread) not in by or by[(p, thread)].n == 0:
                failures.append(f"{p}: no slices on its {thread} thread")
    r0 = [p for p in rank_processes if p.startswith("rank 0 ")]
    if r0 and by.get((r0[0], "steps")) and by[(r0[0], "steps")].n != steps0:
        failures.append(f"rank 0 has {by[(r0[0], 'steps')].n} step slices, expected {steps0}")
    args = list(tp.query("""
        select count(*) as n from slice s join args a using (arg_set_id)
        where s.category = 'collective' and a.key = 'args.bytes' and a.int_value > 0"""))
    if not args or args[0].n == 0:
        failures.append("no collective slice has its bytes in args")
    instants = list(tp.query("select count(*) as n from slice where dur = 0 and name like 'attempt % started'"))
    if not instants or instants[0].n == 0:
        failures.append("the launcher's 'attempt 0 started' instant is missing")
    stats = list(tp.query("select name, value from stats where severity in ('error', 'data_loss') and value > 0"))
    for s in stats:
        failures.append(f"trace processor: {s.name} = {s.value}")
    tp.close()
    for f in failures:
        print(f)
    if not failures:
        print(f"trace processor: {ranks} ranks, {sum(r.n for r in rows)} slices: ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
