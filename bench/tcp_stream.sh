#!/usr/bin/env bash
# TCP proxy throughput: one long byte stream (1 GiB by default) from bench/stream's sender to its
# sink, directly and through each proxy in TCP mode, interleaved, on loopback.
#
#   bash bench/tcp_stream.sh
#
# Layout: the proxy alone on CPU 0 (one worker / one thread); sender and sink together on CPU 1,
# as in the direct run (so the direct figure is what CPU 1 alone gets through the kernel, and a
# proxied figure is what is left once a second TCP connection is in the path).
# Proxies: rpx (tcp_proxy, splice(2) between plaintext sockets), rpx-copy (rpx --disable-splice:
# copied through userspace, as with TLS on either side), haproxy (mode tcp, option splice-auto).
#
# Options (environment variables):
#   BYTES=1073741824   size of each stream
#   RUNS=5             repetitions (the table shows medians; each repetition runs every layout,
#                      in an order rotated by one each time)
#   RPX_BIN, STREAM_BIN  binaries (default: <repo>/bazel-bin/source/exe/rpx, .../bench/stream)
#   BASE_PORT=19900    ports BASE_PORT .. BASE_PORT+3
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BYTES=${BYTES:-1073741824}
RUNS=${RUNS:-5}
RPX_BIN=${RPX_BIN:-$ROOT/bazel-bin/source/exe/rpx}
STREAM_BIN=${STREAM_BIN:-$ROOT/bazel-bin/bench/stream}
BASE_PORT=${BASE_PORT:-19900}
ADMIN=$BASE_PORT SINK=$((BASE_PORT + 1)) RPX_PORT=$((BASE_PORT + 2)) HAP_PORT=$((BASE_PORT + 3))
for b in "$RPX_BIN" "$STREAM_BIN"; do
  [ -x "$b" ] || { echo "missing $b (bazel build //source/exe:rpx //bench:stream)" >&2; exit 2; }
done
command -v haproxy >/dev/null || { echo "haproxy is not installed" >&2; exit 2; }
TMP=$(mktemp -d /tmp/rpx-tcp-stream.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

cat > "$TMP/rpx.yaml" <<EOF
admin: {address: {socket_address: {address: 127.0.0.1, port_value: $ADMIN}}}
static_resources:
  listeners:
  - name: stream
    address: {socket_address: {address: 127.0.0.1, port_value: $RPX_PORT}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.tcp_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: stream
          cluster: sink
  clusters:
  - name: sink
    connect_timeout: 1s
    load_assignment:
      cluster_name: sink
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: $SINK}}}}]}]
EOF
cat > "$TMP/haproxy.cfg" <<EOF
global
  maxconn 1000
  nbthread 1
defaults
  mode tcp
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  option splice-auto
frontend f
  bind 127.0.0.1:$HAP_PORT
  default_backend b
backend b
  server s1 127.0.0.1:$SINK
EOF

taskset -c 1 "$STREAM_BIN" sink "$SINK" > "$TMP/sink.log" & PIDS+=($!)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)

start_proxy() {  # name -> sets PROXY_PID and PORT
  case $1 in
    rpx) taskset -c 0 "$RPX_BIN" -c "$TMP/rpx.yaml" --concurrency 1 -l warn > "$TMP/rpx.log" 2>&1 &
         PORT=$RPX_PORT ;;
    rpx-copy) taskset -c 0 "$RPX_BIN" -c "$TMP/rpx.yaml" --concurrency 1 -l warn --disable-splice \
                > "$TMP/rpx-copy.log" 2>&1 &
         PORT=$RPX_PORT ;;
    haproxy) taskset -c 0 haproxy -f "$TMP/haproxy.cfg" -db > "$TMP/haproxy.log" 2>&1 &
         PORT=$HAP_PORT ;;
  esac
  PROXY_PID=$!
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "$1 did not start" >&2; exit 1
}

LAYOUTS=(direct rpx rpx-copy haproxy)
declare -A GBPS CPU
for r in $(seq "$RUNS"); do
  n=${#LAYOUTS[@]}
  for i in $(seq 0 $((n - 1))); do
    l=${LAYOUTS[$(((i + r) % n))]}
    if [ "$l" = direct ]; then
      out=$(taskset -c 1 "$STREAM_BIN" send "$SINK" "$BYTES")
      GBPS[$l]+="$(echo "$out" | awk '{print $3}') "
      continue
    fi
    start_proxy "$l"
    a=$(ticks "$PROXY_PID")
    out=$(taskset -c 1 "$STREAM_BIN" send "$PORT" "$BYTES")
    b=$(ticks "$PROXY_PID")
    kill "$PROXY_PID"; wait "$PROXY_PID" 2>/dev/null || true
    GBPS[$l]+="$(echo "$out" | awk '{print $3}') "
    # CPU seconds per GiB moved.
    CPU[$l]+="$(awk -v t=$((b - a)) -v hz="$HZ" -v by="$BYTES" 'BEGIN{printf "%.3f", t / hz / (by / 1073741824)}') "
  done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR]=$1} END{print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
direct=$(echo "${GBPS[direct]}" | median)
echo "TCP stream of $BYTES bytes, $RUNS runs (medians); proxy on CPU 0, sender and sink on CPU 1"
echo "commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%Y-%m-%dT%H:%MZ)"
echo
echo "| layout | GB/s | x direct | proxy CPU s per GiB | runs (GB/s) |"
echo "|---|---:|---:|---:|---|"
for l in "${LAYOUTS[@]}"; do
  g=$(echo "${GBPS[$l]}" | median)
  c=$([ "$l" = direct ] && echo "-" || echo "${CPU[$l]}" | median)
  printf "| %s | %.2f | %.2f | %s | %s|\n" "$l" "$g" "$(awk -v a="$g" -v b="$direct" 'BEGIN{print a/b}')" \
    "$c" "${GBPS[$l]}"
done
