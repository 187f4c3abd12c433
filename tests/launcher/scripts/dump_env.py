"""Worker for the torchrun parity test: writes its environment and argv to
$DUMP_DIR/rank<RANK>.env as NAME=value lines (argv as ARGV=a|b|c)."""
import os
import sys

with open(os.path.join(os.environ["DUMP_DIR"], f"rank{os.environ['RANK']}.env"), "w") as f:
    for k, v in sorted(os.environ.items()):
        f.write(f"{k}={v}\n")
    f.write("ARGV=" + "|".join(sys.argv[1:]) + "\n")
