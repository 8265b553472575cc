#!/usr/bin/env bash
# Transparent capture for an rpx sidecar: iptables nat rules that send the host's (or pod's)
# outbound TCP to rpx's outbound port and its inbound TCP to rpx's inbound port, the way Istio's
# istio-iptables does (REDIRECT mode). rpx reads each connection's original destination with
# SO_ORIGINAL_DST (listener filter envoy.filters.listener.original_dst).
#
#   rpx-redirect.sh install [options]   replace any rules this script installed with new ones
#   rpx-redirect.sh remove  [options]   remove them (no error when there are none)
#   rpx-redirect.sh show    [options]   print the nat rules this script owns
#
# Options (each also read from the environment variable in brackets, e.g. an EnvironmentFile):
#   --proxy-uid UID|NAME          rpx's user: its connections are never captured [RPX_PROXY_UID]
#                                 (default 1337; "" for none, then --mark or --proxy-gid is needed)
#   --proxy-gid GID|NAME          also exempt this group's connections [RPX_PROXY_GID]
#   --mark MARK                   also exempt sockets with this fwmark, e.g. 0x539 (rpx sets it
#                                 with upstream_bind_config.socket_options SO_MARK) [RPX_MARK]
#   --outbound-port PORT          where outbound TCP goes (default 15001; "" captures no
#                                 outbound traffic) [RPX_OUTBOUND_PORT]
#   --inbound-port PORT           where inbound TCP goes (default 15006; "" captures no inbound
#                                 traffic) [RPX_INBOUND_PORT]
#   --exclude-inbound-ports LIST  comma-separated ports reached directly from outside (default
#                                 15000, rpx's admin port: the kubelet's readiness probe)
#                                 [RPX_EXCLUDE_INBOUND_PORTS]
#   --exclude-outbound-ports LIST comma-separated destination ports never captured
#                                 [RPX_EXCLUDE_OUTBOUND_PORTS]
#   --exclude-outbound-cidrs LIST comma-separated destination CIDRs never captured (e.g. the
#                                 cloud metadata server 169.254.169.254/32)
#                                 [RPX_EXCLUDE_OUTBOUND_CIDRS]
#   --inbound-interface IF        capture inbound TCP only when it arrives on IF (default: any)
#                                 [RPX_INBOUND_INTERFACE]
#   --iptables BIN                iptables, iptables-nft or iptables-legacy (default iptables)
#                                 [IPTABLES]
#   --dry-run                     print the iptables commands instead of running them
#
# The rules (nat table):
#   -A PREROUTING -p tcp -j RPX_INBOUND
#   -A OUTPUT -p tcp -j RPX_OUTPUT
#   -A RPX_INBOUND -p tcp --dport 15000 -j RETURN          excluded inbound ports
#   -A RPX_INBOUND -p tcp -j RPX_IN_REDIRECT
#   -A RPX_IN_REDIRECT -p tcp -j REDIRECT --to-ports 15006
#   -A RPX_OUTPUT -s 127.0.0.6/32 -o lo -j RETURN           rpx's inbound passthrough to the app
#   -A RPX_OUTPUT -m mark --mark 0x539 -j RETURN            with --mark
#   -A RPX_OUTPUT -m owner --uid-owner 1337 -j RETURN       rpx's own connections (no loop)
#   -A RPX_OUTPUT -m owner --gid-owner GID -j RETURN        with --proxy-gid
#   -A RPX_OUTPUT -d 127.0.0.1/32 -j RETURN                 localhost
#   -A RPX_OUTPUT -p tcp --dport PORT -j RETURN             excluded outbound ports
#   -A RPX_OUTPUT -d CIDR -j RETURN                         excluded outbound CIDRs
#   -A RPX_OUTPUT -j RPX_REDIRECT
#   -A RPX_REDIRECT -p tcp -j REDIRECT --to-ports 15001
#
# IPv4 only: IPv6 TCP is not captured (and so bypasses rpx) unless ip6tables rules are added.
# Needs root (or CAP_NET_ADMIN and CAP_NET_RAW in the network namespace). Idempotent.
set -euo pipefail

CHAINS=(RPX_OUTPUT RPX_INBOUND RPX_REDIRECT RPX_IN_REDIRECT)

proxy_uid="${RPX_PROXY_UID-1337}"
proxy_gid="${RPX_PROXY_GID-}"
mark="${RPX_MARK-}"
outbound_port="${RPX_OUTBOUND_PORT-15001}"
inbound_port="${RPX_INBOUND_PORT-15006}"
exclude_inbound_ports="${RPX_EXCLUDE_INBOUND_PORTS-15000}"
exclude_outbound_ports="${RPX_EXCLUDE_OUTBOUND_PORTS-}"
exclude_outbound_cidrs="${RPX_EXCLUDE_OUTBOUND_CIDRS-}"
inbound_interface="${RPX_INBOUND_INTERFACE-}"
iptables="${IPTABLES:-iptables}"
dry_run=0

die() {
  echo "rpx-redirect.sh: $*" >&2
  exit 2
}

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
  exit "${1:-2}"
}

[[ $# -ge 1 ]] || usage
action="$1"
shift
case "$action" in
  install | remove | show) ;;
  -h | --help | help) usage 0 ;;
  *) die "unknown action '$action' (install, remove or show)" ;;
esac

while [[ $# -gt 0 ]]; do
  opt="$1"
  case "$opt" in
    --dry-run) dry_run=1; shift; continue ;;
    -h | --help) usage 0 ;;
    --*=*) set -- "${opt%%=*}" "${opt#*=}" "${@:2}"; continue ;;
  esac
  [[ $# -ge 2 ]] || die "$opt needs a value"
  case "$opt" in
    --proxy-uid) proxy_uid="$2" ;;
    --proxy-gid) proxy_gid="$2" ;;
    --mark) mark="$2" ;;
    --outbound-port) outbound_port="$2" ;;
    --inbound-port) inbound_port="$2" ;;
    --exclude-inbound-ports) exclude_inbound_ports="$2" ;;
    --exclude-outbound-ports) exclude_outbound_ports="$2" ;;
    --exclude-outbound-cidrs) exclude_outbound_cidrs="$2" ;;
    --inbound-interface) inbound_interface="$2" ;;
    --iptables) iptables="$2" ;;
    *) die "unknown option '$opt'" ;;
  esac
  shift 2
done

# --- checks ----------------------------------------------------------------------------------

is_port() { [[ "$1" =~ ^[0-9]+$ ]] && ((10#$1 >= 1 && 10#$1 <= 65535)); }

check_port() { # NAME VALUE (empty allowed)
  [[ -z "$2" ]] || is_port "$2" || die "$1: '$2' is not a port (1-65535)"
}

split_list() { # LIST -> one item a line (commas and/or spaces)
  local item
  local -a items=()
  IFS=', ' read -r -a items <<<"$1" || true
  for item in "${items[@]}"; do
    if [[ -n "$item" ]]; then printf '%s\n' "$item"; fi
  done
}

# A uid or gid: a number, or a name looked up on this host.
resolve_id() { # KIND(u|g) NAME VALUE
  local v="$3"
  if [[ -z "$v" || "$v" =~ ^[0-9]+$ ]]; then
    printf '%s' "$v"
  elif [[ "$1" == u ]]; then
    id -u "$v" 2>/dev/null || die "$2: no user '$v'"
  else
    getent group "$v" | cut -d: -f3 | grep . || die "$2: no group '$v'"
  fi
}

check_port --outbound-port "$outbound_port"
check_port --inbound-port "$inbound_port"
while read -r p; do check_port --exclude-inbound-ports "$p"; done < <(split_list "$exclude_inbound_ports")
while read -r p; do check_port --exclude-outbound-ports "$p"; done < <(split_list "$exclude_outbound_ports")
while read -r c; do
  [[ "$c" =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}(/[0-9]{1,2})?$ ]] ||
    die "--exclude-outbound-cidrs: '$c' is not an IPv4 address or CIDR"
done < <(split_list "$exclude_outbound_cidrs")
[[ -z "$mark" || "$mark" =~ ^(0x[0-9a-fA-F]+|[0-9]+)$ ]] || die "--mark: '$mark' is not a number"
[[ -z "$inbound_interface" || "$inbound_interface" =~ ^[A-Za-z0-9_.@:-]{1,15}$ ]] ||
  die "--inbound-interface: '$inbound_interface' is not an interface name"
proxy_uid="$(resolve_id u --proxy-uid "$proxy_uid")"
proxy_gid="$(resolve_id g --proxy-gid "$proxy_gid")"

# --- iptables --------------------------------------------------------------------------------

installing=0

ipt() { # iptables -t nat ARGS...; a failure while installing removes what was installed
  if ((dry_run)); then
    echo "$iptables -w -t nat $*"
  elif ! "$iptables" -w -t nat "$@"; then
    echo "rpx-redirect.sh: $iptables -t nat $* failed" >&2
    if ((installing)); then
      installing=0
      echo "rpx-redirect.sh: install failed; removing what was installed" >&2
      remove_rules || true
    fi
    exit 1
  fi
}

if ((!dry_run)); then
  command -v "$iptables" >/dev/null 2>&1 || die "$iptables is not installed (Debian: apt-get install iptables)"
fi

nat_rules() { "$iptables" -w -t nat -S; }

chain_exists() { nat_rules | grep -qx -- "-N $1"; }

remove_rules() {
  local line chain
  if ((dry_run)); then
    ipt -D PREROUTING -p tcp -j RPX_INBOUND
    ipt -D OUTPUT -p tcp -j RPX_OUTPUT
    for chain in "${CHAINS[@]}"; do ipt -F "$chain"; done
    for chain in "${CHAINS[@]}"; do ipt -X "$chain"; done
    return
  fi
  # Every jump from a built-in chain to ours, whatever its matches (-S prints them as -A lines).
  while read -r line; do
    read -r -a words <<<"${line/#-A /-D }"
    ipt "${words[@]}"
  done < <(nat_rules | grep -E -- '^-A (PREROUTING|OUTPUT) .*-j (RPX_OUTPUT|RPX_INBOUND|RPX_REDIRECT|RPX_IN_REDIRECT)( |$)' || true)
  for chain in "${CHAINS[@]}"; do
    if chain_exists "$chain"; then ipt -F "$chain"; fi
  done
  for chain in "${CHAINS[@]}"; do
    if chain_exists "$chain"; then ipt -X "$chain"; fi
  done
}

install_rules() {
  local p c
  if [[ -n "$outbound_port" && -z "$proxy_uid$proxy_gid$mark" ]]; then
    die "no loop-safety rule: rpx's own connections would be captured again; give --proxy-uid, --proxy-gid or --mark"
  fi
  remove_rules
  installing=1
  for c in "${CHAINS[@]}"; do ipt -N "$c"; done

  if [[ -n "$inbound_port" ]]; then
    ipt -A RPX_IN_REDIRECT -p tcp -j REDIRECT --to-ports "$inbound_port"
    while read -r p; do
      ipt -A RPX_INBOUND -p tcp --dport "$p" -j RETURN
    done < <(split_list "$exclude_inbound_ports")
    ipt -A RPX_INBOUND -p tcp -j RPX_IN_REDIRECT
    if [[ -n "$inbound_interface" ]]; then
      ipt -A PREROUTING -i "$inbound_interface" -p tcp -j RPX_INBOUND
    else
      ipt -A PREROUTING -p tcp -j RPX_INBOUND
    fi
  fi

  if [[ -n "$outbound_port" ]]; then
    ipt -A RPX_REDIRECT -p tcp -j REDIRECT --to-ports "$outbound_port"
    # rpx's InboundPassthroughCluster connects to the application from 127.0.0.6.
    ipt -A RPX_OUTPUT -s 127.0.0.6/32 -o lo -j RETURN
    [[ -z "$mark" ]] || ipt -A RPX_OUTPUT -m mark --mark "$mark" -j RETURN
    [[ -z "$proxy_uid" ]] || ipt -A RPX_OUTPUT -m owner --uid-owner "$proxy_uid" -j RETURN
    [[ -z "$proxy_gid" ]] || ipt -A RPX_OUTPUT -m owner --gid-owner "$proxy_gid" -j RETURN
    ipt -A RPX_OUTPUT -d 127.0.0.1/32 -j RETURN
    while read -r p; do
      ipt -A RPX_OUTPUT -p tcp --dport "$p" -j RETURN
    done < <(split_list "$exclude_outbound_ports")
    while read -r c; do
      ipt -A RPX_OUTPUT -d "$c" -j RETURN
    done < <(split_list "$exclude_outbound_cidrs")
    ipt -A RPX_OUTPUT -j RPX_REDIRECT
    ipt -A OUTPUT -p tcp -j RPX_OUTPUT
  fi
  installing=0
}

case "$action" in
  install) install_rules ;;
  remove) remove_rules ;;
  show) nat_rules | grep -E -- '^-[NA] RPX_|-j RPX_' || true ;;
esac
