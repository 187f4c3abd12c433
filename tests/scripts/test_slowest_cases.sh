#!/usr/bin/env bash
# scripts/slowest-cases on a fake LastTest.log: cases whose names have spaces,
# a case that prints a line like ctest's own time line, a failed case, the
# count argument; a missing log is one line and exit 0 (it never fails a run).
set -euo pipefail
script=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/Testing/Temporary"
block() {  # k/n name seconds status [output line]
  printf '%s Testing: %s\n%s Test: %s\nCommand: "/bin/true"\nDirectory: /x\n"%s" start time: Dec 06 21:38 UTC\n' \
    "$1" "$2" "$1" "$2" "$2"
  printf 'Output:\n----------------------------------------------------------\n%s<end of output>\n' "${5:+$5
}"
  printf 'Test time =  %6.2f sec\n----------------------------------------------------------\nTest %s.\n' "$3" "$4"
  printf '"%s" end time: Dec 06 21:38 UTC\n"%s" time elapsed: 00:00:00\n' "$2" "$2"
  printf -- '----------------------------------------------------------\n\n'
}
{
  echo 'Start testing: Dec 06 21:38 UTC'
  echo '----------------------------------------------------------'
  block 2/4 'launcher.scenario: a quick one' 0.51 Passed
  block 1/4 'reliability.chaos: faults in a long run' 111.30 Passed 'Test time =   999.00 sec'
  block 3/4 'worker.ddp: a failed one' 7.25 Failed
  block 4/4 'unit: the fastest' 0.01 Passed
  echo 'End testing: Dec 06 21:40 UTC'
} > "$dir/Testing/Temporary/LastTest.log"
# The running average ctest keeps elsewhere: not what this pass took.
printf 'launcher.scenario: a quick one 3 500\n---\n' > "$dir/Testing/Temporary/CTestCostData.txt"

out=$("$script" "$dir" 2)
expected="slowest-cases: the 2 slowest of 4 cases in $dir (seconds each; 119 s of case time in all; from $dir/Testing/Temporary/LastTest.log)
    111.30  reliability.chaos: faults in a long run
      7.25  worker.ddp: a failed one  [failed]"
if [ "$out" != "$expected" ]; then
  printf 'got:\n%s\nexpected:\n%s\n' "$out" "$expected" >&2
  exit 1
fi
[ "$("$script" "$dir" | wc -l)" = 5 ] || { echo "default count: not all 4 cases listed" >&2; exit 1; }

rm "$dir/Testing/Temporary/LastTest.log"
out=$("$script" "$dir") || { echo "a missing log failed the run" >&2; exit 1; }
grep -q '^slowest-cases: no case times: cannot read ' <<< "$out" || { echo "missing log: got '$out'" >&2; exit 1; }
echo "slowest-cases: all checks passed"
