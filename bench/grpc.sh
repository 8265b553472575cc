#!/usr/bin/env bash
# gRPC benchmark: messages per second through rpx, nginx (`grpc_pass`) and HAProxy (`proto h2`
# both sides), and straight to the server, with bench's C++ gRPC load client and echo server
# (bench/grpc_bench.cc, Debian's libgrpc++; no python on the load side). Layout as bench/run.sh:
# the proxy alone on CPU 0 (PROXY_CPU caps it, default 0.5: the proxy is then the bottleneck and
# messages/s compare proxies per core), the client and the server on CPU 1; measured interleaved
# (run 1 of a row for every proxy, then the next row), medians.
#
#   bazel build //source/exe:rpx //bench:grpc_bench && bash bench/grpc.sh
#
# Options: RUNS (3), DURATION (8, seconds), ROWS ("unary-c4x16 stream-c4x16": MODE-cCONNSxCALLS),
# BYTES (100, message size), PROXIES ("direct rpx nginx haproxy"), PROXY_CPU (0.5), RPX_BIN,
# GRPC_BENCH_BIN, OUT_DIR (bench/results), OUT_NAME (grpc-latest.md).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/configs.sh
source "$ROOT/bench/configs.sh"

RUNS=${RUNS:-3}
DURATION=${DURATION:-8}
ROWS=${ROWS:-"unary-c4x16 stream-c4x16"}
BYTES=${BYTES:-100}
PROXIES=${PROXIES:-"direct rpx nginx haproxy"}
PROXY_CPU=${PROXY_CPU:-0.5}
PROXY_CPU_PERIOD_US=${PROXY_CPU_PERIOD_US:-10000}
RPX_BIN=${RPX_BIN:-$ROOT/bazel-bin/source/exe/rpx}
GRPC_BENCH_BIN=${GRPC_BENCH_BIN:-$ROOT/bazel-bin/bench/grpc_bench}
OUT_DIR=${OUT_DIR:-$ROOT/bench/results}
OUT_NAME=${OUT_NAME:-grpc-latest.md}
NOFILE=4096  # nginx's worker_rlimit_nofile (bench/configs.sh); the rows use a few connections

log() { echo "[grpcbench $(date +%H:%M:%S)] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
for t in nginx haproxy taskset; do command -v "$t" >/dev/null || die "missing $t (bash tools/setup.sh)"; done
[ -x "$RPX_BIN" ] || die "no rpx at $RPX_BIN (bazel build //source/exe:rpx)"
[ -x "$GRPC_BENCH_BIN" ] || die "no grpc_bench at $GRPC_BENCH_BIN (bazel build //bench:grpc_bench)"

TMP=$(mktemp -d /tmp/rpx-grpcbench.XXXXXX)
PIDS=()
CGROUPS=()
trap stop_started EXIT

NEXT_PORT=19500
HZ=$(getconf CLK_TCK)

pick_port server_port
taskset -c 1 "$GRPC_BENCH_BIN" server "$server_port" 2>"$TMP/server.log" &
SERVER_PID=$!
PIDS+=("$SERVER_PID")
wait_port "$server_port" "$SERVER_PID" || die "grpc_bench server did not listen"

declare -A PORT PID
for p in $PROXIES; do
  dir="$TMP/$p"; mkdir -p "$dir"
  case $p in
    direct) PORT[$p]=$server_port; PID[$p]=""; continue ;;
    rpx)
      pick_port port; pick_port admin
      cat >"$dir/rpx.yaml" <<EOF
admin: {address: {socket_address: {address: 127.0.0.1, port_value: $admin}}}
static_resources:
  listeners:
  - name: grpc
    address: {socket_address: {address: 127.0.0.1, port_value: $port}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: grpc
          codec_type: HTTP2
          generate_request_id: false
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes: [{match: {prefix: "/"}, route: {cluster: echo, timeout: 0s}}]
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
  clusters:
  - name: echo
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {http2_protocol_options: {}}
    load_assignment:
      cluster_name: echo
      endpoints:
      - lb_endpoints:
        - endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: $server_port}}}
EOF
      start_capped grpcbench rpx "$RPX_BIN" -c "$dir/rpx.yaml" --concurrency 1 -l warn ;;
    nginx)
      pick_port port
      { nginx_common_top "$dir"
        cat <<EOF
http {
  access_log off;
$(nginx_temp_paths "$dir")
  http2_max_concurrent_streams 1000;
  keepalive_requests 1000000;
  keepalive_timeout 300s;
  upstream echo { server 127.0.0.1:$server_port; keepalive 64; keepalive_requests 1000000; keepalive_timeout 300s; }
  server {
    listen 127.0.0.1:$port http2 backlog=4096;
    location / { grpc_pass grpc://echo; grpc_read_timeout 300s; grpc_send_timeout 300s; }
  }
}
EOF
      } >"$dir/nginx.conf"
      start_capped grpcbench nginx nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" ;;
    haproxy)
      pick_port port
      cat >"$dir/haproxy.cfg" <<EOF
global
  nbthread 1
  maxconn 2000
defaults
  mode http
  timeout connect 5s
  timeout client 300s
  timeout server 300s
frontend f
  bind 127.0.0.1:$port proto h2
  default_backend echo
backend echo
  http-reuse always
  server s1 127.0.0.1:$server_port proto h2
EOF
      start_capped grpcbench haproxy haproxy -db -f "$dir/haproxy.cfg" ;;
    *) die "unknown proxy $p" ;;
  esac
  PORT[$p]=$port; PID[$p]=$LAST_PID; PIDS+=("$LAST_PID")
  wait_port "$port" "$LAST_PID" || die "$p did not listen on $port"
  log "$p on $port (PID $LAST_PID)"
done

RAW_DIR="$OUT_DIR/raw/grpc-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$RAW_DIR"
RAW="$RAW_DIR/results.tsv"
: >"$RAW"
for run in $(seq 1 "$RUNS"); do
  for row in $ROWS; do
    mode=${row%%-*}; spec=${row#*-c}; conns=${spec%%x*}; calls=${spec#*x}
    for p in $PROXIES; do
      t0=0; [ -z "${PID[$p]}" ] || t0=$(proc_ticks "${PID[$p]}")
      out=$(taskset -c 1 "$GRPC_BENCH_BIN" client "127.0.0.1:${PORT[$p]}" "$mode" "$conns" "$calls" \
            "$DURATION" "$BYTES" 2>&1) || true
      t1=0; [ -z "${PID[$p]}" ] || t1=$(proc_ticks "${PID[$p]}")
      printf '%s\n' "$out" >"$RAW_DIR/$p-$row-$run.txt"
      rate=$(sed -n 's/.* rate=\([0-9]*\) .*/\1/p' <<<"$out")
      msgs=$(sed -n 's/.* messages=\([0-9]*\) .*/\1/p' <<<"$out")
      errs=$(sed -n 's/.* errors=\([0-9]*\).*/\1/p' <<<"$out")
      [ -n "$rate" ] || { log "$p $row: client failed: $out"; rate=0; msgs=0; errs=0; }
      # The proxy's CPU over the whole client run (warm-up included) per message of the window,
      # scaled by the window's share of the run.
      cpu=$(awk -v t=$((t1 - t0)) -v n="$msgs" -v hz="$HZ" -v d="$DURATION" \
            'BEGIN { printf "%.1f", n ? t * 1e6 / hz / (n * (d + 1) / d) : 0 }')
      printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$p" "$row" "$run" "$rate" "$cpu" "$errs" >>"$RAW"
      log "$p $row run $run: $rate messages/s, proxy CPU $cpu us/message, errors $errs"
    done
  done
done

commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
{
  echo "# gRPC: messages per second through each proxy (bench/grpc_bench.cc client and server)"
  echo
  echo "Commit $commit, $(date -u +%Y-%m-%d), PROXY_CPU $PROXY_CPU, $BYTES-byte messages, RUNS $RUNS x ${DURATION}s (medians; rpx/X ratios are medians of per-run ratios)."
  echo "Command: \`RUNS=$RUNS DURATION=$DURATION PROXY_CPU=$PROXY_CPU BYTES=$BYTES bash bench/grpc.sh\`"
  echo
  /usr/bin/python3 - "$RAW" "$PROXIES" "$ROWS" <<'EOF'
import statistics, sys
raw, proxies, rows = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
data = {}
for line in open(raw):
    p, row, run, rate, cpu, errs = line.rstrip("\n").split("\t")
    data.setdefault((p, row), {})[int(run)] = (float(rate), float(cpu), int(errs))
others = [p for p in proxies if p not in ("rpx", "direct")]
head = "| row | " + " | ".join("%s msg/s" % p for p in proxies)
head += "".join(" | rpx/%s" % o for o in others)
head += " | proxy CPU us/msg " + " / ".join(p for p in proxies if p != "direct") + " | errors |"
print(head)
print("|" + "---|" * (head.count("|") - 1))
for row in rows:
    cells = []
    for p in proxies:
        r = data.get((p, row), {})
        cells.append("%.0f" % statistics.median(v[0] for v in r.values()) if r else "-")
    ratios = []
    for o in others:
        a, b = data.get(("rpx", row), {}), data.get((o, row), {})
        rs = [a[k][0] / b[k][0] for k in a if k in b and b[k][0] > 0]
        ratios.append("%.2f" % statistics.median(rs) if rs else "-")
    cpu = " / ".join("%.1f" % statistics.median(v[1] for v in data[(p, row)].values())
                     if data.get((p, row)) else "-" for p in proxies if p != "direct")
    errs = " / ".join(str(sum(v[2] for v in data.get((p, row), {}).values())) for p in proxies)
    print("| %s | %s |%s %s | %s |" % (row, " | ".join(cells),
                                      "".join(" %s |" % r for r in ratios), cpu, errs))
EOF
} >"$OUT_DIR/$OUT_NAME"
cat "$OUT_DIR/$OUT_NAME"
