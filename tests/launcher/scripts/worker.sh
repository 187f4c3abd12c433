#!/bin/sh
# A tiny worker for the launcher's black-box tests. SCENARIO picks what it
# does; OUT (a directory) receives what it observed, one file per rank.
# Files are written to a temp name and renamed so the test never reads half.
rank=${RANK:-x}
note() { printf '%s\n' "$2" > "$OUT/$1.$rank.tmp" && mv "$OUT/$1.$rank.tmp" "$OUT/$1.$rank"; }
idle() { while :; do sleep 30 & wait $!; done; }
note pid $$
case "$SCENARIO" in
  env)
    note runmode "$(stat -c %a "$(dirname "$TORCHELASTIC_ERROR_FILE")")"
    printf 'ARGS=%s\n' "$*" > "$OUT/env.$rank.tmp"; env >> "$OUT/env.$rank.tmp"; mv "$OUT/env.$rank.tmp" "$OUT/env.$rank" ;;
  fail)      # rank FAIL_RANK exits FAIL_CODE once every rank is up; the others wait for SIGTERM
    trap 'note got TERM; exit 143' TERM
    note ready 1
    if [ "$rank" = "$FAIL_RANK" ]; then
      while [ "$(ls "$OUT" | grep -c '^ready\.')" -lt "$WORLD_SIZE" ]; do sleep 0.01; done
      exit "$FAIL_CODE"
    fi
    idle ;;
  segv)
    note ready 1
    if [ "$rank" = 1 ]; then kill -SEGV $$; fi
    trap 'exit 143' TERM; idle ;;
  errorfile)  # torchelastic-style error file, then exit 1
    if [ "$rank" = 1 ]; then
      printf '{"message": {"message": "ValueError: loss is NaN at step 7", "extraInfo": {"py_callstack": "Traceback (most recent call last):\\n  File \\"train.py\\", line 3", "timestamp": "1700000000"}}}' > "$TORCHELASTIC_ERROR_FILE"
      exit 1
    fi
    trap 'exit 143' TERM; idle ;;
  restart)    # rank 1 fails on the first attempt only
    note attempt "$TORCHELASTIC_RESTART_COUNT"
    if [ "$rank" = 1 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then exit 4; fi
    exit 0 ;;
  restart_errorfile)  # rank 1 writes an error file and fails on the first attempt only
    if [ "$rank" = 1 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
      printf '{"message": "RuntimeError: first attempt"}' > "$TORCHELASTIC_ERROR_FILE"
      exit 4
    fi
    exit 0 ;;
  alwaysfail)
    exit $((5 + TORCHELASTIC_RESTART_COUNT)) ;;
  record)     # record every forwarded signal, exit like a shell would
    for s in TERM INT HUP QUIT USR1; do trap "note got $s; exit 1" $s; done
    note ready 1; idle ;;
  record_int) # record SIGINT but keep running (for the second-Ctrl-C test)
    trap 'note got INT' INT; trap 'note got TERM' TERM
    note ready 1; idle ;;
  ignore_term)  # rank 0 ignores SIGTERM; rank 1 fails once rank 0 is ready
    if [ "$rank" = 1 ]; then
      while [ ! -e "$OUT/ready.0" ]; do sleep 0.01; done
      exit 9
    fi
    trap '' TERM; note ready 1; idle ;;
  sleep)
    note ready 1; idle ;;
  orphan)     # rank 0 leaves a grandchild behind; rank 1 checks who adopts and reaps it
    if [ "$rank" = 0 ]; then
      sh -c 'while [ ! -e "$OUT/go" ]; do sleep 0.01; done' &
      note grandchild $!
      exit 0
    fi
    while [ ! -e "$OUT/grandchild.0" ]; do sleep 0.01; done
    g=$(cat "$OUT/grandchild.0")
    while [ "$(awk '{print $4}' /proc/$g/stat)" = "$(cat "$OUT/pid.0")" ]; do sleep 0.01; done
    note gc_ppid "$(awk '{print $4}' /proc/$g/stat)"
    : > "$OUT/go"
    i=0; while [ -e /proc/$g ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done
    if [ -e /proc/$g ]; then note gc_state zombie; else note gc_state reaped; fi
    exit 0 ;;
  vanish)     # deletes the program itself, then fails: the restart cannot exec it
    rm -f "$0"; exit 1 ;;
  grandchild) # leaves a child in its own process group, then idles
    sleep 300 & note gc $!
    note ready 1; idle ;;
  linger)     # attempt 0: rank 0's child needs a moment after SIGTERM (a DataLoader worker
              # holding MASTER_PORT); rank 1 fails. attempt 1: rank 0 records whether that
              # child had finished before the new group started.
    if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
      if [ "$rank" = 0 ]; then
        ( trap 'sleep 0.5; note gc_done 1; exit 0' TERM; note gc_ready 1; idle ) &
        trap 'exit 143' TERM; idle
      fi
      while [ ! -e "$OUT/gc_ready.0" ]; do sleep 0.01; done
      exit 4
    fi
    if [ "$rank" = 0 ]; then
      if [ -e "$OUT/gc_done.0" ]; then note saw_gc_done yes; else note saw_gc_done no; fi
    fi
    exit 0 ;;
  early_error)  # rank 0 fails first (its error file is written first) but is reaped last
    if [ "$rank" = 0 ]; then
      trap '' TERM
      printf '{"message": "OSError: [Errno 22] Invalid argument: /proc/self/metrics.jsonl"}' > "$TORCHELASTIC_ERROR_FILE"
      note failed 1
      while [ ! -e "$OUT/pid.1" ]; do sleep 0.01; done
      p=$(cat "$OUT/pid.1")
      while [ -e "/proc/$p" ]; do sleep 0.01; done  # until the launcher has reaped rank 1
      exit 1
    fi
    while [ ! -e "$OUT/failed.0" ]; do sleep 0.01; done
    # File times advance in clock ticks (4 ms here): write only once a new
    # file is stamped later than failed.0 (written after rank 0's error
    # file), or both failures could carry the same time and neither be first.
    until : > "$OUT/tick.1" && [ "$OUT/tick.1" -nt "$OUT/failed.0" ]; do sleep 0.001; done
    printf '{"message": "RuntimeError: allreduce: Connection reset by peer"}' > "$TORCHELASTIC_ERROR_FILE"
    exit 1 ;;
  term_linger)  # rank 1 exits 9 once rank 0 is ready; rank 0 logs each SIGTERM and exits 143 on $OUT/release
    if [ "$rank" = 1 ]; then
      while [ ! -e "$OUT/ready.0" ]; do sleep 0.01; done
      exit 9
    fi
    trap 'echo TERM >> "$OUT/terms.0"' TERM
    note ready 1
    while [ ! -e "$OUT/release" ]; do sleep 0.01; done
    exit 143 ;;
  stop_self)  # rank 1 stops itself (SIGSTOP); rank 0 then fails
    trap 'note got TERM; exit 143' TERM
    if [ "$rank" = 1 ]; then kill -STOP $$; idle; fi
    while [ ! -e "$OUT/pid.1" ]; do sleep 0.01; done
    p=$(cat "$OUT/pid.1")
    while [ "$(awk '{print $3}' "/proc/$p/stat")" != T ]; do sleep 0.01; done
    exit 5 ;;
  leftover)   # exits 0 at once, leaving a child that notes SIGTERM but keeps running
    ( trap 'note got TERM' TERM; note ready 1; idle ) &
    while [ ! -e "$OUT/ready.$rank" ]; do sleep 0.01; done
    exit 0 ;;
  stdin)      # reads one line from stdin ("<eof>" at end of input)
    if read -r line; then note line "$line"; else note line "<eof>"; fi
    exit 0 ;;
  logs)       # lines on both streams, one longer than a pipe buffer, binary junk, a last line
              # without a newline; rank FAIL_RANK then exits 3. All ranks write at once.
    note ready 1
    while [ "$(ls "$OUT" | grep -c '^ready\.')" -lt "$WORLD_SIZE" ]; do sleep 0.01; done
    echo "out $rank"; echo "err $rank" >&2
    head -c 200000 /dev/zero | tr '\0' "$rank"; echo
    printf 'bin\001\377\033[0m\n'
    printf 'tail %s' "$rank"
    if [ "$rank" = "${FAIL_RANK:-}" ]; then exit 3; fi
    exit 0 ;;
  until_world)  # c10d: dump the environment; done once the world has WANT_WORLD ranks, else wait for SIGTERM
    env > "$OUT/env.$rank.tmp"; mv "$OUT/env.$rank.tmp" "$OUT/env.$rank"
    if [ "$WORLD_SIZE" = "$WANT_WORLD" ]; then exit 0; fi
    trap 'exit 143' TERM; idle ;;
  fail_first)   # rank FAIL_RANK exits 4 in the first attempt once every rank is up; all exit 0 after
    note attempt "$TORCHELASTIC_RESTART_COUNT"
    if [ "$TORCHELASTIC_RESTART_COUNT" != 0 ]; then exit 0; fi
    trap 'exit 143' TERM
    note ready 1
    if [ "$rank" = "$FAIL_RANK" ]; then
      while [ "$(ls "$OUT" | grep -c '^ready\.')" -lt "$WORLD_SIZE" ]; do sleep 0.01; done
      exit 4
    fi
    idle ;;
  affinity)     # the CPUs it may run on (--numa_binding)
    note cpus "$(awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status)"
    exit 0 ;;
  *) echo "unknown SCENARIO '$SCENARIO'" >&2; exit 99 ;;
esac
