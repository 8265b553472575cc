#!/usr/bin/env bash
# Instructions per proxied request: rpx under `valgrind --tool=callgrind`, with the same bootstrap
# and origin as bench/run.sh, loaded by wrk for a fixed time. Instruction counts do not depend on
# what else the machine is doing, so this is the figure to compare before and after a change to
# the request path (user space only: the kernel's share of a request is not counted).
#
#   bash bench/callgrind.sh                 # 30 B responses, 50 keep-alive connections
#
# Options (environment variables):
#   RPX_BIN=path     rpx binary (default <repo>/bazel-bin/source/exe/rpx)
#   RPX_ARGS="..."   extra rpx flags
#   PAYLOAD=small.txt  small.txt (29 B), page.html (16 KB) or big.bin (4 MiB)
#   CONNS=50         wrk connections
#   DURATION=10s     measured wrk run (rpx runs ~50x slower under callgrind)
#   VHOSTS=0         extra virtual hosts ahead of the matching one (as bench/run.sh's rpx-10kvh)
#   BASE_PORT=18500  first port tried
#   OUT=path         keep the callgrind profile there (callgrind_annotate OUT); default: deleted
#
# Prints requests served, instructions (Ir) and Ir per request. Only the measured run is counted:
# collection starts after the warm-up requests and stops before shutdown.
set -euo pipefail
export LC_ALL=C
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
log() { echo "[callgrind $(date +%H:%M:%S)] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
# shellcheck source=bench/configs.sh
source "$HERE/configs.sh"

RPX_BIN=${RPX_BIN:-$ROOT/bazel-bin/source/exe/rpx}
RPX_ARGS=${RPX_ARGS:-}
PAYLOAD=${PAYLOAD:-small.txt}
CONNS=${CONNS:-50}
DURATION=${DURATION:-10s}
VHOSTS=${VHOSTS:-0}
BASE_PORT=${BASE_PORT:-18500}
OUT=${OUT:-}
export PATH="$PATH:/usr/sbin:/sbin"
for t in valgrind callgrind_control nginx wrk curl taskset ss; do
  command -v "$t" >/dev/null || die "$t is not installed (apt-get install valgrind nginx-light wrk)"
done
[ -x "$RPX_BIN" ] || die "no rpx binary at $RPX_BIN (bazel build //source/exe:rpx)"
case "$PAYLOAD" in small.txt|page.html|big.bin) ;; *) die "PAYLOAD must be small.txt, page.html or big.bin";; esac
ulimit -n 20000 2>/dev/null || true
NOFILE=$(ulimit -n)

TMP=$(mktemp -d /tmp/rpx-callgrind.XXXXXX)
chmod 755 "$TMP"
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

port_free() { [ -z "$(ss -Htln "sport = :$1" 2>/dev/null)" ]; }
NEXT_PORT=$BASE_PORT
pick_port() {  # pick_port VAR
  while ! port_free "$NEXT_PORT"; do NEXT_PORT=$((NEXT_PORT + 1)); done
  printf -v "$1" '%s' "$NEXT_PORT"
  NEXT_PORT=$((NEXT_PORT + 1))
}
wait_http() {  # wait_http URL SECONDS
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    curl -sf -o /dev/null "$1" && return 0
    sleep 0.1
  done
  return 1
}
stat_value() { curl -sf "http://127.0.0.1:$ADMIN_PORT/stats" | awk -v k="$1:" '$1 == k {print $2}'; }

mkdir -p "$TMP/www" "$TMP/origin" "$TMP/rpx"
write_payloads "$TMP/www"
pick_port UPSTREAM_PORT; pick_port PROXY_PORT; pick_port ADMIN_PORT
write_origin_conf "$TMP/origin" "$UPSTREAM_PORT"
taskset -c 1 nginx -p "$TMP/origin" -c "$TMP/origin/nginx.conf" -e "$TMP/origin/error.log" \
  >"$TMP/origin/stdout.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$UPSTREAM_PORT/$PAYLOAD" 10 || die "origin nginx did not start"

write_rpx_conf "$TMP/rpx" "$PROXY_PORT" "$ADMIN_PORT" "$VHOSTS"
PROFILE=${OUT:-$TMP/callgrind.out}
# shellcheck disable=SC2086
taskset -c 0 valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$PROFILE" \
  "$RPX_BIN" -c "$TMP/rpx/bootstrap.yaml" --concurrency 1 -l warn $RPX_ARGS \
  >"$TMP/rpx/stdout.log" 2>&1 &
RPX_PID=$!
PIDS+=("$RPX_PID")
wait_http "http://127.0.0.1:$PROXY_PORT/$PAYLOAD" 120 || { cat "$TMP/rpx/stdout.log" >&2; die "rpx did not start"; }

URL="http://127.0.0.1:$PROXY_PORT/$PAYLOAD"
taskset -c 1 wrk -t1 -c "$CONNS" -d 2s "$URL" >/dev/null  # warm-up: connections, pools, caches
before=$(stat_value http.ingress_http.downstream_rq_total)
callgrind_control -i on "$RPX_PID" >/dev/null
taskset -c 1 wrk -t1 -c "$CONNS" -d "$DURATION" "$URL" >"$TMP/wrk.txt"
callgrind_control -i off "$RPX_PID" >/dev/null
after=$(stat_value http.ingress_http.downstream_rq_total)
kill -INT "$RPX_PID"
wait "$RPX_PID" 2>/dev/null || true
PIDS=("${PIDS[@]/$RPX_PID}")

requests=$((after - before))
ir=$(awk '/^totals:/ {print $2; exit}' "$PROFILE")
[ "$requests" -gt 0 ] && [ -n "$ir" ] || die "no requests or no profile (requests=$requests)"
rev=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
printf 'rpx %s (repo %s), %s, %s connections, %s: %d requests, %s Ir, %d Ir/request\n' \
  "$RPX_BIN" "$rev" "$PAYLOAD" "$CONNS" "$DURATION" "$requests" "$ir" $((ir / requests))
