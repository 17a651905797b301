#!/usr/bin/env bash
# guard.sh PARENT_PID COMMAND [ARGS…]
# Runs COMMAND and stops it when PARENT_PID dies, so a test process killed by SIGKILL or a crash leaves no
# apiserver, etcd or kwok behind. SIGTERM/SIGINT to the guard are forwarded; SIGKILL follows after 10 s.
parent="$1"; shift
# The trap is set before the command starts: a TERM between the two would end the guard alone and orphan the
# command. Until child is assigned, $! is the command's PID (or empty: nothing started, nothing to stop).
stop() {
  child=${child:-$!}
  [ -n "$child" ] || exit 143
  kill -TERM "$child" 2>/dev/null
  for _ in $(seq 1 100); do kill -0 "$child" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$child" 2>/dev/null
  wait "$child" 2>/dev/null
  exit 143
}
child=
trap stop TERM INT HUP
"$@" &
child=$!
while kill -0 "$parent" 2>/dev/null; do
  kill -0 "$child" 2>/dev/null || { wait "$child"; exit $?; }
  sleep 0.5 & wait $!
done
stop
