#!/usr/bin/env bash
# scripts/lib/sanitizer-reports.sh: which report files count as findings.
# The texts are what GCC 12's LeakSanitizer wrote for an ASan program (64
# threads, its heap reachable) SIGKILLed while it checked for leaks at exit.
set -euo pipefail
. "$(dirname "$0")/../../scripts/lib/sanitizer-reports.sh"
dir=$(mktemp -d)
fail() { echo "FAIL: $*" >&2; exit 1; }
out=$(mktemp)
trap 'rm -rf "$dir" "$out"' EXIT
expect() {  # expect FINDINGS: the files now in $dir; what was printed is in $out
  sanitizer_reports "$dir" > "$out"
  [[ $sanitizer_findings == "$1" ]] ||
    fail "$sanitizer_findings finding(s) in $(ls "$dir"), expected $1; printed: $(cat "$out")"
}

# Killed in the leak check: no finding, but its file is still shown.
printf '==7207==Unable to get registers from thread 7142.\n==7207==Unable to get registers from thread 7143.\n' \
  > "$dir/asan.7142"
expect 0
grep -q 'asan.7142' "$out" || fail "the interrupted check's file is not named: $(cat "$out")"
# Killed between opening its report file and writing it: no finding.
: > "$dir/asan.22194"
expect 0
# The same lines before a leak report: a finding.
cat > "$dir/asan.5096" <<'R'
==5161==Unable to get registers from thread 5096.
==5161==Unable to get registers from thread 5097.

=================================================================
==5161==ERROR: LeakSanitizer: detected memory leaks

Direct leak of 24 byte(s) in 1 object(s) allocated from:
    #0 0x7f571d0b94c8 in operator new(unsigned long)

SUMMARY: AddressSanitizer: 24 byte(s) leaked in 1 allocation(s).
R
expect 1
# Any other report: a finding.
printf '==1==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x602000000011\n' > "$dir/asan.1"
expect 2
echo "sanitizer report files: counted as expected"
