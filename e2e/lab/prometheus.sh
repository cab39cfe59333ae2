#!/usr/bin/env bash
# prometheus.sh start|stop - the lab's Prometheus (issue 16), on 127.0.0.1:19090+LAB_PORT_OFFSET.
#
# start: renders the chart with e2e/lab/prometheus-values.yaml and writes $LAB_DIR/prometheus/
#   (prometheus.yml: the scrape job the chart's ServiceMonitor implies, over file_sd targets in
#   targets/*.json; rules.yml: the chart's PrometheusRule), checks both with promtool, then starts
#   Prometheus (built by build-prometheus.sh), or reloads it if it runs. Its PID is in
#   run/prometheus.pid (down.sh stops it), its log in log/prometheus.log, its URL in prometheus/url.
#   up.sh runs it when LAB_PROMETHEUS=1; the e2e tests' `prometheus` fixture runs it too.
# stop: stops it by its PID file (after checking the PID is still our Prometheus).
# Targets: e2e/prometheus.py register() (tests), e2e/demo.sh (the demo's operator).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
export LAB_DIR=${LAB_DIR:-$repo/.lab}
PY=${LAB_PYTHON:-$repo/.venv/bin/python}
PORT=$((19090 + ${LAB_PORT_OFFSET:-0}))
P=$LAB_DIR/prometheus
pidfile=$LAB_DIR/run/prometheus.pid
log() { echo "[lab-prometheus] $*"; }
# http METHOD URL: succeeds on a 2xx (no curl on a minimal Debian; the venv's Python is there).
http() { "$PY" -c 'import sys, urllib.request as u; u.urlopen(u.Request(sys.argv[2], method=sys.argv[1]), timeout=5)' "$1" "$2" 2>/dev/null; }
running() {
  local pid
  pid=$(cat "$pidfile" 2>/dev/null) && [ -r "/proc/$pid/cmdline" ] &&
    tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q -- "--config.file=$P/prometheus.yml"
}

case "${1:-}" in
start)
  bin=$("$here/build-prometheus.sh")
  mkdir -p "$P/targets" "$LAB_DIR/run" "$LAB_DIR/log"
  "$PY" "$repo/e2e/prometheus.py" write-config >/dev/null
  "$bin/promtool" check config "$P/prometheus.yml" >/dev/null
  echo "http://127.0.0.1:$PORT" > "$P/url"
  if running; then
    http POST "http://127.0.0.1:$PORT/-/reload"
    log "reloaded (PID $(cat "$pidfile")): http://127.0.0.1:$PORT"
    exit 0
  fi
  rm -rf "$P/data"
  # 9>&-: not inherit the lab lock (up.sh holds it on fd 9)
  setsid bash -c 'echo $$ > "$0"; exec "$@"' "$pidfile" "$bin/prometheus" \
    --config.file="$P/prometheus.yml" --storage.tsdb.path="$P/data" --storage.tsdb.retention.time=1d \
    --web.listen-address="127.0.0.1:$PORT" --web.enable-lifecycle \
    > "$LAB_DIR/log/prometheus.log" 2>&1 < /dev/null 9>&- &
  for _ in $(seq 1 300); do
    http GET "http://127.0.0.1:$PORT/-/ready" && {
      log "ready: http://127.0.0.1:$PORT (PID $(cat "$pidfile"), log $LAB_DIR/log/prometheus.log)"; exit 0; }
    running || { tail -20 "$LAB_DIR/log/prometheus.log" >&2; log "Prometheus exited" >&2; exit 1; }
    sleep 0.1
  done
  log "Prometheus not ready after 30 s; see $LAB_DIR/log/prometheus.log" >&2; exit 1 ;;
stop)
  if running; then
    pid=$(cat "$pidfile"); kill -TERM "$pid"
    for _ in $(seq 1 100); do [ -e "/proc/$pid" ] || break; sleep 0.1; done
    [ -e "/proc/$pid" ] && kill -KILL "$pid"
    log "stopped (PID $pid)"
  fi
  rm -f "$pidfile" ;;
*) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
