#!/bin/sh
# A worker that speaks torchrun's file-timer protocol itself (the JSON lines
# torch's FileTimerClient writes to $TORCHELASTIC_TIMER_FILE), for cases a
# Python client makes slow or cannot make. $1 is
#   child    a child process (not the worker) holds a 0.3 s scope 'child_load'
#            around a 10 s sleep; the worker waits for it
#   term     the worker holds a 0.3 s scope 'term_me' with SIGTERM around a
#            10 s sleep, and exits 5 on SIGTERM
#   quiet    a scope with signal 0, already expired (the launcher reads it
#            before it sees the exit); exit 0
#   garbage  lines that are no request, a request naming the launcher's pid,
#            then a scope acquired and released; exit 0
# Prints "held by <pid>" for the process that holds the scope.
pipe=$TORCHELASTIC_TIMER_FILE
at() { awk -v d="$1" -v n="$(date +%s.%N)" 'BEGIN { printf "%.3f", n + d }'; }
request() {  # pid scope expiration_time signal
  printf '{"version": 1, "pid": %s, "scope_id": "%s", "expiration_time": %s, "signal": %s}\n' "$1" "$2" "$3" "$4" > "$pipe"
}
case "$1" in
  child)
    sh -c 'echo "held by $$"; printf "{\"version\": 1, \"pid\": %s, \"scope_id\": \"child_load\", \"expiration_time\": %s, \"signal\": 9}\n" $$ "$0" > "$1"; exec sleep 10' "$(at 0.3)" "$pipe" &
    wait $!
    # The child is gone; the launcher now stops the whole group. A worker that
    # is still here after 5 s was not stopped (without the pause it could
    # print and exit before the launcher's SIGTERM reached it).
    sleep 5
    echo survived ;;
  term)
    trap 'echo "got SIGTERM"; exit 5' TERM
    echo "held by $$"
    request $$ term_me "$(at 0.3)" 15
    sleep 10 & wait $!
    echo survived ;;
  quiet)
    request $$ quiet_scope "$(at -1)" 0
    echo done ;;
  garbage)
    printf 'garbage\n' > "$pipe"
    printf '{"pid": {"nested": 1}}\n' > "$pipe"
    request "$PPID" not_the_launcher "$(at -1)" 9
    request $$ fine "$(at 5)" 9
    request $$ fine -1 0
    echo done ;;
esac
