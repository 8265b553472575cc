#!/usr/bin/env bash
# Where a proxy's requests cost the load side: scheduler and TCP counts per request.
#
#   bash bench/wakeups.sh [CONNS] [SECONDS] [PROXY ...]      # default: 50 20 rpx haproxy
#
# Each proxy runs alone (CPU 0; origin nginx and wrk on CPU 1: bench/run.sh's layout with
# ORIGIN=nginx) for SECONDS; over its middle (SECONDS - 6 s) this prints req/s, busy µs per request of CPU 0 and of CPU 1,
# and per request: context switches and rescheduling interrupts of each CPU, the wakeups each CPU
# performed (CPU 0's are the proxy waking wrk and the origin), all syscalls (raw_syscalls; CPU 0's
# are the proxy's), the socket, polling and connection syscalls (epoll_wait, io_uring_enter,
# recvfrom, sendto, writev, clock_nanosleep, accept4, epoll_ctl, setsockopt, shutdown, close) and
# TCP segments. These
# counts move far less from run to run than req/s on a noisy VM, which is what they are for:
# telling why one proxy's requests cost a CPU more than another's.
# Proxies: rpx, nginx, nginx-best, haproxy. Options (environment): RPX_BIN, RPX_ARGS, URLPATH
# (default /small.txt; /page.html is 16 KB), HEADER (a request header for wrk, e.g. "Connection:
# close" for a new connection per request, as bench/run.sh's close-c200), BASE_PORT (default 19600), PROXY_CPU (default 1; 0.5
# caps the proxy at half of CPU 0 with a cgroup quota of 5 ms per 10 ms, as run.sh's PROXY_CPU).
# Needs perf and nstat (the counts are system-wide: keep the machine otherwise idle). Stops only
# what it starts.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# shellcheck source=bench/configs.sh
source "$HERE/configs.sh"
CONNS=${1:-50}
SECS=${2:-20}
shift 2 || shift $#
[ $# -gt 0 ] || set -- rpx haproxy
[ "$SECS" -ge 10 ] || { echo "wakeups.sh: SECONDS must be at least 10" >&2; exit 2; }
RPX_BIN=${RPX_BIN:-$ROOT/bazel-bin/source/exe/rpx}
URLPATH=${URLPATH:-/small.txt}
HEADER=${HEADER:-}
WRK_HDR=()
[ -z "$HEADER" ] || WRK_HDR=(-H "$HEADER")
BASE_PORT=${BASE_PORT:-19600}
PROXY_CPU=${PROXY_CPU:-1}
QUOTA_US=$(cpu_quota_us "$PROXY_CPU" 10000)
CG_KIND=""; CG_ROOT=""
if [ "$QUOTA_US" != 0 ]; then
  read -r CG_KIND CG_ROOT < <(cgroup_root) ||
    { echo "wakeups.sh: PROXY_CPU=$PROXY_CPU needs the cgroup cpu controller" >&2; exit 2; }
fi
for t in perf nstat wrk nginx taskset curl; do
  command -v "$t" >/dev/null || { echo "wakeups.sh: $t is not installed" >&2; exit 2; }
done
ulimit -n 20000 2>/dev/null || true
NOFILE=$(ulimit -n); HAPROXY_MAXCONN=$(( (NOFILE - 200) / 2 ))
TMP=$(mktemp -d /tmp/rpx-wakeups.XXXXXX)
chmod 755 "$TMP"
mkdir -p "$TMP/www" "$TMP/origin"
write_payloads "$TMP/www"
chmod 644 "$TMP/www/"*
UPSTREAM_PORT=$BASE_PORT
PORT=$((BASE_PORT + 1))
PIDS=()
CGS=()
cleanup() {
  local p
  for p in "${PIDS[@]+"${PIDS[@]}"}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  for p in "${CGS[@]+"${CGS[@]}"}"; do rmdir "$p" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT
TICK_US=$(( 1000000 / $(getconf CLK_TCK) ))

write_origin_conf "$TMP/origin" "$UPSTREAM_PORT"
taskset -c 1 nginx -p "$TMP/origin" -c "$TMP/origin/nginx.conf" -e "$TMP/origin/error.log" \
  >/dev/null 2>&1 &
PIDS+=($!)
wait_port "$UPSTREAM_PORT" "$!" || { echo "wakeups.sh: the origin did not start" >&2; exit 1; }

for name in "$@"; do
  dir="$TMP/$name"
  mkdir -p "$dir"
  cg=""
  if [ -n "$CG_ROOT" ]; then
    cg="$CG_ROOT/rpx-wakeups.$$.$name"
    cgroup_cap "$CG_KIND" "$cg" "$QUOTA_US" 10000 ||
      { echo "wakeups.sh: cannot create cgroup $cg with a CPU quota" >&2; exit 1; }
    CGS+=("$cg")
  fi
  case $name in
    rpx)
      write_rpx_conf "$dir" "$PORT" $((PORT + 1)) 0
      # shellcheck disable=SC2086
      in_cgroup "$cg" taskset -c 0 "$RPX_BIN" -c "$dir/bootstrap.yaml" --concurrency 1 -l warn \
        ${RPX_ARGS:-} >"$dir/log" 2>&1 & ;;
    nginx|nginx-best)
      ka=64; [ "$name" = nginx-best ] && ka=1024
      write_nginx_proxy_conf "$dir" "$PORT" "$ka"
      in_cgroup "$cg" taskset -c 0 nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" \
        >/dev/null 2>&1 & ;;
    haproxy)
      write_haproxy_conf "$dir" "$PORT"
      in_cgroup "$cg" taskset -c 0 haproxy -db -f "$dir/haproxy.cfg" >"$dir/log" 2>&1 & ;;
    *) echo "wakeups.sh: unknown proxy $name" >&2; exit 2 ;;
  esac
  pid=$!
  PIDS+=("$pid")
  wait_port "$PORT" "$pid" && curl -sf -o /dev/null "http://127.0.0.1:$PORT$URLPATH" ||
    { echo "wakeups.sh: $name does not answer on $PORT"; tail -5 "$dir"/*log* >&2 || true; exit 1; }
  taskset -c 1 wrk -t1 -c "$CONNS" -d "${SECS}s" "${WRK_HDR[@]+"${WRK_HDR[@]}"}" \
    "http://127.0.0.1:$PORT$URLPATH" >"$dir/wrk.txt" 2>&1 &
  wrk_pid=$!
  sleep 3
  c0=$(cpu_busy_ticks 0); c1=$(cpu_busy_ticks 1)
  nstat -n
  perf stat -a -A -x, -o "$dir/perf.txt" -e context-switches,irq_vectors:reschedule_entry \
    -e sched:sched_wakeup,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_io_uring_enter \
    -e syscalls:sys_enter_recvfrom,syscalls:sys_enter_sendto,syscalls:sys_enter_writev \
    -e syscalls:sys_enter_clock_nanosleep,raw_syscalls:sys_enter,syscalls:sys_enter_accept4 \
    -e syscalls:sys_enter_epoll_ctl,syscalls:sys_enter_setsockopt,syscalls:sys_enter_shutdown \
    -e syscalls:sys_enter_close -- sleep $((SECS - 6))
  nstat >"$dir/nstat.txt"
  d0=$(( ($(cpu_busy_ticks 0) - c0) * TICK_US )); d1=$(( ($(cpu_busy_ticks 1) - c1) * TICK_US ))
  wait "$wrk_pid"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  if [ -n "$cg" ]; then sleep 0.5; rmdir "$cg" 2>/dev/null || true; fi
  rps=$(awk '/Requests\/sec/ {print $2}' "$dir/wrk.txt")
  reqs=$(awk -v r="$rps" -v s=$((SECS - 6)) 'BEGIN {print r * s}')  # in the counted window
  capped=""; [ -n "$cg" ] && capped=" (proxy capped at $PROXY_CPU CPU)"
  hdr=""; [ -z "$HEADER" ] || hdr=" ($HEADER)"
  awk -v n="$reqs" -v d0="$d0" -v d1="$d1" -v name="$name" -v r="$rps" -v c="$CONNS" \
    -v p="$URLPATH" -v h="$hdr" -v cap="$capped" 'BEGIN {
    printf "%s, %d connections, %s%s: %.0f req/s; busy µs/req: CPU 0 %.1f, CPU 1 %.1f%s\n",
           name, c, p, h, r, d0 / n, d1 / n, cap }'
  awk -F, -v n="$reqs" '$1 ~ /^CPU/ {printf "  %s %-40s %.3f/req\n", $1, $4, $2 / n}' "$dir/perf.txt"
  awk -v n="$reqs" '$1 ~ /^(TcpInSegs|TcpOutSegs|TcpExtTCPPureAcks|TcpExtDelayedACKs)$/ {
    printf "  %-45s %.3f/req\n", $1, $2 / n }' "$dir/nstat.txt"
  sleep 1
done
