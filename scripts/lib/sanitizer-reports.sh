# Sourced by scripts/run-sanitized-tests: sanitizer_reports DIR prints every
# report file in DIR and sets $sanitizer_findings to how many hold a finding.
#
# A file that holds nothing but LeakSanitizer's "Unable to get registers from
# thread N." lines, or nothing at all, is a process killed while it checked
# for leaks at its exit: the check's tracer found the process's threads gone
# (ptrace ESRCH) or the process died between opening the file and writing it.
# The tests SIGKILL workers on purpose (teardown after --shutdown_timeout), and
# an instrumented LibTorch process's leak check takes long enough to be caught
# in it now and then. Such a file is shown but not counted: it reports no leak
# and no error. Any other line in the file (a leak report after those lines,
# an ASan or UBSan error) makes it a finding.
sanitizer_reports() {
  local f
  sanitizer_findings=0
  shopt -s nullglob
  for f in "$1"/*; do
    if ! grep -qvE '^==[0-9]+==Unable to get registers from thread [0-9]+\.$' "$f"; then
      echo "==== interrupted leak check, not a finding (the process was killed while LeakSanitizer ran at its exit): $f"
      cat "$f"
      continue
    fi
    echo "==== sanitizer report $f"
    cat "$f"
    sanitizer_findings=$((sanitizer_findings + 1))
  done
  shopt -u nullglob
}
