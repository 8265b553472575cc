#!/usr/bin/env bash
# Where a proxy's requests cost the load side: scheduler and TCP counts per request.
#
#   bash bench/wakeups.sh [CONNS] [SECONDS] [PROXY ...]      # default: 50 20 rpx haproxy
#
# Each proxy runs alone (CPU 0; the origin and wrk on CPU 1: bench/run.sh's layout) for SECONDS;
# over its middle (SECONDS - 6 s) this prints req/s, busy µs per request of CPU 0 and of CPU 1,
# and per request:
# - each process's CPU (proxy, origin, wrk: utime+stime from /proc, all threads and worker
#   processes) and its voluntary context switches (each a sleep that a wakeup ended: how often
#   the proxy makes its neighbours wake) and involuntary ones;
# - TCP segments on each leg, from the proxy's own sockets (ss -ti: segs and data_segs, in and
#   out): client side (wrk <-> proxy) and origin side (proxy <-> origin), so segments per
#   response and pure ACKs are seen per leg; the upstream connections open, and how many of them
#   carried requests in the window (reuse order);
# - system-wide (perf stat -a, per CPU): context switches and rescheduling interrupts, the wakeups
#   each CPU performed (CPU 0's are the proxy waking wrk and the origin), all syscalls
#   (raw_syscalls; CPU 0's are the proxy's), the socket, polling and connection syscalls
#   (epoll_wait, io_uring_enter, recvfrom, sendto, writev, clock_nanosleep, accept4, epoll_ctl,
#   setsockopt, shutdown, close), and nstat's TCP counters (segments, pure and delayed ACKs).
# These counts move far less from run to run than req/s on a noisy VM, which is what they are
# for: telling why one proxy's requests cost a CPU more than another's.
# Proxies: rpx, nginx, nginx-best, haproxy. Options (environment): ORIGIN (nginx, the default,
# or lean = bench/origin, as bench/run.sh), ORIGIN_BIN, RPX_BIN, RPX_ARGS, URLPATH (default
# /small.txt; /page.html is 16 KB), HEADER (a request header for wrk, e.g. "Connection: close" for
# a new connection per request, as bench/run.sh's close-c200), BASE_PORT (default 19600),
# PROXY_CPU (default 1; 0.5 caps the proxy at half of CPU 0 with a cgroup quota of 5 ms per
# 10 ms, as run.sh's PROXY_CPU).
# Needs perf and nstat (the system-wide counts need the machine otherwise idle). Stops only what
# it starts.
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
ORIGIN=${ORIGIN:-nginx}
ORIGIN_BIN=${ORIGIN_BIN:-$ROOT/bazel-bin/bench/origin}
case $ORIGIN in
  nginx) ;;
  lean) [ -x "$ORIGIN_BIN" ] || { echo "wakeups.sh: $ORIGIN_BIN missing (bazel build //bench:origin)" >&2; exit 2; } ;;
  *) echo "wakeups.sh: ORIGIN must be nginx or lean" >&2; exit 2 ;;
esac
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
# per_process REQUESTS WHO TICKS VOLUNTARY INVOLUNTARY: one line of per-request figures
per_process() {
  awk -v n="$1" -v w="$2" -v t="$TICK_US" -v c="$3" -v v="$4" -v i="$5" 'BEGIN {
    printf "  %-12s CPU %.1f µs/req; context switches per request: voluntary %.3f, involuntary %.3f\n",
           w, c * t / n, v / n, i / n }'
}

if [ "$ORIGIN" = lean ]; then
  taskset -c 1 "$ORIGIN_BIN" "$TMP/www" "$UPSTREAM_PORT" >/dev/null 2>&1 &
else
  write_origin_conf "$TMP/origin" "$UPSTREAM_PORT"
  taskset -c 1 nginx -p "$TMP/origin" -c "$TMP/origin/nginx.conf" -e "$TMP/origin/error.log" \
    >/dev/null 2>&1 &
fi
ORIGIN_PID=$!
PIDS+=("$ORIGIN_PID")
wait_port "$UPSTREAM_PORT" "$ORIGIN_PID" || { echo "wakeups.sh: the origin did not start" >&2; exit 1; }

# proc_counts PID...: "ticks voluntary involuntary" (context switches) summed over the processes,
# their children (nginx workers) and all their threads.
proc_counts() {
  local p t all=()
  for p in "$@"; do all+=("$p"); mapfile -t -O "${#all[@]}" all < <(children_of "$p"); done
  for p in "${all[@]}"; do
    for t in /proc/"$p"/task/*; do
      [ -r "$t/stat" ] || continue
      printf '%s %s\n' "$(cut -d')' -f2- "$t/stat" | awk '{print $12 + $13}')" \
        "$(awk '/^voluntary_ctxt_switches/ {v = $2} /^nonvoluntary_ctxt_switches/ {n = $2} END {print v, n}' "$t/status")"
    done
  done | awk '{t += $1; v += $2; n += $3} END {print t + 0, v + 0, n + 0}'
}
# leg_counts FILTER: the established sockets matching an ss filter, one line each:
# "local peer segs_out segs_in data_segs_out data_segs_in".
leg_counts() {
  ss -tinH state established "$1" 2>/dev/null | awk '
    /^[^ \t]/ { k = $3 " " $4; next }
    { so = si = dso = dsi = 0
      for (i = 1; i <= NF; i++) {
        split($i, kv, ":")
        if (kv[1] == "segs_out") so = kv[2]; else if (kv[1] == "segs_in") si = kv[2]
        else if (kv[1] == "data_segs_out") dso = kv[2]; else if (kv[1] == "data_segs_in") dsi = kv[2]
      }
      print k, so, si, dso, dsi }'
}
# leg_delta BEFORE AFTER REQUESTS LABEL: per request, over the sockets of the second snapshot
# (keep-alive connections; a new one counts from zero), and how many of them moved data.
leg_delta() {
  awk -v n="$3" -v label="$4" '
    NR == FNR { b[$1 " " $2] = $3 " " $4 " " $5 " " $6; next }
    { k = $1 " " $2; split((k in b) ? b[k] : "0 0 0 0", o, " ")
      so += $3 - o[1]; si += $4 - o[2]; dso += $5 - o[3]; dsi += $6 - o[4]; socks++
      if ($5 - o[3] + $6 - o[4] > 0) used++ }
    END { printf "  %-12s %d sockets, %d carried data; per request: data segments out %.3f, in %.3f; pure ACKs out %.3f, in %.3f\n",
                 label, socks, used, dso / n, dsi / n, (so - dso) / n, (si - dsi) / n }' "$1" "$2"
}

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
  read -r pp0 pv0 pn0 < <(proc_counts "$pid"); read -r op0 ov0 on0 < <(proc_counts "$ORIGIN_PID")
  read -r wp0 wv0 wn0 < <(proc_counts "$wrk_pid")
  leg_counts "( sport = :$PORT )" >"$dir/down.0"; leg_counts "( dport = :$UPSTREAM_PORT )" >"$dir/up.0"
  nstat -n
  perf stat -a -A -x, -o "$dir/perf.txt" -e context-switches,irq_vectors:reschedule_entry \
    -e sched:sched_wakeup,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_io_uring_enter \
    -e syscalls:sys_enter_recvfrom,syscalls:sys_enter_sendto,syscalls:sys_enter_writev \
    -e syscalls:sys_enter_clock_nanosleep,raw_syscalls:sys_enter,syscalls:sys_enter_accept4 \
    -e syscalls:sys_enter_epoll_ctl,syscalls:sys_enter_setsockopt,syscalls:sys_enter_shutdown \
    -e syscalls:sys_enter_close -- sleep $((SECS - 6))
  nstat >"$dir/nstat.txt"
  d0=$(( ($(cpu_busy_ticks 0) - c0) * TICK_US )); d1=$(( ($(cpu_busy_ticks 1) - c1) * TICK_US ))
  read -r pp1 pv1 pn1 < <(proc_counts "$pid"); read -r op1 ov1 on1 < <(proc_counts "$ORIGIN_PID")
  read -r wp1 wv1 wn1 < <(proc_counts "$wrk_pid")
  leg_counts "( sport = :$PORT )" >"$dir/down.1"; leg_counts "( dport = :$UPSTREAM_PORT )" >"$dir/up.1"
  wait "$wrk_pid"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  if [ -n "$cg" ]; then sleep 0.5; rmdir "$cg" 2>/dev/null || true; fi
  rps=$(awk '/Requests\/sec/ {print $2}' "$dir/wrk.txt")
  # Requests in the counted window: the requests the proxy received on its keep-alive client
  # sockets (one data segment each: wrk's GET fits in one), exact where wrk's average rate over
  # the whole run is not (it differed by up to 14% from the window's); with a new connection per
  # request, that rate it is.
  reqs=$(awk 'NR == FNR { b[$1 " " $2] = $6; next } { n += $6 - ((($1 " " $2) in b) ? b[$1 " " $2] : 0) }
              END { print n + 0 }' "$dir/down.0" "$dir/down.1")
  if [ -n "$HEADER" ] || [ "$reqs" -le 0 ]; then
    reqs=$(awk -v r="$rps" -v s=$((SECS - 6)) 'BEGIN {print r * s}')
  fi
  capped=""; [ -n "$cg" ] && capped=" (proxy capped at $PROXY_CPU CPU)"
  hdr=""; [ -z "$HEADER" ] || hdr=" ($HEADER)"
  awk -v n="$reqs" -v d0="$d0" -v d1="$d1" -v name="$name" -v r="$rps" -v c="$CONNS" \
    -v p="$URLPATH" -v h="$hdr" -v cap="$capped" -v o="$ORIGIN" 'BEGIN {
    printf "%s, %d connections, %s%s, origin %s: %.0f req/s; busy µs/req: CPU 0 %.1f, CPU 1 %.1f%s\n",
           name, c, p, h, o, r, d0 / n, d1 / n, cap }'
  per_process "$reqs" proxy $((pp1 - pp0)) $((pv1 - pv0)) $((pn1 - pn0))
  per_process "$reqs" origin $((op1 - op0)) $((ov1 - ov0)) $((on1 - on0))
  per_process "$reqs" wrk $((wp1 - wp0)) $((wv1 - wv0)) $((wn1 - wn0))
  per_process "$reqs" "all three" $((pp1 - pp0 + op1 - op0 + wp1 - wp0)) $((pv1 - pv0 + ov1 - ov0 + wv1 - wv0)) \
    $((pn1 - pn0 + on1 - on0 + wn1 - wn0))
  leg_delta "$dir/down.0" "$dir/down.1" "$reqs" "client side"
  leg_delta "$dir/up.0" "$dir/up.1" "$reqs" "origin side"
  awk -F, -v n="$reqs" '$1 ~ /^CPU/ {printf "  %s %-40s %.3f/req\n", $1, $4, $2 / n}' "$dir/perf.txt"
  awk -v n="$reqs" '$1 ~ /^(TcpInSegs|TcpOutSegs|TcpExtTCPPureAcks|TcpExtDelayedACKs)$/ {
    printf "  %-45s %.3f/req\n", $1, $2 / n }' "$dir/nstat.txt"
  sleep 1
done
