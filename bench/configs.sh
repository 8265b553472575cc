# Payloads, configuration writers and small helpers of the benchmark rig, shared by bench/run.sh,
# bench/h2.sh, bench/grpc.sh, bench/callgrind.sh and bench/wakeups.sh (sourced, not run). The
# writers read these globals: NOFILE (fd limit), TMP (temp dir; the origin serves $TMP/www),
# UPSTREAM_PORT (the origin port a proxy forwards to), HAPROXY_MAXCONN; and for TLS
# (bench/run.sh's tls-* rows): TLS_DIR (where write_tls_certs put the certificates), TLS_PORT (a
# listener with the ECDSA certificate) and TLS_RSA_PORT (one with the RSA certificate), each
# empty = no such listener.

write_payloads() {  # $1 = dir: small.txt (29 B), page.html (16 KB), big.bin (4 MiB)
  printf 'hello from the rpx benchmark\n' >"$1/small.txt"          # 29 bytes
  {
    printf '<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>rpx bench page</title></head><body>\n'
    i=0
    while :; do
      line="<p>Paragraph $i: the quick brown fox jumps over the lazy dog; lorem ipsum dolor sit amet.</p>"
      printf '%s\n' "$line"; i=$((i + 1))
      [ $i -lt 170 ] || break
    done
    printf '</body></html>\n'
  } | head -c 16384 >"$1/page.html"
  head -c 4194304 /dev/urandom >"$1/big.bin"
}

# One throwaway certificate of each key type per run, self-signed for localhost / 127.0.0.1, valid
# 2 days: ec.crt + ec.key (ECDSA P-256), rsa.crt + rsa.key (RSA-2048), and ec.pem / rsa.pem
# (certificate then key in one file, as HAProxy's `crt` takes them). Every proxy gets the same files.
write_tls_certs() {  # $1 = dir
  local k
  for k in ec rsa; do
    local alg=(-newkey ec -pkeyopt ec_paramgen_curve:P-256)
    if [ "$k" = rsa ]; then alg=(-newkey rsa:2048); fi
    openssl req -x509 "${alg[@]}" -nodes -days 2 -subj /CN=localhost \
      -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
      -keyout "$1/$k.key" -out "$1/$k.crt" 2>/dev/null || return 1
    cat "$1/$k.crt" "$1/$k.key" >"$1/$k.pem"
    chmod 644 "$1/$k.key" "$1/$k.pem"  # nginx workers may run unprivileged when started as root
  done
}
# tls_listeners: "KIND PORT" lines for the TLS listeners asked for (TLS_PORT: ec, TLS_RSA_PORT: rsa).
tls_listeners() {
  if [ -n "${TLS_PORT:-}" ]; then echo "ec $TLS_PORT"; fi
  if [ -n "${TLS_RSA_PORT:-}" ]; then echo "rsa $TLS_RSA_PORT"; fi
}

nginx_common_top() {  # $1 = dir
  cat <<EOF
daemon off;
master_process on;
worker_processes 1;
worker_rlimit_nofile $NOFILE;
pid $1/nginx.pid;
error_log $1/error.log warn;
events { worker_connections $(( NOFILE - 100 )); multi_accept off; }
EOF
}
nginx_temp_paths() {  # $1 = dir
  cat <<EOF
  client_body_temp_path $1/client_body;
  proxy_temp_path $1/proxy;
  fastcgi_temp_path $1/fastcgi;
  uwsgi_temp_path $1/uwsgi;
  scgi_temp_path $1/scgi;
EOF
}

write_origin_conf() {  # $1 dir $2 "port port ...": one listen line per port
  { nginx_common_top "$1"
    cat <<EOF
http {
  access_log off;
$(nginx_temp_paths "$1")
  types { text/plain txt; text/html html; application/octet-stream bin; }
  default_type application/octet-stream;
  sendfile on;
  tcp_nopush on;
  tcp_nodelay on;
  keepalive_requests 100000;
  # Longer than any bench run, and than rpx's idle_timeout below: an idle upstream connection
  # left by one row must not expire in a later row's window, where its TIME_WAIT would be counted
  # as that row's churn (a full run's cycle is about 5 minutes, so 300 s did exactly that).
  keepalive_timeout 3700s;
  open_file_cache max=64 inactive=300s;
  server {
$(for p in $2; do echo "    listen 127.0.0.1:$p backlog=4096;"; done)
    root $TMP/www;
    location / { }
  }
}
EOF
  } >"$1/nginx.conf"
}

write_nginx_proxy_conf() {  # $1 dir $2 port $3 upstream-keepalive [$4 = tune: upstream keepalive_requests/timeout]
  local tune="" k port
  if [ "${4:-0}" = 1 ]; then tune=$'\n    keepalive_requests 100000;\n    keepalive_timeout 300s;'; fi
  local location='    location / {
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }'
  local access_log="access_log off;"
  if [ "${ACCESS_LOG:-0}" = 1 ]; then access_log="access_log $1/access.log combined buffer=64k flush=1s;"; fi
  { nginx_common_top "$1"
    cat <<EOF
http {
  $access_log
$(nginx_temp_paths "$1")
  keepalive_requests 100000;
  keepalive_timeout 300s;
  upstream origin {
    server 127.0.0.1:$UPSTREAM_PORT;
    keepalive $3;$tune
  }
  server {
    listen 127.0.0.1:$2 backlog=4096;
$location
  }
EOF
    # TLS: nginx's defaults otherwise (session tickets on, no session cache) but for ssl_protocols:
    # nginx 1.22's default stops at TLS 1.2 (1.3 joined it in nginx 1.23.4); rpx and HAProxy offer
    # TLS 1.2 and 1.3, and so does nginx here.
    while read -r k port; do
      cat <<EOF
  server {
    listen 127.0.0.1:$port ssl backlog=4096;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_certificate $TLS_DIR/$k.crt;
    ssl_certificate_key $TLS_DIR/$k.key;
$location
  }
EOF
    done < <(tls_listeners)
    echo "}"
  } >"$1/nginx.conf"
}

write_haproxy_conf() {  # $1 dir $2 port [$3 = 1: busy-polling]
  local bp=""
  if [ "${3:-0}" = 1 ]; then bp=$'\n  busy-polling'; fi
  cat >"$1/haproxy.cfg" <<EOF
global
  nbthread 1$bp
  maxconn $HAPROXY_MAXCONN
  pidfile $1/haproxy.pid

defaults
  mode http
  option http-keep-alive
  http-reuse always
  maxconn $HAPROXY_MAXCONN
  timeout connect 5s
  timeout client 300s
  timeout server 300s
  timeout http-request 30s
  timeout http-keep-alive 300s
  timeout queue 30s

frontend fe
  bind 127.0.0.1:$2
  backlog 4096
  default_backend origin

backend origin
  server origin1 127.0.0.1:$UPSTREAM_PORT maxconn $HAPROXY_MAXCONN
EOF
  # TLS: HAProxy's defaults otherwise (TLS 1.2 and 1.3, session tickets on).
  local k port
  while read -r k port; do
    cat >>"$1/haproxy.cfg" <<EOF

frontend fe_tls_$k
  bind 127.0.0.1:$port ssl crt $TLS_DIR/$k.pem alpn http/1.1
  backlog 4096
  default_backend origin
EOF
  done < <(tls_listeners)
}

# RPX_REQUEST_ID=0 turns off the x-request-id rpx generates for every request (Envoy's default,
# a random UUID; `generate_request_id: false`). nginx and HAProxy, as configured here, add no ID;
# the default 1 keeps the runs comparable with earlier ones (docs/benchmarks.md, session 21: the
# ID costs rpx about 400 instructions per request, and moved no req/s).
write_rpx_conf() {  # $1 dir $2 port $3 admin-port [$4 = extra virtual hosts before the matching one]
  local extra=${4:-0} target='["*"]' request_id=true k port log_dir=$1
  if [ "${RPX_REQUEST_ID:-1}" = 0 ]; then request_id=false; fi
  if [ "$extra" -gt 0 ]; then target='["127.0.0.1"]'; fi  # wrk's Host, matched exactly
  local vhosts  # the extra virtual hosts, once for every listener
  vhosts=$(awk -v n="$extra" 'BEGIN { for (i = 0; i < n; i++) printf "            - {name: vh%d, domains: [\"vh%d.example.com\", \"*.vh%d.example.net\"], routes: [{match: {prefix: \"/\"}, route: {cluster: origin}}]}\n", i, i, i }')
  { cat <<EOF
admin:
  address:
    socket_address:
      address: 127.0.0.1
      port_value: $3
static_resources:
  listeners:
EOF
    rpx_listener ingress "$2" ingress_http
    # TLS: a filter chain with Envoy's DownstreamTlsContext; rpx's defaults otherwise (TLS 1.2 and
    # 1.3, session tickets on with a random key).
    while read -r k port; do rpx_listener "ingress_tls_$k" "$port" ingress_https "$k"; done < <(tls_listeners)
    cat <<EOF
  clusters:
  - name: origin
    type: STATIC
    connect_timeout: 5s
    lb_policy: ROUND_ROBIN
    load_assignment:
      cluster_name: origin
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address:
                address: 127.0.0.1
                port_value: $UPSTREAM_PORT
    circuit_breakers:
      thresholds:
      - priority: DEFAULT
        max_connections: 1024
        max_pending_requests: 1024
        max_requests: 4096
        max_retries: 3
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        common_http_protocol_options:
          idle_timeout: 3600s  # Envoy's default; below the origin's keepalive_timeout
        explicit_http_config:
          http_protocol_options: {}
EOF
  } >"$1/bootstrap.yaml"
}
# One listener of write_rpx_conf (reads its locals request_id, vhosts, target, log_dir):
# rpx_listener NAME PORT STAT_PREFIX [ec|rsa: TLS with $TLS_DIR's certificate of that kind]
rpx_listener() {
  cat <<EOF
  - name: $1
    address:
      socket_address:
        address: 127.0.0.1
        port_value: $2
    filter_chains:
EOF
  if [ -n "${4:-}" ]; then
    cat <<EOF
    - transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
          common_tls_context:
            tls_certificates:
            - certificate_chain: {filename: $TLS_DIR/$4.crt}
              private_key: {filename: $TLS_DIR/$4.key}
            alpn_protocols: ["http/1.1"]
      filters:
EOF
  else
    echo "    - filters:"
  fi
  cat <<EOF
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: $3
          codec_type: HTTP1
          generate_request_id: $request_id
EOF
  if [ "${RPX_ACCESS_LOG:-0}" = 1 ]; then
    # nginx's `combined` format, field for field.
    cat <<EOF
          access_log:
          - name: envoy.access_loggers.file
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
              path: $log_dir/access.log
              log_format:
                text_format_source:
                  inline_string: "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT% - - [%START_TIME(%d/%b/%Y:%H:%M:%S +0000)%] \\"%REQ(:METHOD)% %REQ(:PATH)% %PROTOCOL%\\" %RESPONSE_CODE% %BYTES_SENT% \\"%REQ(REFERER)%\\" \\"%REQ(USER-AGENT)%\\"\\n"
EOF
  fi
  cat <<EOF
          route_config:
            name: local_route
            virtual_hosts:
EOF
  if [ -n "$vhosts" ]; then printf '%s\n' "$vhosts"; fi
  cat <<EOF
            - name: origin
              domains: $target
              routes:
              - match:
                  prefix: "/"
                route:
                  cluster: origin
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
EOF
}

# Wait until 127.0.0.1:PORT accepts, while PID is alive; bounded.
wait_port() {  # $1 port $2 pid [$3 seconds, default 15]
  local port=$1 pid=$2 secs=${3:-15} i
  for i in $(seq 1 $((secs * 10))); do
    kill -0 "$pid" 2>/dev/null || return 1
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  return 1
}

# PIDs of a process's direct children (nginx's workers), one a line.
children_of() { pgrep -P "$1" 2>/dev/null || true; }
# Busy ticks from /proc/stat (user nice system irq softirq steal): of CPU $1, or with no argument
# of the whole machine.
cpu_busy_ticks() { awk -v c="cpu${1:-}" '$1 == c {print $2 + $3 + $4 + $7 + $8 + $9; exit}' /proc/stat; }

# CPU caps (run.sh's and wakeups.sh's PROXY_CPU): each capped proxy runs in a cgroup of its own.
# cpu_quota_us CPUS PERIOD_US: the quota giving CPUS CPUs per period, or 0 (no cap) from 1 CPU up:
# every proxy is pinned to one CPU, so it can never use more.
cpu_quota_us() { awk -v c="$1" -v p="$2" 'BEGIN { print (c >= 1 ? 0 : int(c * p + 0.5)) }'; }
# cgroup_root prints "KIND ROOT" for the cpu controller (v1 or v2), or fails without one.
cgroup_root() {
  if [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then echo "v1 /sys/fs/cgroup/cpu"
  elif grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then echo "v2 /sys/fs/cgroup"
  else return 1; fi
}
# cgroup_cap KIND DIR QUOTA_US PERIOD_US: create DIR with that CPU quota; on failure nothing is
# left behind.
cgroup_cap() {
  local parent
  parent=$(dirname "$2")
  mkdir "$2" || return 1
  if [ "$1" = v1 ]; then
    echo "$4" >"$2/cpu.cfs_period_us" && echo "$3" >"$2/cpu.cfs_quota_us"
  else
    { grep -qw cpu "$parent/cgroup.subtree_control" || echo +cpu >"$parent/cgroup.subtree_control"; } &&
      echo "$3 $4" >"$2/cpu.max"
  fi || { rmdir "$2"; return 1; }
}
# in_cgroup DIR CMD...: exec CMD inside cgroup DIR ("" = no cgroup). Run it with &: the background
# subshell joins the cgroup and execs, so $! is CMD's PID and CMD's children inherit the cap.
in_cgroup() {
  local d=$1; shift
  if [ -n "$d" ]; then echo "$BASHPID" >"$d/cgroup.procs" || exit 1; fi
  exec "$@"
}

# Process bookkeeping of bench/h2.sh and bench/grpc.sh (which define log and die). They set
# TMP, PIDS=() and CGROUPS=() and `trap stop_started EXIT`; every process they start goes into
# PIDS, every cgroup into CGROUPS.
stop_started() {
  local p d
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 0.3
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for d in "${CGROUPS[@]}"; do rmdir "$d" 2>/dev/null || true; done
  rm -rf "$TMP"
}
# pick_port VAR: a loopback port nothing listens on, from NEXT_PORT up (the caller sets it).
pick_port() {
  while ! [ -z "$(ss -Htln "sport = :$NEXT_PORT" 2>/dev/null)" ]; do NEXT_PORT=$((NEXT_PORT + 1)); done
  printf -v "$1" '%s' "$NEXT_PORT"
  NEXT_PORT=$((NEXT_PORT + 1))
}
# proc_ticks PID: utime+stime of a process and its children (clock ticks, getconf CLK_TCK).
proc_ticks() {
  local s total=0 p
  for p in "$1" $(pgrep -P "$1" 2>/dev/null || true); do
    s=$(cat "/proc/$p/stat" 2>/dev/null) || continue
    s=${s##*) }
    total=$((total + $(awk '{print $12 + $13}' <<<"$s")))
  done
  echo "$total"
}
# start_capped TAG NAME CMD...: runs CMD on CPU 0, in a cgroup capped at PROXY_CPU CPUs per
# PROXY_CPU_PERIOD_US when PROXY_CPU < 1; LAST_PID is its PID.
start_capped() {
  local tag=$1 name=$2; shift 2
  local quota d=""
  quota=$(cpu_quota_us "$PROXY_CPU" "$PROXY_CPU_PERIOD_US")
  if [ "$quota" != 0 ]; then
    read -r kind root < <(cgroup_root) || die "PROXY_CPU needs the cgroup cpu controller"
    d="$root/rpx-$tag-$name-$$"
    cgroup_cap "$kind" "$d" "$quota" "$PROXY_CPU_PERIOD_US" || die "cannot make cgroup $d"
    CGROUPS+=("$d")
  fi
  in_cgroup "$d" taskset -c 0 "$@" &
  LAST_PID=$!
}
