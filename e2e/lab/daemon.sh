#!/usr/bin/env bash
# daemon.sh stop|start|restart NAME - stop one of the lab's daemons (run/NAME.pid, as up.sh
# started it) and start it again with the very same command line, user, environment and working
# directory (the fault tests: kube-apiserver restarted, munged or sshd down for a while).
#
#   stop:  saves /proc/PID/{cmdline,environ,cwd} and its uid/gid in run/NAME.saved/, then SIGTERM
#          (SIGKILL after 10 s); only if /proc/PID/cmdline names NAME's program.
#   start: runs the saved command line again (setsid, output appended to log/NAME.log), its PID in
#          run/NAME.pid; a no-op if NAME is running.
# Only processes of this LAB_DIR are touched (by their PID files).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
LAB_DIR=${LAB_DIR:-$(cd "$here/../.." && pwd)/.lab}
action=${1:-} name=${2:-}
[[ "$action" =~ ^(stop|start|restart)$ && "$name" =~ ^[a-z-]+$ ]] || { echo "usage: $0 stop|start|restart NAME" >&2; exit 2; }
pidfile=$LAB_DIR/run/$name.pid saved=$LAB_DIR/run/$name.saved
# The program a PID file must name (agent.py runs under python).
case $name in agent) program=agent.py ;; *) program=$name ;; esac

alive() { [ -r "/proc/$1/stat" ] && ! awk '{exit !($3=="Z")}' "/proc/$1/stat" 2>/dev/null; }
running_pid() {
  local pid
  pid=$(cat "$pidfile" 2>/dev/null) || return 1
  alive "$pid" && tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q -- "$program" && echo "$pid"
}

stop() {
  local pid i
  pid=$(running_pid) || { echo "$name is not running" >&2; return 1; }
  mkdir -p "$saved"
  # The command line up.sh started it with, if it saved one (a wrapper such as unshare execs away).
  if [ -s "$LAB_DIR/run/$name.argv" ]; then cp "$LAB_DIR/run/$name.argv" "$saved/cmdline"; else cp "/proc/$pid/cmdline" "$saved/cmdline"; fi
  cp "/proc/$pid/environ" "$saved/environ"
  readlink "/proc/$pid/cwd" > "$saved/cwd"
  awk '/^Uid:/{u=$2} /^Gid:/{g=$2} END{print u, g}' "/proc/$pid/status" > "$saved/ids"
  # A saved launcher changes user itself (setpriv in up.sh's command line): start it as root.
  [ ! -s "$LAB_DIR/run/$name.argv" ] || echo "0 0" > "$saved/ids"
  kill -TERM "$pid"
  for i in $(seq 1 100); do alive "$pid" || break; sleep 0.1; done
  alive "$pid" && kill -KILL "$pid"
  rm -f "$pidfile"
  echo "$name (pid $pid) stopped"
}

start() {
  local pid ids i
  if pid=$(running_pid); then echo "$name already running (pid $pid)"; return 0; fi
  [ -s "$saved/cmdline" ] || { echo "no saved command line for $name: stop it with $0 first" >&2; return 1; }
  local argv=() envv=()
  mapfile -d '' argv < "$saved/cmdline"
  mapfile -d '' envv < "$saved/environ"
  read -r -a ids < "$saved/ids"
  # The same user as before (munged runs as munge); setpriv is what up.sh used for it.
  local as=()
  [ "${ids[0]}" = 0 ] || as=(setpriv "--reuid=${ids[0]}" "--regid=${ids[1]}" --init-groups)
  rm -f "$pidfile"
  # The lab's Slurm first in PATH (24.11's chroot wrappers, 26.05's build): a process's own
  # environment may not hold it (a wrapper changed it before exec).
  local path=$PATH
  [ ! -s "$LAB_DIR/slurm.env" ] || path=$(. "$LAB_DIR/slurm.env" >/dev/null && echo "$PATH")
  (cd "$(cat "$saved/cwd")" && exec env -i "${envv[@]}" PATH="$path" setsid bash -c 'echo $$ > "$0"; exec "$@"' \
    "$pidfile" "${as[@]}" "${argv[@]}" >> "$LAB_DIR/log/$name.log" 2>&1 < /dev/null 9>&- &)
  for i in $(seq 1 200); do [ -s "$pidfile" ] && break; sleep 0.05; done
  [ -s "$pidfile" ] || { echo "$name did not start" >&2; return 1; }
  echo "$name started (pid $(cat "$pidfile"))"
}

case $action in
  stop) stop ;;
  start) start ;;
  restart) stop; start ;;
esac
