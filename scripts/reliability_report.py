"""Writes the results of a `ctest -L reliability -V` log into docs/reliability.md
(scripts/reliability-report runs it). Usage: reliability_report.py LOG COMMIT;
DDP_RELIABILITY_LONG / DDP_RELIABILITY_SEED / DDP_SOAK_LAUNCHES /
DDP_RELIABILITY_ROUNDS as in the run, for the header line."""
import os, re, sys, datetime
log, commit = sys.argv[1], sys.argv[2]
cores = os.cpu_count()
text = open(log, errors="replace").read()
m = re.search(r"Total Test time \(real\) = +([\d.]+) sec", text)
wall = round(float(m.group(1))) if m else "?"
# ctest -V prefixes a test's output with "N: "; its status line is
# "k/n Test #N: name ....   Passed   12.3 sec".
status = []
for m in re.finditer(r"^\s*\d+/\d+ Test\s+#(\d+): (.+?) \.+\**\s*(Passed|Failed|Not Run|Skipped|\(Disabled\)|Timeout|[A-Za-z ]+?)\s+([\d.]+) sec", text, re.M):
    status.append((m.group(2).replace("reliability.", "", 1), m.group(3), float(m.group(4))))

results = [l.split("|") for l in re.findall(r"^\d+: (RESULT\|.*)$", text, re.M)]
seed = os.environ["DDP_RELIABILITY_SEED"]
out = []
out.append(f"Run of `scripts/reliability-report` on {datetime.date.today()}, commit {commit}, {cores} cores, "
           f"seed {seed}, {'long' if os.environ['DDP_RELIABILITY_LONG'] == '1' else 'CI'} variant "
           f"(soak launches: {os.environ.get('DDP_SOAK_LAUNCHES', 'default')}, "
           f"restart rounds: {os.environ.get('DDP_RELIABILITY_ROUNDS', 'default')}): "
           f"{sum(1 for s in status if s[1] == 'Passed')} of {len(status)} cases passed, {wall} s wall.")
out.append("")
out.append("| case | result | s |")
out.append("|---|---|---:|")
for name, st, sec in status:
    out.append(f"| {name} | {st} | {sec:.0f} |")
out.append("")
out.append("Each fault and what happened (the cases' `RESULT` lines):")
out.append("")
out.append("| fault | outcome | s |")
out.append("|---|---|---:|")
for r in results:
    if len(r) >= 5:
        out.append(f"| {r[1]} | {r[3]} | {r[4]} |")
body = "\n".join(out)
doc = "docs/reliability.md"
variant = "long" if os.environ["DDP_RELIABILITY_LONG"] == "1" else "ci"  # each variant has its own block
start, end = f"<!-- reliability-{variant}:start -->", f"<!-- reliability-{variant}:end -->"
block = f"{start}\n{body}\n{end}"
t = open(doc).read()
pat = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
t = pat.sub(lambda _: block, t) if pat.search(t) else t.rstrip() + "\n\n" + block + "\n"
open(doc, "w").write(t)
print(body)
