#!/usr/bin/env bash
# bench/launcher/bench_recovery.py's parsing and plot_recovery.py's picture
# (test_bench_recovery.py), under a python3 with matplotlib. Skipped (77)
# without one.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
for p in python3 /usr/bin/python3; do  # a pyenv python3 may lack Debian's python3-matplotlib
  if "$p" -c 'import matplotlib' 2>/dev/null; then exec timeout 120 "$p" "$here/test_bench_recovery.py" "$1"; fi
done
echo "matplotlib is not installed: skipped"
exit 77
