#!/bin/sh
# Runs one worker under GNU time and records its peak resident set size
# (KiB, from wait4's ru_maxrss), minor page faults and system CPU seconds in
# $PEAK_RSS_DIR/rank<RANK> ("<KiB> <faults> <sys s>"). ddp-launch starts this
# script as the worker program, so C++ and Python workers are measured the
# same way.
exec /usr/bin/time -f "%M %R %S" -o "${PEAK_RSS_DIR:?set PEAK_RSS_DIR}/rank${RANK:?no RANK}" "$@"
