#!/usr/bin/env bash
# scripts/plot-trace on a small generated trace (make_trace.py): it ends,
# writes a PNG and counts the bars it drew (one collection per rank and
# kind, not one call per slice). Skipped (77) without matplotlib.
set -euo pipefail
script=$1
here=$(cd "$(dirname "$0")" && pwd)
py=
for p in python3 /usr/bin/python3; do  # a pyenv python3 may lack Debian's python3-matplotlib
  if "$p" -c 'import matplotlib' 2>/dev/null; then py=$p; break; fi
done
[ -n "$py" ] || { echo "matplotlib is not installed: skipped"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$py" "$here/make_trace.py" "$dir/t.json" 400 2
out=$(timeout 120 "$py" "$script" "$dir/t.json" "$dir/t.png")
echo "$out"
# 50 steps a rank: 50 step bars, 50 collective bars x 3, rank 0's 50 waits.
[ "$out" = "plot-trace: 2 ranks, 450 bars -> $dir/t.png" ]
[ "$(head -c 8 "$dir/t.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]
