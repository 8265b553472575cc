#!/usr/bin/env bash
# rpx benchmark harness: rpx vs nginx vs HAProxy as HTTP/1.1 reverse proxies on loopback.
#
#   bash bench/run.sh
#
# Options (environment variables):
#   RUNS=3            repetitions of every measurement; the table shows the median
#   DURATION=10s      wrk duration of one measurement (wrk syntax: 10s, 1m)
#   WARMUP=1s         unmeasured wrk run before each measurement (0 = none)
#   ROWS="..."        subset of rows, default: 30B-c50 30B-c200 30B-c400 30B-c1000 16KB-c50 4MiB-c10
#                     close-c200 (30 B, every request on a new connection: Connection: close);
#                     also available: 30B-c1 and 30B-c10 (latency-bound: one or ten clients), and the
#                     TLS rows (the word `tls` in ROWS stands for all of them): tls-full-ecdsa-c50 and
#                     tls-full-rsa-c50 (a new TLS connection per request, full handshakes, with an
#                     ECDSA P-256 / RSA-2048 certificate), tls-resume-c50 (the same, sessions resumed
#                     with tickets), tls-30B-c50 tls-30B-c400 tls-16KB-c50 tls-4MiB-c10 (keep-alive
#                     HTTPS, wrk). Proxies terminate TLS; the origin stays cleartext. `tls12` stands
#                     for tls12-full-ecdsa-c50 and tls12-resume-c50: the handshake rows with the client
#                     offering TLS 1.2 at most, whose resumption skips the key exchange (TLS 1.3's does not)
#   PROXIES="..."     subset of proxies, default: rpx nginx nginx-best haproxy; also available:
#                     rpx-10kvh (10,000 more virtual hosts in the table), rpx-2w (2 workers on both
#                     CPUs, the second shared with wrk and the origin), haproxy-bp (HAProxy with
#                     `busy-polling`: it polls instead of sleeping), rpx-b (a second rpx for A/B
#                     comparisons inside one interleaved run: RPX_B_BIN and RPX_B_ARGS), relay (not a
#                     proxy: bench/tcp_relay, the kernel's floor under any proxy here; RELAY_BIN)
#   DIRECT=1          also run the "direct to origin" baseline (wrk straight to the origin, no proxy)
#                     for the rows in DIRECT_ROWS (0 = skip)
#   DIRECT_ROWS="30B-c50 16KB-c50 4MiB-c10 close-c200"  rows that get it: at 4 MiB it is the
#                     target's yardstick; on the others it is the ceiling that wrk and the origin
#                     sharing CPU 1 put on every proxy in the uncapped layout
#   DIRECT_WRK_CPU=1  CPU for wrk in the direct row (1 = shares the origin's CPU, as in proxied rows;
#                     0 = the CPU the proxy would use, so wrk and origin each get one)
#   RPX_BIN=path      rpx binary (default <repo>/bazel-bin/source/exe/rpx); rpx is skipped if missing
#   RPX_ARGS="..."    extra rpx arguments, appended after "-c FILE --concurrency 1 -l warn"
#   RPX_B_BIN, RPX_B_ARGS  binary and arguments of rpx-b (default: RPX_BIN, RPX_ARGS)
#   ACCESS_LOG=1      rpx and nginx write an access log line per request to a file in the run's
#                     directory, in nginx's `combined` format (rpx: the same fields through Envoy's
#                     command operators), buffered (nginx: buffer=64k flush=1s; rpx: its per-worker
#                     64 KiB buffers and writer thread). HAProxy logs only to syslog: left off.
#                     RPX_B_ACCESS_LOG: rpx-b's (default the same; 0 compares rpx with and without)
#   RPX_REQUEST_ID=1  rpx generates an x-request-id for every request (Envoy's default; nginx and
#                     HAProxy add none here); 0 turns it off. RPX_B_REQUEST_ID: rpx-b's (default the same)
#   RELAY_BIN=path    the relay (default <repo>/bazel-bin/bench/tcp_relay: bazel build //bench:tcp_relay)
#   ORIGIN=lean       the origin behind every proxy: lean = bench/origin (one thread, prebuilt
#                     responses, about a third of nginx's CPU per 30 B response, so CPU 1 caps the
#                     uncapped rows less, as a separate load machine would); nginx = nginx 1.22
#                     serving the same files (the origin of sessions up to 22's figures)
#   ORIGIN_BIN=path   the lean origin (default <repo>/bazel-bin/bench/origin: bazel build //bench:origin)
#   PROXY_CPU=1       CPU time each proxy may use, in CPUs (a cgroup CPU quota; e.g. 0.5 = half of CPU 0).
#                     Below 1, the proxy is the bottleneck instead of wrk + origin on CPU 1, so req/s
#                     compares the proxies per core. Needs root and the cgroup cpu controller.
#   PROXY_CPU_PERIOD_US=10000  the quota's period (shorter = shorter throttled pauses)
#   NGINX_BEST_TUNE=1 nginx-best also sets upstream keepalive_requests 100000 + keepalive_timeout 300s
#                     (nginx's upstream default of 1000 requests per connection causes reconnects)
#   SKIP_INSTALL=1    do not apt-get install missing tools
#   BASE_PORT=18000   first port tried for the origin/proxies/admin (free ports are picked upward)
#   OUT_DIR=bench/results   where latest.md and raw/ go
#   KEEP_TMP=1        keep the temp dir (configs, payloads, proxy logs) after the run
#   OUT_NAME=latest.md  the report's file name in OUT_DIR (default latest.md; when every row is a
#                     TLS row: tls-latest.md, or tls-latest-capped.md with PROXY_CPU below 1)
#   TLS_CLIENT_BIN=path  the handshake rows' client (default <repo>/bazel-bin/bench/tls_handshakes:
#                     bazel build //bench:tls_handshakes)
#   TCP_CC=cubic      run everything (proxies, origin, wrk) in a fresh network namespace whose default
#                     TCP congestion control is this one; the host's setting is left alone. Every
#                     other net.* setting of a new namespace matches the host's (see bench/README.md:
#                     on a host with BBR and no fq qdisc, TCP paces with a timer per burst, which
#                     is dear in a VM and dominates the 4 MiB row). Needs root and unshare(1).
#
# CPU layout (2 cores): proxy under test on CPU 0; the origin and wrk share CPU 1.
# All proxies are started first and measured in turn, row by row (see "run" below).
# Only the processes this script starts are ever signalled, by PID.
set -euo pipefail
export LC_ALL=C

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)

# --- options (remember which were given, for the report header) --------------------------
OPTION_VARS=(RUNS DURATION WARMUP ROWS PROXIES DIRECT DIRECT_ROWS DIRECT_WRK_CPU RPX_BIN RPX_ARGS RPX_B_BIN RPX_B_ARGS RPX_REQUEST_ID RPX_B_REQUEST_ID ACCESS_LOG RPX_B_ACCESS_LOG RELAY_BIN ORIGIN ORIGIN_BIN PROXY_CPU PROXY_CPU_PERIOD_US NGINX_BEST_TUNE SKIP_INSTALL BASE_PORT OUT_DIR OUT_NAME KEEP_TMP TCP_CC TLS_CLIENT_BIN)
GIVEN_ENV=""
for v in "${OPTION_VARS[@]}"; do
  if [ -n "${!v+x}" ]; then
    case "${!v}" in *[!A-Za-z0-9._/:+=-]*|'') GIVEN_ENV+="$v=\"${!v}\" " ;; *) GIVEN_ENV+="$v=${!v} " ;; esac
  fi
done
RUNS=${RUNS:-3}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-1s}
ALL_ROWS="30B-c50 30B-c200 30B-c400 30B-c1000 16KB-c50 4MiB-c10 close-c200"
TLS_ROWS="tls-full-ecdsa-c50 tls-full-rsa-c50 tls-resume-c50 tls-30B-c50 tls-30B-c400 tls-16KB-c50 tls-4MiB-c10"
ROWS=${ROWS:-$ALL_ROWS}
TLS12_ROWS="tls12-full-ecdsa-c50 tls12-resume-c50"
ROWS=$(for r in $ROWS; do case "$r" in tls) echo "$TLS_ROWS" ;; tls12) echo "$TLS12_ROWS" ;; *) echo "$r" ;; esac; done | xargs)
ALL_PROXIES="rpx nginx nginx-best haproxy"
PROXIES=${PROXIES:-$ALL_PROXIES}
DIRECT=${DIRECT:-1}
DIRECT_ROWS=${DIRECT_ROWS:-30B-c50 16KB-c50 4MiB-c10 close-c200}
DIRECT_WRK_CPU=${DIRECT_WRK_CPU:-1}
RPX_BIN=${RPX_BIN:-$ROOT/bazel-bin/source/exe/rpx}
RPX_ARGS=${RPX_ARGS:-}
RPX_B_BIN=${RPX_B_BIN:-$RPX_BIN}
RPX_B_ARGS=${RPX_B_ARGS:-$RPX_ARGS}
RPX_REQUEST_ID=${RPX_REQUEST_ID:-1}
RPX_B_REQUEST_ID=${RPX_B_REQUEST_ID:-$RPX_REQUEST_ID}
ACCESS_LOG=${ACCESS_LOG:-0}
RPX_B_ACCESS_LOG=${RPX_B_ACCESS_LOG:-$ACCESS_LOG}
RELAY_BIN=${RELAY_BIN:-$ROOT/bazel-bin/bench/tcp_relay}
ORIGIN=${ORIGIN:-lean}
ORIGIN_BIN=${ORIGIN_BIN:-$ROOT/bazel-bin/bench/origin}
PROXY_CPU=${PROXY_CPU:-1}
PROXY_CPU_PERIOD_US=${PROXY_CPU_PERIOD_US:-10000}
NGINX_BEST_TUNE=${NGINX_BEST_TUNE:-0}
SKIP_INSTALL=${SKIP_INSTALL:-0}
BASE_PORT=${BASE_PORT:-18000}
OUT_DIR=${OUT_DIR:-$HERE/results}
KEEP_TMP=${KEEP_TMP:-0}
TLS_CLIENT_BIN=${TLS_CLIENT_BIN:-$ROOT/bazel-bin/bench/tls_handshakes}

# TCP_CC: start again inside a new network namespace (only loopback, which is all the bench uses)
# with that congestion control as the default; the namespace ends with the script.
if [ -n "${TCP_CC:-}" ] && [ -z "${RPX_BENCH_IN_NETNS:-}" ]; then
  [ "$(id -u)" = 0 ] || { echo "TCP_CC needs root (unshare --net)" >&2; exit 1; }
  case " $(cat /proc/sys/net/ipv4/tcp_available_congestion_control) " in
    *" $TCP_CC "*) ;;
    *) echo "TCP_CC=$TCP_CC is not available here (net.ipv4.tcp_available_congestion_control:" \
         "$(cat /proc/sys/net/ipv4/tcp_available_congestion_control))" >&2; exit 1 ;;
  esac
  RPX_BENCH_HOST_CC=$(cat /proc/sys/net/ipv4/tcp_congestion_control)
  export RPX_BENCH_IN_NETNS=1 RPX_BENCH_HOST_CC TCP_CC
  exec unshare --net -- bash -c 'ip link set lo up &&
    echo "$TCP_CC" >/proc/sys/net/ipv4/tcp_congestion_control && exec bash "$0" "$@"' "$0" "$@"
fi

declare -A ROW_PATH=([30B-c1]=/small.txt [30B-c10]=/small.txt [30B-c50]=/small.txt [30B-c200]=/small.txt [30B-c400]=/small.txt [30B-c1000]=/small.txt
                     [16KB-c50]=/page.html [4MiB-c10]=/big.bin [close-c200]=/small.txt
                     [tls-full-ecdsa-c50]=/small.txt [tls-full-rsa-c50]=/small.txt [tls-resume-c50]=/small.txt
                     [tls-30B-c50]=/small.txt [tls-30B-c400]=/small.txt [tls-16KB-c50]=/page.html [tls-4MiB-c10]=/big.bin
                     [tls12-full-ecdsa-c50]=/small.txt [tls12-resume-c50]=/small.txt)
declare -A ROW_CONNS=([30B-c1]=1 [30B-c10]=10 [30B-c50]=50 [30B-c200]=200 [30B-c400]=400 [30B-c1000]=1000 [16KB-c50]=50 [4MiB-c10]=10
                      [close-c200]=200
                      [tls-full-ecdsa-c50]=50 [tls-full-rsa-c50]=50 [tls-resume-c50]=50
                      [tls-30B-c50]=50 [tls-30B-c400]=400 [tls-16KB-c50]=50 [tls-4MiB-c10]=10
                      [tls12-full-ecdsa-c50]=50 [tls12-resume-c50]=50)
# Extra request header of a row (wrk -H).
declare -A ROW_HDR=([close-c200]="Connection: close")
# TLS rows: the proxy's TLS listener they use (ec: ECDSA P-256 certificate, rsa: RSA-2048), and
# the handshake rows' client (bench/tls_handshakes, a new connection per request: full = no
# session offered, resume = each client offers the ticket of its previous connection; full12 and
# resume12 the same offering TLS 1.2 at most); the other TLS rows are wrk over https (keep-alive:
# one handshake per connection, at the start).
declare -A ROW_TLS=([tls-full-ecdsa-c50]=ec [tls-full-rsa-c50]=rsa [tls-resume-c50]=ec
                    [tls-30B-c50]=ec [tls-30B-c400]=ec [tls-16KB-c50]=ec [tls-4MiB-c10]=ec
                    [tls12-full-ecdsa-c50]=ec [tls12-resume-c50]=ec)
declare -A ROW_CLIENT=([tls-full-ecdsa-c50]=full [tls-full-rsa-c50]=full [tls-resume-c50]=resume
                       [tls12-full-ecdsa-c50]=full12 [tls12-resume-c50]=resume12)

log() { echo "[bench $(date +%H:%M:%S)] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
# shellcheck source=bench/configs.sh
source "$HERE/configs.sh"  # payloads, config writers, wait_port, cpu_busy_ticks, cgroup helpers

for r in $ROWS; do [ -n "${ROW_PATH[$r]+x}" ] || die "unknown row '$r' (known: 30B-c1 30B-c10 $ALL_ROWS; tls = $TLS_ROWS; tls12 = $TLS12_ROWS)"; done
for r in $DIRECT_ROWS; do [ -z "${ROW_TLS[$r]:-}" ] || die "DIRECT_ROWS: $r is a TLS row (the origin speaks cleartext only)"; done
TLS=0; ALL_TLS=1  # any TLS row / only TLS rows
for r in $ROWS; do if [ -n "${ROW_TLS[$r]:-}" ]; then TLS=1; else ALL_TLS=0; fi; done
HS=0  # any handshake row (bench/tls_handshakes)
for r in $ROWS; do if [ -n "${ROW_CLIENT[$r]:-}" ]; then HS=1; fi; done
KNOWN_PROXIES="$ALL_PROXIES rpx-10kvh rpx-2w rpx-b haproxy-bp relay"
for p in $PROXIES; do case " $KNOWN_PROXIES " in *" $p "*) ;; *) die "unknown proxy '$p' (known: $KNOWN_PROXIES)";; esac; done
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive integer"
case "$ORIGIN" in
  lean)
    if [ ! -x "$ORIGIN_BIN" ] && [ "$ORIGIN_BIN" = "$ROOT/bazel-bin/bench/origin" ] && command -v bazel >/dev/null; then
      log "building the lean origin: bazel build //bench:origin"
      (cd "$ROOT" && bazel build //bench:origin >&2) || die "bazel build //bench:origin failed"
    fi
    [ -x "$ORIGIN_BIN" ] || die "ORIGIN=lean needs $ORIGIN_BIN (bazel build //bench:origin, or set ORIGIN_BIN; ORIGIN=nginx uses nginx instead)" ;;
  nginx) ;;
  *) die "ORIGIN must be lean or nginx (got '$ORIGIN')" ;;
esac
if [ "$HS" = 1 ]; then
  if [ ! -x "$TLS_CLIENT_BIN" ] && [ "$TLS_CLIENT_BIN" = "$ROOT/bazel-bin/bench/tls_handshakes" ] && command -v bazel >/dev/null; then
    log "building the handshake client: bazel build //bench:tls_handshakes"
    (cd "$ROOT" && bazel build //bench:tls_handshakes >&2) || die "bazel build //bench:tls_handshakes failed"
  fi
  [ -x "$TLS_CLIENT_BIN" ] || die "the handshake rows need $TLS_CLIENT_BIN (bazel build //bench:tls_handshakes, or set TLS_CLIENT_BIN)"
fi
# A sanitizer build would measure the sanitizer: .ci/run leaves bazel-bin holding the ASan build.
for b in "$RPX_BIN" "$([ "$ORIGIN" = lean ] && echo "$ORIGIN_BIN")"; do
  if [ -n "$b" ] && [ -f "$b" ] && grep -q __asan_init "$b"; then
    die "$b is built with AddressSanitizer (bazel-bin after .ci/run holds the ASan build): bazel build //source/exe:rpx //bench:origin"
  fi
done
[[ "$PROXY_CPU" =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)$ ]] || die "PROXY_CPU must be a number of CPUs, e.g. 0.5 (got '$PROXY_CPU')"
[[ "$PROXY_CPU_PERIOD_US" =~ ^[0-9]+$ ]] && [ "$PROXY_CPU_PERIOD_US" -ge 1000 ] && [ "$PROXY_CPU_PERIOD_US" -le 1000000 ] ||
  die "PROXY_CPU_PERIOD_US must be 1000..1000000 (got '$PROXY_CPU_PERIOD_US')"
# quota per period in µs; 0 = no cap (PROXY_CPU of 1 or more: the proxy has CPU 0 to itself anyway)
PROXY_QUOTA_US=$(cpu_quota_us "$PROXY_CPU" "$PROXY_CPU_PERIOD_US")
if [ "$PROXY_QUOTA_US" != 0 ] && [ "$PROXY_QUOTA_US" -lt 1000 ]; then
  die "PROXY_CPU=$PROXY_CPU x PROXY_CPU_PERIOD_US=$PROXY_CPU_PERIOD_US is under the kernel's 1 ms minimum quota"
fi
if [ -z "${OUT_NAME:-}" ]; then
  OUT_NAME=latest.md
  if [ "$ALL_TLS" = 1 ]; then OUT_NAME=tls-latest$([ "$PROXY_QUOTA_US" = 0 ] || echo -capped).md; fi
fi
[[ "$OUT_NAME" =~ ^[A-Za-z0-9._-]+$ ]] || die "OUT_NAME must be a plain file name (got '$OUT_NAME')"

# "10s" / "1m" / "500ms" / "7" -> whole seconds, rounded up (only used for timeouts)
to_secs() {
  local d=$1
  case "$d" in
    *ms) echo $(( (${d%ms} + 999) / 1000 )) ;;
    *s) echo "${d%s}" ;;
    *m) echo $(( ${d%m} * 60 )) ;;
    *h) echo $(( ${d%h} * 3600 )) ;;
    *) echo "$d" ;;
  esac
}
DURATION_S=$(to_secs "$DURATION")
[[ "$DURATION_S" =~ ^[0-9]+$ ]] && [ "$DURATION_S" -gt 0 ] || die "bad DURATION '$DURATION'"
WARMUP_S=$(to_secs "$WARMUP")

# --- tools ----------------------------------------------------------------------------------
missing_tools() {
  local t m=""
  for t in nginx haproxy wrk taskset ss curl pgrep openssl; do
    command -v "$t" >/dev/null 2>&1 || [ -x "/usr/sbin/$t" ] || m+=" $t"
  done
  echo "$m"
}
export PATH="$PATH:/usr/sbin:/sbin"
if [ -n "$(missing_tools)" ]; then
  if [ "$SKIP_INSTALL" = 1 ]; then die "missing tools:$(missing_tools) (and SKIP_INSTALL=1)"; fi
  log "installing missing tools:$(missing_tools)"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  timeout 900 $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
      nginx-light haproxy wrk util-linux iproute2 curl procps openssl >/dev/null ||
    { timeout 600 $SUDO apt-get -o DPkg::Lock::Timeout=300 update -qq &&
      timeout 900 $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
        nginx-light haproxy wrk util-linux iproute2 curl procps openssl >/dev/null; } ||
    die "apt-get install failed"
  [ -z "$(missing_tools)" ] || die "still missing after install:$(missing_tools)"
fi
[ "$(nproc)" -ge 2 ] || log "WARNING: fewer than 2 CPUs; taskset -c 1 will fail"

# --- limits ---------------------------------------------------------------------------------
HARD_NOFILE=$(ulimit -Hn)
if [ "$HARD_NOFILE" = unlimited ] || [ "$HARD_NOFILE" -ge 20000 ]; then ulimit -n 20000; NOFILE=20000
else ulimit -n "$HARD_NOFILE"; NOFILE=$HARD_NOFILE; fi
# HAProxy needs ~2 fds per proxied connection and refuses to start if maxconn does not fit.
HAPROXY_MAXCONN=$(( (NOFILE - 200) / 2 )); [ "$HAPROXY_MAXCONN" -le 20000 ] || HAPROXY_MAXCONN=20000
CLK_TCK=$(getconf CLK_TCK)

# --- bookkeeping: every PID we start, cleaned up on exit --------------------------------------
STARTED_PIDS=()
CG_DIRS=()
TMP=""
cleanup() {
  local rc=$? pid kids d
  trap - EXIT INT TERM
  for pid in "${STARTED_PIDS[@]}"; do stop_pid "$pid" quiet; done
  for d in "${CG_DIRS[@]}"; do rmdir "$d" 2>/dev/null || log "could not remove cgroup $d"; done
  if [ -n "$TMP" ] && [ -d "$TMP" ]; then
    if [ "$KEEP_TMP" = 1 ]; then log "kept temp dir $TMP"; else rm -rf "$TMP"; fi
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Stop a process we started, then any children it left behind; bounded to ~10 s.
stop_pid() {
  local pid=$1 quiet=${2:-} kids i
  [ -n "$pid" ] || return 0
  kill -0 "$pid" 2>/dev/null || { forget_pid "$pid"; return 0; }
  kids=$(children_of "$pid")
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    [ -n "$quiet" ] || log "PID $pid did not exit on TERM; sending KILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
  for k in $kids; do
    for i in $(seq 1 30); do kill -0 "$k" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$k" 2>/dev/null && kill -KILL "$k" 2>/dev/null || true
  done
  forget_pid "$pid"
}
forget_pid() {
  local p keep=()
  for p in "${STARTED_PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
  STARTED_PIDS=("${keep[@]+"${keep[@]}"}")
}

# --- optional CPU cap (PROXY_CPU): one cgroup per proxy, same quota for each -----------------------
CG_ROOT=""; CG_KIND=""
if [ "$PROXY_QUOTA_US" != 0 ]; then
  read -r CG_KIND CG_ROOT < <(cgroup_root) ||
    die "PROXY_CPU=$PROXY_CPU needs the cgroup cpu controller (found neither /sys/fs/cgroup/cpu/cpu.cfs_quota_us nor cpu in /sys/fs/cgroup/cgroup.controllers)"
  [ -w "$CG_ROOT" ] || die "PROXY_CPU=$PROXY_CPU needs write access to $CG_ROOT (run as root)"
fi
make_cgroup() {  # make_cgroup NAME VAR: a cgroup capped at PROXY_CPU for proxy NAME; VAR = its dir ("" = no cap)
  local d=""
  if [ -n "$CG_ROOT" ]; then
    d="$CG_ROOT/rpx-bench.$$.$1"
    cgroup_cap "$CG_KIND" "$d" "$PROXY_QUOTA_US" "$PROXY_CPU_PERIOD_US" ||
      die "cannot create cgroup $d with a CPU quota"
    CG_DIRS+=("$d")
  fi
  printf -v "$2" '%s' "$d"
}
# "periods throttled" of a cgroup so far ("0 0" without one): the share of quota periods in which
# the proxy ran out of CPU shows that the cap, not CPU 1, was the limit.
cg_throttle() {
  if [ -n "$1" ]; then awk '$1 == "nr_periods" {p = $2} $1 == "nr_throttled" {t = $2} END {print p + 0, t + 0}' "$1/cpu.stat"
  else echo "0 0"; fi
}

port_free() { [ -z "$(ss -Htln "sport = :$1" 2>/dev/null)" ]; }
NEXT_PORT=$BASE_PORT
pick_port() {  # pick_port VAR: next free port >= NEXT_PORT (never the same one twice in a run)
  while ! port_free "$NEXT_PORT"; do NEXT_PORT=$((NEXT_PORT + 1)); done
  printf -v "$1" '%s' "$NEXT_PORT"; NEXT_PORT=$((NEXT_PORT + 1))
}

# --- temp dir, payloads ----------------------------------------------------------------------
TMP=$(mktemp -d /tmp/rpx-bench.XXXXXX)
chmod 755 "$TMP"   # nginx workers may run as an unprivileged user when started as root
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RAW="$OUT_DIR/raw/$STAMP"
mkdir -p "$RAW" "$TMP/www"
RESULTS_TSV="$RAW/results.tsv"
printf 'proxy\trow\trun\treq_s\tp99_ms\trequests\tnon2xx\tsock_err\ttw_upstream\ttw_total\trss_kib\tcpu_us_per_req\torigin_cpu_us_per_req\ttransfer_per_s\tother_cpu_pct\tproxy_cpu_pct\tcpu1_us_per_req\tthrottled_pct\ttls_resumed_pct\tload_cpu_us_per_req\tmachine_cpu_us_per_req\n' >"$RESULTS_TSV"

write_payloads "$TMP/www"
chmod 644 "$TMP/www/"*
SIZE_SMALL=$(stat -c %s "$TMP/www/small.txt"); SIZE_PAGE=$(stat -c %s "$TMP/www/page.html"); SIZE_BIG=$(stat -c %s "$TMP/www/big.bin")
log "payloads: small.txt=${SIZE_SMALL}B page.html=${SIZE_PAGE}B big.bin=${SIZE_BIG}B in $TMP/www"
TLS_DIR=""
if [ "$TLS" = 1 ]; then
  TLS_DIR="$TMP/tls"
  mkdir -p "$TLS_DIR"; chmod 755 "$TLS_DIR"
  write_tls_certs "$TLS_DIR" || die "openssl could not make the throwaway certificates"
  log "TLS: throwaway ECDSA P-256 and RSA-2048 certificates for localhost in $TLS_DIR"
fi

# --- process groups and /proc sampling ------------------------------------------------------------
# PIDs of a proxy: the process we started plus its direct children (nginx workers).
group_pids() { echo "$1"; children_of "$1"; }

cpu_ticks() {  # sum of utime+stime over the group
  local total=0 p s
  for p in $(group_pids "$1"); do
    s=$(cat "/proc/$p/stat" 2>/dev/null) || continue
    s=${s##*) }   # drop "pid (comm) "; fields now start at field 3 (state)
    total=$(( total + $(awk '{print $12 + $13}' <<<"$s") ))
  done
  echo "$total"
}
rss_kib() {  # sum of VmRSS over the group
  local total=0 p v
  for p in $(group_pids "$1"); do
    v=$(awk '/^VmRSS:/{print $2}' "/proc/$p/status" 2>/dev/null) || continue
    total=$(( total + ${v:-0} ))
  done
  echo "$total"
}

# Busy ticks (cpu_busy_ticks, configs.sh) are read for the whole machine and for CPU 1 alone, where
# wrk and the origin run: what a proxy costs the load side per request (its wakeups, the kernel
# work its sockets cause there) decides req/s when CPU 1 is full.
# CPU ticks of this script's reaped children (wrk, ss, awk...), from the "times" builtin, which
# must run in this shell (not in a $(...) subshell): children_ticks VAR sets VAR.
children_ticks() {
  times >"$TMP/times"
  printf -v "$1" '%s' "$(awk -v t="$CLK_TCK" 'NR == 2 {
    s = 0
    for (i = 1; i <= 2; i++) { v = $i; m = v; sub(/m.*/, "", m); sub(/^[0-9]+m/, "", v); sub(/s$/, "", v); s += m * 60 + v }
    printf "%d\n", s * t + 0.5 }' "$TMP/times")"
}

# TIME_WAIT sockets as "local peer remaining-ms" lines (ss -o prints "timer:(timewait,47sec,0)")
tw_snapshot() {
  ss -tanoH state time-wait 2>/dev/null | awk '{
    t = ""; for (i = 1; i <= NF; i++) if ($i ~ /^timer:\(timewait,/) t = $i
    sub(/^timer:\(timewait,/, "", t); sub(/,.*/, "", t)
    ms = 0
    if (match(t, /[0-9]+min/)) ms += substr(t, RSTART, RLENGTH - 3) * 60000
    if (match(t, /[0-9]+sec/)) ms += substr(t, RSTART, RLENGTH - 3) * 1000
    if (match(t, /[0-9]+\./))  ms += substr(t, RSTART, RLENGTH - 1) * 1000   # "9.464ms" = 9 s 464 ms
    if (match(t, /[0-9]+ms/))  ms += substr(t, RSTART, RLENGTH - 2)
    print $3, $4, ms
  }'
}
# Sockets that entered TIME_WAIT between two snapshots taken $3 ms apart: tuples not there
# before, plus tuples that were there before but whose timer is later than the old socket's
# could be (the 4-tuple was reused under tcp_tw_reuse and closed again; ss truncates to
# whole seconds above 9 s, hence the 1 s + 200 ms slack).
# Prints "total upstream", upstream = local or peer port is the origin's.
tw_new() {  # $1 before $2 after $3 elapsed-ms $4 proxy port $5 its origin port
  # Only the sockets of the proxy under test: the idle proxies close idle upstream connections
  # (nginx after 60 s) during other proxies' runs, and each proxy has its own origin port.
  awk -v pp="$4" -v op="$5" -v el="$3" '
    function port(a) { sub(/.*:/, "", a); return a }
    NR == FNR { before[$1 " " $2] = $3; next }
    { k = $1 " " $2
      a = port($1); b = port($2)
      if (a != pp && b != pp && a != op && b != op) next
      if (!(k in before) || $3 > before[k] - el + 1200) { total++; if (a == op || b == op) up++ } }
    END { print total + 0, up + 0 }' "$1" "$2"
}
# After wrk exits, let in-flight closes (FIN-WAIT/LAST-ACK on the ports under test) finish so that
# every connection closed by the run is in TIME_WAIT when counted; bounded to 3 s.
settle_closes() {  # $1 port $2 origin port
  local i
  for i in $(seq 1 30); do
    [ -z "$(ss -tanH state fin-wait-1 state fin-wait-2 state last-ack state closing \
            "( sport = :$1 or dport = :$1 or sport = :$2 or dport = :$2 )" 2>/dev/null)" ] && return 0
    sleep 0.1
  done
}

# --- is the machine quiet? ---------------------------------------------------------------------
# Other work (a compiler, a build server) skews every number: sample 1 s and say so in the report.
b0=$(cpu_busy_ticks); sleep 1; b1=$(cpu_busy_ticks)
BUSY_START=$(( (b1 - b0) * 100 / CLK_TCK ))
BUSY_NOTE=""
if [ "$BUSY_START" -gt 10 ]; then
  TOP_CPU=$(top -b -n 2 -d 0.5 -w 200 2>/dev/null | awk '/^top -/{n++} n == 2 && /^ *[0-9]+ / && $9 + 0 > 1 {printf "%s%s %s%%", (c++ ? ", " : ""), $12, $9}' | cut -c1-120)
  BUSY_NOTE=" — WARNING: machine busy before the run (${TOP_CPU:-unknown processes}); numbers are noisy"
  log "WARNING: ${BUSY_START}% of a CPU busy before the run (${TOP_CPU:-?}); results will be noisy"
fi

# --- origin ---------------------------------------------------------------------------------------
# The origin listens on one port per proxy (and one for the direct baseline), so that upstream
# TIME_WAIT sockets can be told apart by proxy.
declare -A ORIGIN_PORTS
for p in direct $PROXIES; do pick_port "ORIGIN_PORTS[$p]"; done
ORIGIN_PORT=${ORIGIN_PORTS[direct]}
mkdir -p "$TMP/origin"
if [ "$ORIGIN" = lean ]; then
  # shellcheck disable=SC2086  # one argument per port
  taskset -c 1 "$ORIGIN_BIN" "$TMP/www" ${ORIGIN_PORTS[*]} >"$TMP/origin/stdout.log" 2>"$TMP/origin/error.log" &
else
  write_origin_conf "$TMP/origin" "${ORIGIN_PORTS[*]}"
  nginx -t -q -p "$TMP/origin" -c "$TMP/origin/nginx.conf" -e "$TMP/origin/error.log" ||
    die "origin nginx config invalid: $TMP/origin/nginx.conf"
  taskset -c 1 nginx -p "$TMP/origin" -c "$TMP/origin/nginx.conf" -e "$TMP/origin/error.log" \
    >"$TMP/origin/stdout.log" 2>&1 &
fi
ORIGIN_PID=$!
STARTED_PIDS+=("$ORIGIN_PID")
for p in "${ORIGIN_PORTS[@]}"; do
  wait_port "$p" "$ORIGIN_PID" 15 || { cat "$TMP/origin/error.log" >&2 || true; die "origin ($ORIGIN) did not listen on $p"; }
done
for f in small.txt page.html; do
  got=$(curl -s --max-time 5 "http://127.0.0.1:$ORIGIN_PORT/$f") || die "origin GET /$f failed"
  [ "$got" = "$(cat "$TMP/www/$f")" ] || die "origin returned unexpected body for /$f"
done
log "origin ($ORIGIN) PID $ORIGIN_PID on 127.0.0.1 ports ${ORIGIN_PORTS[*]} (one per proxy; CPU 1)"

# --- proxies ---------------------------------------------------------------------------------------
PROXY_PID=""; PROXY_PORT=""
declare -A PROXY_CG  # proxy name -> its capped cgroup dir ("" when PROXY_CPU=1)
start_proxy() {  # $1 name; sets PROXY_PID, PROXY_PORT (and TLS_PORT, TLS_RSA_PORT); returns 1 if it cannot be started
  local name=$1 dir="$TMP/$1" admin cg
  UPSTREAM_PORT=${ORIGIN_PORTS[$name]}  # read by the config writers
  mkdir -p "$dir"
  make_cgroup "$name" cg
  PROXY_CG[$name]=$cg
  pick_port PROXY_PORT
  # TLS listeners (read by the config writers), besides the cleartext one: with TLS rows, for
  # every proxy but the relay, which speaks no TLS.
  TLS_PORT=""; TLS_RSA_PORT=""
  if [ "$TLS" = 1 ] && [ "$name" != relay ]; then pick_port TLS_PORT; pick_port TLS_RSA_PORT; fi
  case "$name" in
    rpx|rpx-10kvh|rpx-2w|rpx-b)
      local bin=$RPX_BIN args=$RPX_ARGS
      local request_id=$RPX_REQUEST_ID access_log=$ACCESS_LOG
      if [ "$name" = rpx-b ]; then
        bin=$RPX_B_BIN; args=$RPX_B_ARGS; request_id=$RPX_B_REQUEST_ID; access_log=$RPX_B_ACCESS_LOG
      fi
      if [ ! -x "$bin" ]; then
        log "SKIP $name: $bin is not an executable file (build rpx first, or set RPX_BIN/RPX_B_BIN)"
        return 1
      fi
      pick_port admin
      local vhosts=0 workers=1 cpus=0
      if [ "$name" = rpx-10kvh ]; then vhosts=10000; fi  # 10,000 other virtual hosts in the table
      if [ "$name" = rpx-2w ]; then workers=2; cpus=0,1; fi  # the second shares wrk's CPU
      RPX_REQUEST_ID=$request_id RPX_ACCESS_LOG=$access_log write_rpx_conf "$dir" "$PROXY_PORT" "$admin" "$vhosts"
      # shellcheck disable=SC2086
      in_cgroup "$cg" taskset -c "$cpus" "$bin" -c "$dir/bootstrap.yaml" --concurrency "$workers" -l warn $args \
        >"$dir/stdout.log" 2>&1 &
      ;;
    nginx|nginx-best)
      local ka=64 tune=0
      if [ "$name" = nginx-best ]; then ka=1024; tune=$NGINX_BEST_TUNE; fi
      write_nginx_proxy_conf "$dir" "$PROXY_PORT" "$ka" "$tune"
      nginx -t -q -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" 2>"$dir/configtest.log" ||
        { cat "$dir/configtest.log" >&2; log "SKIP $name: config invalid"; return 1; }
      in_cgroup "$cg" taskset -c 0 nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" >"$dir/stdout.log" 2>&1 &
      ;;
    haproxy|haproxy-bp)
      local hbp=0
      if [ "$name" = haproxy-bp ]; then hbp=1; fi
      write_haproxy_conf "$dir" "$PROXY_PORT" "$hbp"
      haproxy -c -q -f "$dir/haproxy.cfg" >"$dir/configtest.log" 2>&1 ||
        { cat "$dir/configtest.log" >&2; log "SKIP haproxy: config invalid"; return 1; }
      in_cgroup "$cg" taskset -c 0 haproxy -db -f "$dir/haproxy.cfg" >"$dir/stdout.log" 2>&1 &
      ;;
    relay)  # one upstream connection per client connection, no HTTP: see bench/tcp_relay.cc
      if [ ! -x "$RELAY_BIN" ]; then
        log "SKIP relay: $RELAY_BIN is not an executable file (bazel build //bench:tcp_relay, or set RELAY_BIN)"
        return 1
      fi
      in_cgroup "$cg" taskset -c 0 "$RELAY_BIN" "$PROXY_PORT" "$UPSTREAM_PORT" >"$dir/stdout.log" 2>&1 &
      ;;
  esac
  PROXY_PID=$!
  STARTED_PIDS+=("$PROXY_PID")
  if ! wait_port "$PROXY_PORT" "$PROXY_PID" 20; then
    log "SKIP $name: did not listen on 127.0.0.1:$PROXY_PORT; its output:"
    tail -n 30 "$dir/stdout.log" "$dir/error.log" 2>/dev/null >&2 || true
    stop_pid "$PROXY_PID"; return 1
  fi
  # Sanity: the proxy must return the origin's bytes, small and big.
  local body size
  body=$(curl -s --max-time 5 "http://127.0.0.1:$PROXY_PORT/small.txt" || true)
  size=$(curl -s --max-time 20 -o /dev/null -w '%{size_download}:%{http_code}' "http://127.0.0.1:$PROXY_PORT/big.bin" || true)
  if [ "$body" != "$(cat "$TMP/www/small.txt")" ] || [ "$size" != "$SIZE_BIG:200" ]; then
    log "SKIP $name: sanity GET through the proxy failed (small body '${body:0:60}', big '$size')"
    stop_pid "$PROXY_PID"; return 1
  fi
  if [ -n "$TLS_PORT" ]; then
    tls_sanity "$name" "$dir" || { stop_pid "$PROXY_PID"; return 1; }
  fi
  log "$name PID $PROXY_PID on 127.0.0.1:$PROXY_PORT${TLS_PORT:+, TLS on $TLS_PORT (ECDSA) and $TLS_RSA_PORT (RSA)} (CPU 0${cg:+, capped at $PROXY_CPU CPU in $cg})"
}
# The TLS listeners must return the origin's bytes too, each with its own certificate; what they
# negotiate with a default OpenSSL client (openssl s_client, as wrk and bench/tls_handshakes offer
# the same) goes into the report's header, so that a row never compares different ciphers.
declare -A PROXY_TLS_INFO
tls_sanity() {  # $1 name $2 dir
  local name=$1 dir=$2 body size k port info
  body=$(curl -sk --max-time 5 "https://127.0.0.1:$TLS_PORT/small.txt" || true)
  size=$(curl -sk --max-time 20 -o /dev/null -w '%{size_download}:%{http_code}' "https://127.0.0.1:$TLS_PORT/big.bin" || true)
  if [ "$body" != "$(cat "$TMP/www/small.txt")" ] || [ "$size" != "$SIZE_BIG:200" ]; then
    log "SKIP $name: sanity GET over TLS failed (small body '${body:0:60}', big '$size')"; return 1
  fi
  PROXY_TLS_INFO[$name]=""
  for k in ec rsa; do
    port=$TLS_PORT; if [ "$k" = rsa ]; then port=$TLS_RSA_PORT; fi
    printf 'GET /small.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n' |
      timeout 10 openssl s_client -connect "127.0.0.1:$port" -servername localhost -alpn http/1.1 \
        -ign_eof >"$dir/s_client.$k.txt" 2>&1 || true
    grep -q "^$(cat "$TMP/www/small.txt")\$" "$dir/s_client.$k.txt" ||
      { log "SKIP $name: openssl s_client got no response from the $k listener ($dir/s_client.$k.txt)"; return 1; }
    info=$(awk -F': ' '/^New, /{split($0, a, ", "); v = a[2]} /^Server Temp Key/{g = $2} /^Peer signature type/{t = $2}
                       /^ALPN protocol/{p = $2} /Cipher is/{sub(/.*Cipher is /, ""); c = $0}
                       END {sub(/, .*/, "", g); printf "%s %s, %s, %s signature, ALPN %s", v, c, g, t, p}' "$dir/s_client.$k.txt")
    PROXY_TLS_INFO[$name]+="${PROXY_TLS_INFO[$name]:+; }$k: $info"
  done
  log "$name TLS: ${PROXY_TLS_INFO[$name]}"
}

WRK_CPU=1
# $1 conns $2 duration $3 url $4 outfile [$5 header [$6 client: wrk (default), or full / resume:
# bench/tls_handshakes, a new TLS connection per request]]; on CPU $WRK_CPU, bounded in time
run_wrk() {
  local secs; secs=$(to_secs "$2")
  local cmd=(wrk -t1 -c "$1" -d "$2" --timeout 10s --latency)
  if [ -n "${5:-}" ]; then cmd+=(-H "$5"); fi
  case "${6:-wrk}" in
    full*|resume*) cmd=("$TLS_CLIENT_BIN" -c "$1" -d "$2" --timeout 10) ;;
  esac
  case "${6:-wrk}" in resume*) cmd+=(--resume) ;; esac
  case "${6:-wrk}" in *12) cmd+=(--tls12) ;; esac
  # In the background + wait, so that a signal to this script runs the cleanup trap at once.
  taskset -c "$WRK_CPU" timeout -k 5 $(( secs + 60 )) "${cmd[@]}" "$3" >"$4" 2>&1 &
  local pid=$!
  STARTED_PIDS+=("$pid")
  wait "$pid" || true
  forget_pid "$pid"
}

# parse a wrk --latency output file (or bench/tls_handshakes', which prints the same lines) -> "req_s p99_ms requests non2xx sock_err transfer"
parse_wrk() {
  awk '
    function ms(v) {
      if (v ~ /us$/) return substr(v, 1, length(v) - 2) / 1000
      if (v ~ /ms$/) return substr(v, 1, length(v) - 2) + 0
      if (v ~ /s$/)  return substr(v, 1, length(v) - 1) * 1000
      if (v ~ /m$/)  return substr(v, 1, length(v) - 1) * 60000
      if (v ~ /h$/)  return substr(v, 1, length(v) - 1) * 3600000
      return "NA"
    }
    BEGIN { rps = "NA"; p99 = "NA"; req = "NA"; non2xx = 0; sock = 0; xfer = "NA" }
    / requests in / { req = $1 }
    /^Requests\/sec:/ { rps = $2 }
    /^Transfer\/sec:/ { xfer = $2 }
    /^[ \t]+99%[ \t]/ { p99 = ms($2) }
    /Non-2xx or 3xx responses:/ { non2xx = $NF }
    /Socket errors:/ { gsub(/,/, ""); sock = $4 + $6 + $8 + $10 }
    END { print rps, p99, req, non2xx, sock, xfer }
  ' "$1"
}

# per_req TICKS REQUESTS: µs of CPU per request, or NA without requests
per_req() { awk -v d="$1" -v t="$CLK_TCK" -v n="$2" 'BEGIN{ if (n+0 > 0) printf "%.2f", d * 1e6 / t / n; else print "NA" }'; }

# measure one (proxy,row,run). $1 proxy-name $2 row $3 run $4 port $5 pid-to-sample (proxy or origin)
measure() {
  local name=$1 row=$2 run=$3 port=$4 pid=$5
  local conns=${ROW_CONNS[$row]} url="http://127.0.0.1:$4${ROW_PATH[$row]}"
  local out="$RAW/wrk.$name.$row.run$run.txt" twb="$TMP/tw.before" twa="$TMP/tw.after"
  local hdr=${ROW_HDR[$row]:-} client=${ROW_CLIENT[$row]:-wrk}
  case "${ROW_TLS[$row]:-}" in  # TLS rows: the proxy's TLS listener with that certificate
    ec) port=${PROXY_TLS_PORTS[$name]}; url="https://127.0.0.1:$port${ROW_PATH[$row]}" ;;
    rsa) port=${PROXY_TLS_RSA_PORTS[$name]}; url="https://127.0.0.1:$port${ROW_PATH[$row]}" ;;
  esac
  if [ "$WARMUP_S" -gt 0 ]; then run_wrk "$conns" "$WARMUP" "$url" "$RAW/wrk.$name.$row.run$run.warmup.txt" "$hdr" "$client"; fi
  tw_snapshot >"$twb"
  local t0 t1; t0=$(date +%s%N)
  local c0 o0 c1 o1 m0 m1 k0 k1 w0 w1 l0 l1 cg=${PROXY_CG[$name]:-} np0 nt0 np1 nt1
  read -r np0 nt0 < <(cg_throttle "$cg")
  c0=$(cpu_ticks "$pid"); o0=$(cpu_ticks "$ORIGIN_PID"); m0=$(cpu_busy_ticks); l0=$(cpu_busy_ticks 1); w0=$(date +%s%N)
  children_ticks k0
  run_wrk "$conns" "$DURATION" "$url" "$out" "$hdr" "$client"
  # Right after the load generator is reaped, before any other child runs: k1 - k0 is its CPU
  # (and one awk's).
  children_ticks k1
  m1=$(cpu_busy_ticks); l1=$(cpu_busy_ticks 1); w1=$(date +%s%N); c1=$(cpu_ticks "$pid"); o1=$(cpu_ticks "$ORIGIN_PID")
  read -r np1 nt1 < <(cg_throttle "$cg")
  local throttled=NA
  if [ -n "$cg" ]; then throttled=$(awk -v p=$((np1 - np0)) -v t=$((nt1 - nt0)) 'BEGIN { printf "%.0f", (p > 0 ? t * 100 / p : 0) }'); fi
  # CPU used by anything else on the machine during the run, in % of one CPU (a build, a
  # compiler...). A few % is kernel work not charged to any process; more means noisy numbers.
  local own=$(( c1 - c0 + k1 - k0 )) other
  [ "$name" = direct ] || own=$(( own + o1 - o0 ))
  local busy_pct
  busy_pct=$(awk -v d=$((c1 - c0)) -v t="$CLK_TCK" -v ns=$((w1 - w0)) 'BEGIN { printf "%.0f", d / t / (ns / 1e9) * 100 }')
  other=$(awk -v b=$((m1 - m0)) -v o="$own" -v t="$CLK_TCK" -v ns=$((w1 - w0)) \
    'BEGIN { v = (b - o) / t / (ns / 1e9) * 100; if (v < 0) v = 0; printf "%.0f", v }')
  local tw_total tw_up rss
  rss=$(rss_kib "$pid")
  settle_closes "$port" "${ORIGIN_PORTS[$name]}"
  tw_snapshot >"$twa"
  t1=$(date +%s%N)
  read -r tw_total tw_up < <(tw_new "$twb" "$twa" $(( (t1 - t0) / 1000000 )) "$port" "${ORIGIN_PORTS[$name]}")
  local rps p99 req non2xx sock xfer resumed=NA
  read -r rps p99 req non2xx sock xfer < <(parse_wrk "$out")
  # bench/tls_handshakes' count of the handshakes that resumed a session, in %
  if [ "$client" != wrk ]; then
    resumed=$(awk '/^Handshakes:/ { if ($2 > 0) printf "%.1f", $6 * 100 / $2; else print "NA" }' "$out")
  fi
  # µs per request of: CPU 1, the proxy, the origin, the load generator, and the three together
  # (the whole machine's cost of a request, which the proxy can shift onto its neighbours).
  local cpu_us ocpu_us lcpu_us gcpu_us mcpu_us
  lcpu_us=$(per_req $((l1 - l0)) "$req")
  cpu_us=$(per_req $((c1 - c0)) "$req")
  ocpu_us=$(per_req $((o1 - o0)) "$req")
  gcpu_us=$(per_req $((k1 - k0)) "$req")
  if [ "$name" = direct ]; then
    rss="NA"; cpu_us="NA"; busy_pct="NA"
    mcpu_us=$(per_req $((o1 - o0 + k1 - k0)) "$req")
  else
    mcpu_us=$(per_req $((c1 - c0 + o1 - o0 + k1 - k0)) "$req")
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$row" "$run" "$rps" "$p99" "$req" \
    "$non2xx" "$sock" "$tw_up" "$tw_total" "$rss" "$cpu_us" "$ocpu_us" "$xfer" "$other" "$busy_pct" "$lcpu_us" "$throttled" "${resumed:-NA}" "$gcpu_us" "$mcpu_us" >>"$RESULTS_TSV"
  log "  $name $row run $run: ${rps} req/s, p99 ${p99} ms, non2xx $non2xx, sockerr $sock, TW up/total $tw_up/$tw_total, RSS ${rss} KiB, CPU ${cpu_us} us/req (${busy_pct}% of its CPU), origin ${ocpu_us}, load ${gcpu_us}, machine ${mcpu_us} us/req, CPU 1 ${lcpu_us} us/req, other CPU ${other}%${cg:+, throttled in ${throttled}% of quota periods}$([ "$resumed" = NA ] || echo ", $resumed% of handshakes resumed")"
  [ "$rps" != NA ] || { log "  wrk output:"; tail -n 5 "$out" >&2 || true; }
}

# --- the crypto's own speed, for the TLS rows ------------------------------------------------------
# What one core does with the same libcrypto (openssl speed, on CPU 0 before any proxy starts): a
# full handshake costs the server one signature and an X25519 key generation + derivation, so these
# bound full handshakes/s per core from above.
OPENSSL_SPEED=""
if [ "$TLS" = 1 ]; then
  log "openssl speed on CPU 0 (ecdsap256 rsa2048 ecdhx25519, 2 s each)..."
  taskset -c 0 timeout 120 openssl speed -seconds 2 ecdsap256 rsa2048 ecdhx25519 >"$RAW/openssl-speed.txt" 2>/dev/null || true
  OPENSSL_SPEED=$(awk '/^rsa 2048 bits/ {rs = $(NF-1); rv = $NF} /ecdsa \(nistp256\)/ {es = $(NF-1); ev = $NF}
                       /ecdh \(X25519\)/ {x = $NF}
                       END {printf "openssl speed on CPU 0, per core: ECDSA P-256 %s sign/s, %s verify/s; RSA-2048 %s sign/s, %s verify/s; X25519 %s ops/s", es, ev, rs, rv, x}' "$RAW/openssl-speed.txt")
  log "$OPENSSL_SPEED"
fi

# --- header --------------------------------------------------------------------------------------
CPU_MODEL=$(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo)
HEADER="$RAW/header.md"
{
  echo "# rpx benchmark"
  echo
  echo "- command: \`${GIVEN_ENV}bash bench/run.sh\` (RUNS=$RUNS DURATION=$DURATION WARMUP=$WARMUP)"
  echo "- date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "- kernel: $(uname -srm); TCP congestion control: $(cat /proc/sys/net/ipv4/tcp_congestion_control)$([ -n "${RPX_BENCH_IN_NETNS:-}" ] && echo " (TCP_CC: in a network namespace of its own; the host's is $RPX_BENCH_HOST_CC)"), loopback qdisc: $(tc qdisc show dev lo 2>/dev/null | awk '{print $2; exit}')"
  echo "- CPU: ${CPU_MODEL:-unknown} ($(nproc) CPUs); proxy pinned to CPU 0, origin + wrk to CPU 1"
  if [ "$ORIGIN" = lean ]; then
    echo "- origin: lean (bench/origin: $ORIGIN_BIN), the same files and header set as nginx's"
  else
    echo "- origin: nginx $(nginx -v 2>&1 | sed 's/^nginx version: nginx\///') (as before session 24)"
  fi
  if [ "$PROXY_QUOTA_US" != 0 ]; then
    echo "- **each proxy capped at $PROXY_CPU CPU** (cgroup $CG_KIND quota ${PROXY_QUOTA_US} µs per ${PROXY_CPU_PERIOD_US} µs): the proxy is the bottleneck, so req/s compares proxies per core"
  fi
  echo "- nginx: $(nginx -v 2>&1 | sed 's/^nginx version: //'); haproxy: $(haproxy -v 2>&1 | head -n 1 | awk '{print $3}'); wrk: $(wrk -v 2>&1 | head -n 1 | awk '{print $2}')"
  if [ -x "$RPX_BIN" ]; then
    echo "- rpx: $RPX_BIN ($(stat -c '%s bytes, modified %y' "$RPX_BIN" | cut -d. -f1); repo $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo 'no commit'))"
  else
    echo "- rpx: not measured ($RPX_BIN missing)"
  fi
  echo "- payloads: ${SIZE_SMALL} B text, ${SIZE_PAGE} B HTML, ${SIZE_BIG} B binary; fd limit $NOFILE; HAProxy maxconn $HAPROXY_MAXCONN"
  if [ "$TLS" = 1 ]; then
    libssl() { ldd "$1" 2>/dev/null | awk '/libssl/ {print $3; exit}'; }
    echo "- TLS: $(openssl version); libssl of rpx: $(libssl "$RPX_BIN"), nginx: $(libssl "$(command -v nginx)"), HAProxy: $(libssl "$(command -v haproxy)"); one throwaway certificate per key type, ECDSA P-256 and RSA-2048, the same files for every proxy; each proxy's defaults otherwise (TLS 1.2-1.3, session tickets on; nginx 1.22 needs \`ssl_protocols TLSv1.2 TLSv1.3\` for that); the origin side is cleartext"
    echo "- TLS clients: wrk over https for the keep-alive rows; \`bench/tls_handshakes\` (\`$TLS_CLIENT_BIN\`) for the handshake rows: tls-full-* (a new connection per request, no session offered), tls-resume-* (each of the 50 clients offers the ticket of its previous connection), tls12-* (the same, offering TLS 1.2 at most); both on CPU 1"
    echo "- $OPENSSL_SPEED"
  fi
  echo "- raw logs: ${RAW#"$ROOT"/}"
  echo "- CPU busy before the run: ${BUSY_START}% of one CPU (1 s sample)$BUSY_NOTE"
} >"$HEADER"

# --- run -------------------------------------------------------------------------------------------
log "rows: $ROWS | proxies: $PROXIES | RUNS=$RUNS DURATION=$DURATION WARMUP=$WARMUP"
case " $PROXIES " in *" rpx "*) [ -x "$RPX_BIN" ] || log "NOTE: rpx rows will be skipped: $RPX_BIN not found (set RPX_BIN)";; esac

SKIPPED=""
save_files() {  # $1 = name: configs and logs of that proxy (or the origin) into the raw dir
  local f
  for f in "$TMP/$1/"*; do if [ -f "$f" ]; then cp "$f" "$RAW/$1.$(basename "$f")"; fi; done
}
# Every proxy runs from the start (idle ones cost nothing), and the measurements interleave:
# run 1 of every row for every proxy, then run 2, and so on. This VM drifts between fast and slow
# phases lasting minutes; measured one proxy after another, a whole proxy could land in one phase
# (the same rpx binary did 21.7k req/s at 30B-c200 in one run and 40.5k half an hour later).
# Interleaved, the proxies compared in a row are measured within a minute of each other.
declare -A PROXY_PORTS PROXY_PIDS PROXY_TLS_PORTS PROXY_TLS_RSA_PORTS
STARTED=""
for proxy in $PROXIES; do
  if ! start_proxy "$proxy"; then SKIPPED+=" $proxy"; save_files "$proxy"; continue; fi
  PROXY_PORTS[$proxy]=$PROXY_PORT
  PROXY_PIDS[$proxy]=$PROXY_PID
  PROXY_TLS_PORTS[$proxy]=$TLS_PORT
  PROXY_TLS_RSA_PORTS[$proxy]=$TLS_RSA_PORT
  STARTED+=" $proxy"
  if [ -n "${PROXY_TLS_INFO[$proxy]:-}" ]; then echo "- $proxy negotiates (openssl s_client): ${PROXY_TLS_INFO[$proxy]}" >>"$HEADER"; fi
done
for run in $(seq 1 "$RUNS"); do
  for row in $ROWS; do
    if [ "$DIRECT" = 1 ] && [[ " $DIRECT_ROWS " == *" $row "* ]]; then
      WRK_CPU=$DIRECT_WRK_CPU  # the baseline: wrk straight to the origin
      measure direct "$row" "$run" "$ORIGIN_PORT" "$ORIGIN_PID"
      WRK_CPU=1
    fi
    for proxy in $STARTED; do
      if [ -n "${ROW_TLS[$row]:-}" ] && [ -z "${PROXY_TLS_PORTS[$proxy]}" ]; then continue; fi  # the relay
      measure "$proxy" "$row" "$run" "${PROXY_PORTS[$proxy]}" "${PROXY_PIDS[$proxy]}"
    done
  done
done
for proxy in $STARTED; do
  stop_pid "${PROXY_PIDS[$proxy]}"
  save_files "$proxy"
done
save_files origin
[ -z "$SKIPPED" ] || echo "- skipped:${SKIPPED} (see log above / raw dir)" >>"$HEADER"
# What bench/tls_handshakes negotiated on each handshake row (its first full or resumed handshake
# of run 1), so that a row never compares different protocols, ciphers or groups unnoticed.
for row in $ROWS; do
  case "${ROW_CLIENT[$row]:-}" in full*) kind=Full ;; resume*) kind=Resumed ;; *) continue ;; esac
  line="" first=""
  for proxy in $STARTED; do
    [ -f "$RAW/wrk.$proxy.$row.run1.txt" ] || continue  # the relay has no TLS rows
    got=$(sed -n "s/^$kind: //p" "$RAW/wrk.$proxy.$row.run1.txt" | head -n 1)
    [ -n "$got" ] || continue
    if [ -z "$first" ]; then first=$got; line="$proxy: $got"
    elif [ "$got" = "$first" ]; then line+="; $proxy: the same"
    else line+="; $proxy: $got"; fi
  done
  [ -z "$line" ] || echo "- $row, the client's ${kind,,} handshakes: $line" >>"$HEADER"
done

mkdir -p "$OUT_DIR"
python3 "$HERE/report.py" "$HEADER" "$RESULTS_TSV" "$ROWS" "direct $PROXIES" >"$RAW/table.md"
cp "$RAW/table.md" "$OUT_DIR/$OUT_NAME"
cat "$OUT_DIR/$OUT_NAME"
log "wrote ${OUT_DIR}/$OUT_NAME; raw logs in $RAW"
