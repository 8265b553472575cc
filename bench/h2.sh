#!/usr/bin/env bash
# HTTP/2 downstream benchmark: h2load (cleartext h2 with prior knowledge) against rpx, nginx
# (`listen ... http2`), HAProxy (`proto h2`) and h2o, each proxying to the same HTTP/1.1 origin
# with reused upstream connections. Layout as bench/run.sh: the proxy alone on CPU 0 (optionally
# capped with PROXY_CPU), h2load and the origin on CPU 1; the proxies are measured interleaved
# (run 1 of a row for every proxy, then the next row), and the table shows medians.
#
#   bash bench/h2.sh                          # all rows, all proxies, lean origin
#   ORIGIN=nginx RUNS=5 bash bench/h2.sh      # nginx as the origin
#   UPSTREAM=h2 bash bench/h2.sh              # h2 to the origin too (nginx `listen ... http2`):
#                                             # rpx with http2_protocol_options, nginx grpc_pass,
#                                             # HAProxy `proto h2` on the server line; h2o is left
#                                             # out (its packaged version proxies HTTP/1.1 only)
#
# Options: RUNS (3), DURATION (8, seconds), ROWS ("small-c50m10 small-c400m1 page-c50m10"),
# PROXIES ("rpx nginx haproxy h2o"), ORIGIN (lean|nginx), UPSTREAM (h1|h2), RPX_BIN, ORIGIN_BIN, PROXY_CPU (1),
# SKIP_INSTALL (0; 1: never apt-get a missing tool),
# OUT_DIR (bench/results), OUT_NAME (h2-latest.md), IDLE_CONNS (2000; 0 = skip the memory per idle
# h2 connection). Rows: PAYLOAD-cCONNS mSTREAMS, PAYLOAD small
# (29 B) or page (16 KB).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/configs.sh
source "$ROOT/bench/configs.sh"

RUNS=${RUNS:-3}
DURATION=${DURATION:-8}
ROWS=${ROWS:-"small-c50m10 small-c400m1 page-c50m10"}
PROXIES=${PROXIES:-"rpx nginx haproxy h2o"}
ORIGIN=${ORIGIN:-lean}
UPSTREAM=${UPSTREAM:-h1}
if [ "$UPSTREAM" = h2 ]; then
  ORIGIN=nginx  # the lean origin speaks HTTP/1.1 only
  PROXIES=$(for p in $PROXIES; do [ "$p" = h2o ] || echo "$p"; done | xargs)
fi
RPX_BIN=${RPX_BIN:-$ROOT/bazel-bin/source/exe/rpx}
ORIGIN_BIN=${ORIGIN_BIN:-$ROOT/bazel-bin/bench/origin}
PROXY_CPU=${PROXY_CPU:-1}
PROXY_CPU_PERIOD_US=${PROXY_CPU_PERIOD_US:-10000}
OUT_DIR=${OUT_DIR:-$ROOT/bench/results}
OUT_NAME=${OUT_NAME:-h2-latest.md}
IDLE_CONNS=${IDLE_CONNS:-2000}
NOFILE=20000
HAPROXY_MAXCONN=9000
ulimit -n "$NOFILE"

log() { echo "[h2bench $(date +%H:%M:%S)] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
# h2o (a peer only here) is installed on demand, as bench/run.sh does for its tools, and not by
# tools/setup.sh: its package starts a server on port 80 where systemd runs.
missing=()
for t in h2load:nghttp2-client nginx:nginx-light haproxy:haproxy h2o:h2o taskset:util-linux curl:curl; do
  command -v "${t%%:*}" >/dev/null || missing+=("${t#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  [ "${SKIP_INSTALL:-0}" != 1 ] || die "missing: ${missing[*]} (SKIP_INSTALL=1)"
  log "installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
    die "could not install ${missing[*]}"
fi
[ -x "$RPX_BIN" ] || die "no rpx at $RPX_BIN (bazel build //source/exe:rpx)"
[ "$ORIGIN" != lean ] || [ -x "$ORIGIN_BIN" ] || die "no origin at $ORIGIN_BIN (bazel build //bench:origin)"

TMP=$(mktemp -d /tmp/rpx-h2bench.XXXXXX)
PIDS=()
CGROUPS=()
trap stop_started EXIT
mkdir -p "$TMP/www" "$OUT_DIR"
write_payloads "$TMP/www"
chmod 755 "$TMP" "$TMP/www"  # nginx's workers (an unprivileged user when started as root) read it
chmod 644 "$TMP"/www/*

NEXT_PORT=19000
HZ=$(getconf CLK_TCK)

# The origin: one port per proxy.
declare -A ORIGIN_PORT PROXY_PORT PROXY_PID
ports=()
for p in $PROXIES; do pick_port op; ORIGIN_PORT[$p]=$op; ports+=("$op"); done
mkdir -p "$TMP/origin"
if [ "$ORIGIN" = lean ]; then
  taskset -c 1 "$ORIGIN_BIN" "$TMP/www" "${ports[@]}" >"$TMP/origin/out.log" 2>&1 &
else
  write_origin_conf "$TMP/origin" "${ports[*]}"
  if [ "$UPSTREAM" = h2 ]; then
    sed -i 's/ backlog=4096;/ http2 backlog=4096;/; s/^http {$/http {\n  http2_max_concurrent_streams 1000;/' \
      "$TMP/origin/nginx.conf"
  fi
  taskset -c 1 nginx -p "$TMP/origin" -c "$TMP/origin/nginx.conf" -e "$TMP/origin/error.log" >/dev/null 2>&1 &
fi
ORIGIN_PID=$!
PIDS+=("$ORIGIN_PID")
for op in "${ports[@]}"; do wait_port "$op" "$ORIGIN_PID" || die "origin did not listen on $op"; done

cap_dir=""

for p in $PROXIES; do
  dir="$TMP/$p"; mkdir -p "$dir"
  pick_port port; PROXY_PORT[$p]=$port
  UPSTREAM_PORT=${ORIGIN_PORT[$p]}
  case $p in
    rpx)
      pick_port admin
      write_rpx_conf "$dir" "$port" "$admin"
      sed -i 's/codec_type: HTTP1/codec_type: AUTO/' "$dir/bootstrap.yaml"
      [ "$UPSTREAM" = h1 ] ||
        sed -i 's/http_protocol_options: {}/http2_protocol_options: {}/' "$dir/bootstrap.yaml"
      start_capped h2bench rpx "$RPX_BIN" -c "$dir/bootstrap.yaml" --concurrency 1 -l warn ;;
    nginx)
      NGINX_PASS='proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection "";'
      [ "$UPSTREAM" = h1 ] || NGINX_PASS='grpc_pass grpc://origin;'
      { nginx_common_top "$dir"
        cat <<EOF
http {
  access_log off;
$(nginx_temp_paths "$dir")
  http2_max_concurrent_streams 128;
  keepalive_requests 100000;
  keepalive_timeout 300s;
  upstream origin { server 127.0.0.1:$UPSTREAM_PORT; keepalive 64; keepalive_requests 100000; keepalive_timeout 300s; }
  server {
    listen 127.0.0.1:$port http2 backlog=4096;
    location / { $NGINX_PASS }
  }
}
EOF
      } >"$dir/nginx.conf"
      start_capped h2bench nginx nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" ;;
    haproxy)
      write_haproxy_conf "$dir" "$port"
      sed -i "s|^  bind 127.0.0.1:$port\$|  bind 127.0.0.1:$port proto h2|" "$dir/haproxy.cfg"
      [ "$UPSTREAM" = h1 ] || sed -i "s|^  server origin1 .*|& proto h2|" "$dir/haproxy.cfg"
      start_capped h2bench haproxy haproxy -W -db -f "$dir/haproxy.cfg" ;;
    h2o)
      cat >"$dir/h2o.conf" <<EOF
num-threads: 1
max-connections: $((NOFILE - 100))
user: root
error-log: $dir/error.log
listen:
  host: 127.0.0.1
  port: $port
proxy.timeout.keepalive: 300000
http2-max-concurrent-requests-per-connection: 128
hosts:
  default:
    paths:
      /:
        proxy.reverse.url: http://127.0.0.1:$UPSTREAM_PORT/
EOF
      start_capped h2bench h2o h2o -c "$dir/h2o.conf" ;;
    *) die "unknown proxy $p" ;;
  esac
  PROXY_PID[$p]=$LAST_PID
  PIDS+=("$LAST_PID")
  wait_port "$port" "$LAST_PID" || die "$p did not listen on $port"
  body=$(curl -s --http2-prior-knowledge "http://127.0.0.1:$port/small.txt")
  [ "$body" = "hello from the rpx benchmark" ] || die "$p: wrong /small.txt over h2: $body"
  log "$p on $port (PID $LAST_PID) -> origin $UPSTREAM_PORT"
done

RAW_DIR="$OUT_DIR/raw/h2-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$RAW_DIR"
RAW="$RAW_DIR/results.tsv"
: >"$RAW"
measure() {  # proxy row run
  local p=$1 row=$2 run=$3 payload conns streams path out
  payload=${row%%-*}; conns=${row#*-c}; conns=${conns%%m*}; streams=${row##*m}
  path=/small.txt; [ "$payload" = page ] && path=/page.html
  local pid=${PROXY_PID[$p]} t0 t1 m0 m1
  t0=$(proc_ticks "$pid"); m0=$(cpu_busy_ticks)
  out=$(taskset -c 1 h2load -t 1 -c "$conns" -m "$streams" -D "$DURATION" --warm-up-time=1 \
        "http://127.0.0.1:${PROXY_PORT[$p]}$path" 2>&1) || true
  t1=$(proc_ticks "$pid"); m1=$(cpu_busy_ticks)
  local rps done failed errored
  printf '%s\n' "$out" >"$RAW_DIR/$p-$row-$run.txt"
  rps=$(awk '/^finished in/ {gsub(",", "", $4); print $4}' <<<"$out")
  # "requests: T total, S started, D done, OK succeeded, F failed, E errored, X timeout"
  done=$(awk '/^requests:/ {print $6}' <<<"$out")
  failed=$(awk '/^requests:/ {print $10}' <<<"$out")
  errored=$(awk '/^requests:/ {print $12}' <<<"$out")
  # 4xx and 5xx answers count as failed too (h2load's "succeeded" includes them). Its 2xx count
  # can fall a few short of "done" with no other status (streams ending at the deadline), so
  # that difference is not counted.
  local bad
  bad=$(awk '/^status codes:/ {print $7 + $9}' <<<"$out")
  failed=$(( failed + ${bad:-0} ))
  [ -n "$rps" ] || { log "$p $row: h2load failed: $out"; rps=0; done=0; failed=0; errored=0; }
  # CPU per request: the proxy's own, and the whole machine's (proxy + origin + h2load).
  local cpu_us mach_us
  cpu_us=$(awk -v t=$((t1 - t0)) -v n="$done" -v hz="$HZ" 'BEGIN { printf "%.1f", n ? t * 1e6 / hz / n : 0 }')
  mach_us=$(awk -v t=$((m1 - m0)) -v n="$done" -v hz="$HZ" 'BEGIN { printf "%.1f", n ? t * 1e6 / hz / n : 0 }')
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$p" "$row" "$run" "$rps" "$cpu_us" "$mach_us" \
    "$failed" "$errored" >>"$RAW"
  log "$p $row run $run: $rps req/s, $cpu_us us/req (machine $mach_us), failed $failed errored $errored"
}

# Memory per idle h2 connection, first (on proxies that have served only the sanity request, as
# bench/idle_conns.py does for HTTP/1.1): IDLE_CONNS connections, each having completed one request (its
# SETTINGS exchanged, one stream opened and closed), all kept open; the proxy's RSS before and
# after, per connection.
IDLE="$TMP/idle.tsv"
: >"$IDLE"
group_rss() {
  local total=0 p v
  for p in "$1" $(children_of "$1"); do
    v=$(awk '/^VmRSS:/ {print $2}' "/proc/$p/status" 2>/dev/null) || continue
    total=$((total + ${v:-0}))
  done
  echo "$total"
}
if [ "$IDLE_CONNS" -gt 0 ]; then
  for p in $PROXIES; do
    before=$(group_rss "${PROXY_PID[$p]}")
    taskset -c 1 /usr/bin/python3 - "${PROXY_PORT[$p]}" "$IDLE_CONNS" "$TMP/idle-$p.ready" <<'PYEOF' &
import socket, sys, time
import h2.config, h2.connection, h2.events
port, n, ready = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
conns = []
for i in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    c.initiate_connection()
    c.send_headers(1, [(":method", "GET"), (":path", "/small.txt"), (":scheme", "http"),
                       (":authority", "127.0.0.1")], end_stream=True)
    s.sendall(c.data_to_send())
    done = False
    while not done:
        data = s.recv(65536)
        if not data:
            raise SystemExit("connection %d closed" % i)
        for ev in c.receive_data(data):
            if isinstance(ev, h2.events.StreamEnded):
                done = True
        out = c.data_to_send()
        if out:
            s.sendall(out)
    conns.append((s, c))
open(ready, "w").close()
time.sleep(3600)
PYEOF
    client=$!
    for _ in $(seq 1 600); do [ -e "$TMP/idle-$p.ready" ] && break; kill -0 "$client" 2>/dev/null || break; sleep 0.2; done
    sleep 2
    after=$(group_rss "${PROXY_PID[$p]}")
    kill "$client" 2>/dev/null || true
    wait "$client" 2>/dev/null || true
    if [ -e "$TMP/idle-$p.ready" ]; then
      printf '%s\t%s\t%s\n' "$p" "$before" "$after" >>"$IDLE"
      log "$p: RSS $before KiB -> $after KiB with $IDLE_CONNS idle h2 connections"
    else
      log "$p: the idle client failed"
    fi
  done
fi

for run in $(seq 1 "$RUNS"); do
  for row in $ROWS; do
    for p in $PROXIES; do measure "$p" "$row" "$run"; done
  done
done

commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
{
  echo "# HTTP/2 downstream: h2load through each proxy to an $([ "$UPSTREAM" = h2 ] && echo "HTTP/2" || echo "HTTP/1.1") origin"
  echo
  echo "Commit $commit, $(date -u +%Y-%m-%d), origin $ORIGIN, PROXY_CPU $PROXY_CPU, RUNS $RUNS x ${DURATION}s (medians; rpx/X ratios are medians of per-run ratios)."
  echo "Command: \`RUNS=$RUNS DURATION=$DURATION ORIGIN=$ORIGIN UPSTREAM=$UPSTREAM PROXY_CPU=$PROXY_CPU bash bench/h2.sh\`"
  echo
  /usr/bin/python3 - "$RAW" "$PROXIES" "$ROWS" <<'EOF'
import statistics, sys
raw, proxies, rows = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
data = {}
for line in open(raw):
    p, row, run, rps, cpu, mach, failed, errored = line.rstrip("\n").split("\t")
    data.setdefault((p, row), {})[int(run)] = (float(rps), float(cpu), float(mach), int(failed), int(errored))
others = [p for p in proxies if p != "rpx"]
head = "| row | " + " | ".join("%s req/s" % p for p in proxies)
head += " | " + " | ".join("rpx/%s" % p for p in others) if "rpx" in proxies else ""
head += " | CPU us/req " + " / ".join(proxies) + " | machine us/req " + " / ".join(proxies) + " | failed+errored |"
print(head)
print("|" + "---|" * (head.count("|") - 1))
for row in rows:
    cells = []
    for p in proxies:
        runs = data.get((p, row), {})
        cells.append("%.0f" % statistics.median(v[0] for v in runs.values()) if runs else "-")
    ratios = []
    if "rpx" in proxies:
        for o in others:
            a, b = data.get(("rpx", row), {}), data.get((o, row), {})
            rs = [a[r][0] / b[r][0] for r in a if r in b and b[r][0] > 0]
            ratios.append("%.2f" % statistics.median(rs) if rs else "-")
    cpu = " / ".join("%.1f" % statistics.median(v[1] for v in data[(p, row)].values())
                     if data.get((p, row)) else "-" for p in proxies)
    mach = " / ".join("%.1f" % statistics.median(v[2] for v in data[(p, row)].values())
                      if data.get((p, row)) else "-" for p in proxies)
    errs = " / ".join(str(sum(v[3] + v[4] for v in data.get((p, row), {}).values()))
                      for p in proxies)
    print("| %s | %s | %s | %s | %s | %s |" % (row, " | ".join(cells), " | ".join(ratios), cpu,
                                                mach, errs))
EOF
  if [ -s "$IDLE" ]; then
    echo
    echo "Memory per idle h2 connection ($IDLE_CONNS connections, each after one request; proxy RSS after minus before):"
    echo
    echo "| proxy | RSS before (KiB) | RSS after (KiB) | KiB per connection |"
    echo "|---|---:|---:|---:|"
    awk -F'\t' -v n="$IDLE_CONNS" '{ printf "| %s | %d | %d | %.1f |\n", $1, $2, $3, ($3 - $2) / n }' "$IDLE"
  fi
} >"$OUT_DIR/$OUT_NAME"
cat "$OUT_DIR/$OUT_NAME"
