#!/usr/bin/env python3
"""Draws a failure and its recovery from a ddp-launch --trace_file: one row per
rank with its steps (alternating shades), the killed rank's exit and the
launcher's failure and attempt events marked, and the recovery where the trace
has one (any event whose name contains "recover": an instant as a line, a slice
as a band). Works on a full restart's trace (no recovery event: the gap between
the exit and the next steps is the restart) and on an in-place recovery's.
bench_recovery.py draws docs/recovery.png with it.

usage: bench/launcher/plot_recovery.py TRACE.json [OUT.png] [--before S] [--after S]
Needs matplotlib (Debian: python3-matplotlib; run it with /usr/bin/python3)."""
import argparse
import json
import sys


def recovery_events(events):
    """The trace's events that name a recovery: (instants, slices) as (name, ts_us[, dur_us])."""
    named = [e for e in events if "recover" in e.get("name", "").lower() and e.get("ph") in ("i", "I", "X")]
    return ([(e["name"], e["ts"]) for e in named if e["ph"] != "X"],
            [(e["name"], e["ts"], e.get("dur", 0)) for e in named if e["ph"] == "X"])


def failure_window(events, before_s, after_s):
    """(from, to) in µs around the first worker exit by a signal (or the first failure event)
    to after_s past the first step that began after it; None: the whole trace."""
    marks = sorted(e["ts"] for e in events if e.get("ph") == "i" and
                   (e["name"].startswith("exited: SIG") or e["name"].startswith("exited: signal")
                    or e["name"].startswith("failure:")))
    if not marks:
        return None
    death = marks[0]
    later = [e["ts"] + e["dur"] for e in events if e.get("ph") == "X" and e.get("cat") == "step" and e["ts"] >= death]
    end = min(later) if later else death
    return death - before_s * 1e6, end + after_s * 1e6


def plot(trace_path, out, title=None, before_s=1.0, after_s=1.0):
    """Draws trace_path into out; False (with a line on stderr) without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
    except ImportError:
        print("plot_recovery: matplotlib is not installed (Debian: python3-matplotlib; run with /usr/bin/python3)",
              file=sys.stderr)
        return False
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    ranks = sorted(p for p, n in names.items() if n.startswith("rank "))
    row = {p: i for i, p in enumerate(reversed(ranks))}
    window = failure_window(events, before_s, after_s)
    t0, t1 = window if window else (None, None)

    def shown(ts, dur=0):
        return t0 is None or (ts + dur >= t0 and ts <= t1)

    fig, ax = plt.subplots(figsize=(12, 0.6 * len(ranks) + 2.2), dpi=110)
    bars = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "step" and e["pid"] in row and shown(e["ts"], e["dur"]):
            bars.setdefault((e["pid"], e["args"]["step"] % 2), []).append((e["ts"] / 1e6, e["dur"] / 1e6))
    for (pid, odd), xs in bars.items():
        ax.broken_barh(xs, (row[pid] - 0.35, 0.7), facecolors="#c8c8c8" if odd else "#9a9a9a")
    for e in events:
        if e.get("ph") != "i" or not shown(e["ts"]):
            continue
        x, name = e["ts"] / 1e6, e["name"]
        if name.startswith("exited") and e["pid"] in row and "SIG" in name.upper() and "KILL" in name.upper():
            ax.plot([x], [row[e["pid"]]], marker="X", color="#d62728", markersize=11, zorder=5)
        elif name.startswith("failure") or name.startswith("stall"):
            ax.axvline(x, color="#d62728", lw=1, ls="--")
        elif name.startswith("attempt"):
            ax.axvline(x, color="#1f77b4", lw=1, ls=":")
            ax.annotate(name, (x, len(ranks) - 0.2), xytext=(3, 0), textcoords="offset points", fontsize=7,
                        color="#1f77b4")
    instants, slices = recovery_events(events)
    for name, ts, dur in slices:
        if shown(ts, dur):
            ax.axvspan(ts / 1e6, (ts + dur) / 1e6, color="#2ca02c", alpha=0.2)
            ax.annotate(f"{name}: {dur / 1e3:.0f} ms", (ts / 1e6, -0.75), fontsize=7, color="#2ca02c")
    for name, ts in instants:
        if shown(ts):
            ax.axvline(ts / 1e6, color="#2ca02c", lw=1.2)
            ax.annotate(name, (ts / 1e6, len(ranks) - 0.2), xytext=(3, -9), textcoords="offset points", fontsize=7,
                        color="#2ca02c")
    # The gap: from the kill to the end of the first step that began after it, on the top
    # rank, with the step numbers on either side (the redone steps show as a step
    # number lower than the one before the kill).
    if window and ranks:
        death = t0 + before_s * 1e6
        top = [e for e in events if e.get("ph") == "X" and e.get("cat") == "step" and e["pid"] == ranks[0]]
        before = max((e for e in top if e["ts"] < death), key=lambda e: e["ts"], default=None)
        after = min((e for e in top if e["ts"] >= death), key=lambda e: e["ts"], default=None)
        y = row[ranks[0]] + 0.45
        # The step in flight at the kill labelled at its start, the first after it at
        # its end: an in-place recovery redoes the same step, its slices touch.
        for e, ha in ((before, "left"), (after, "right")):
            if e:
                ax.annotate(f"step {e['args']['step']}", ((e["ts"] + (e["dur"] if ha == "right" else 0)) / 1e6, y),
                            ha=ha, fontsize=7)
        if after:
            end = (after["ts"] + after["dur"]) / 1e6
            ax.annotate("", (end, y - 0.9), (death / 1e6, y - 0.9),
                        arrowprops=dict(arrowstyle="<->", color="#444444", lw=0.8))
            ax.annotate(f"{end - death / 1e6:.2f} s from the killed rank's exit to the end of the next step", (death / 1e6, y - 0.9),
                        xytext=(4, 3), textcoords="offset points", fontsize=8, color="#444444")
    ax.set_yticks([row[p] for p in ranks])
    ax.set_yticklabels([names[p] for p in ranks], fontsize=8)
    ax.set_xlabel("s since the launcher started")
    if window:
        ax.set_xlim(t0 / 1e6, t1 / 1e6)
    ax.set_ylim(-0.9, len(ranks) + 0.1)
    drawn = {e["name"].split(" ")[0].rstrip(":") for e in events if e.get("ph") == "i" and shown(e["ts"])}
    handles = [Patch(color="#9a9a9a", label="steps (alternating shades)"),
               Line2D([], [], marker="X", color="#d62728", ls="none", label="rank SIGKILLed (its exit)")]
    if drawn & {"failure", "stall"}:
        handles.append(Line2D([], [], color="#d62728", ls="--", label="launcher: failure"))
    if "attempt" in drawn:
        handles.append(Line2D([], [], color="#1f77b4", ls=":", label="attempt started"))
    if instants or slices:
        handles.append(Patch(color="#2ca02c", alpha=0.4, label="recovery (the trace's events named 'recover')"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=len(handles), fontsize=8,
              frameon=False)
    ax.set_title(title or trace_path, fontsize=10)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    print(f"plot_recovery: {len(ranks)} ranks, {sum(len(v) for v in bars.values())} steps, "
          f"{len(instants)} recovery instants, {len(slices)} recovery slices -> {out}")
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("out", nargs="?", default="docs/recovery.png")
    ap.add_argument("--before", type=float, default=1.0, help="seconds shown before the kill")
    ap.add_argument("--after", type=float, default=1.0, help="seconds shown after the first step after it")
    ap.add_argument("--title")
    a = ap.parse_args()
    sys.exit(0 if plot(a.trace, a.out, a.title, a.before, a.after) else 1)


if __name__ == "__main__":
    main()
