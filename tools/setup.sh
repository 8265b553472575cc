#!/usr/bin/env bash
# Installs every Debian package that building, testing and benchmarking rpx needs.
# Safe to run twice: apt-get skips what is already installed.
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
PKGS=(
  # build: Bazel (offline) and the rules it needs
  bazel-bootstrap bazel-rules-cc bazel-skylib bazel-platforms bazel-rules-proto bazel-rules-java
  pkgconf g++ clang-format
  # libraries
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  libnghttp2-dev libssl-dev libyaml-cpp-dev libre2-dev node-llhttp libc-ares-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  # integration tests
  curl python3 python3-protobuf python3-prometheus-client python3-websockets python3-websocket procps iproute2 slowhttptest
  nghttp2-client python3-h2 python3-grpcio
  etcd-server
  # the sidecar tests: redirect rules in network namespaces, the deploy examples
  iptables python3-yaml shellcheck
  openssl sslscan testssl.sh
  # benchmark
  nginx-light haproxy wrk util-linux
)
# The API check and the config_dump test fetch Envoy's canonical protos with npm: the machine's
# Node.js brings it; elsewhere Debian's.
command -v npm >/dev/null 2>&1 || PKGS+=(npm)
if [ "${RPX_SETUP_SKIP_UPDATE:-0}" != 1 ]; then $SUDO apt-get update -qq; fi
$SUDO apt-get install -y -qq --no-install-recommends "${PKGS[@]}" >/dev/null
# The benchmark starts its own nginx and haproxy, the control-plane tests their own etcd; the
# packaged services must not hold ports.
for svc in nginx haproxy etcd; do
  if command -v systemctl >/dev/null 2>&1; then $SUDO systemctl disable --now "$svc" >/dev/null 2>&1 || true; fi
done
echo "setup: packages installed"
