#!/usr/bin/env bash
# Runs rpx integration tests (Python 3, stdlib only) against the real rpx binary.
#   integration_test.sh [routing_test.py ...]     (no argument: every *_test.py)
# Under `bazel test` the binaries and configs come from the runfiles tree; by hand, set RPX_BIN
# (default: <repo>/bazel-bin/source/exe/rpx) and, for xds_test.py, XDS_SERVER_BIN (default:
# <repo>/bazel-bin/tools/xds_server/xds_server).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
script_dir=""
runfiles=""
for base in "${TEST_SRCDIR:-}" "${RUNFILES_DIR:-}" "${BASH_SOURCE[0]}.runfiles" "$0.runfiles"; do
  [[ -n "$base" ]] || continue
  for ws in rpx _main __main__; do
    if [[ -f "$base/$ws/test/integration/run_all.py" ]]; then
      runfiles="$base/$ws"
      break 2
    fi
  done
done

if [[ -n "$runfiles" ]]; then
  script_dir="$runfiles/test/integration"
  if [[ -z "${RPX_BIN:-}" && -x "$runfiles/source/exe/rpx" ]]; then
    export RPX_BIN="$runfiles/source/exe/rpx"
  fi
  if [[ -z "${RPX_QUICKSTART_CONFIG:-}" && -f "$runfiles/configs/quickstart.yaml" ]]; then
    export RPX_QUICKSTART_CONFIG="$runfiles/configs/quickstart.yaml"
  fi
  if [[ -z "${XDS_SERVER_BIN:-}" && -x "$runfiles/tools/xds_server/xds_server" ]]; then
    export XDS_SERVER_BIN="$runfiles/tools/xds_server/xds_server"
  fi
  if [[ -z "${RPXCTL_BIN:-}" && -x "$runfiles/tools/rpxctl/rpxctl" ]]; then
    export RPXCTL_BIN="$runfiles/tools/rpxctl/rpxctl"
  fi
else
  script_dir="$here"
  repo="$(cd "$here/../.." && pwd)"
  export RPX_BIN="${RPX_BIN:-$repo/bazel-bin/source/exe/rpx}"
  export RPX_QUICKSTART_CONFIG="${RPX_QUICKSTART_CONFIG:-$repo/configs/quickstart.yaml}"
  export XDS_SERVER_BIN="${XDS_SERVER_BIN:-$repo/bazel-bin/tools/xds_server/xds_server}"
  export RPXCTL_BIN="${RPXCTL_BIN:-$repo/bazel-bin/tools/rpxctl/rpxctl}"
fi

if [[ -z "${RPX_BIN:-}" || ! -x "$RPX_BIN" ]]; then
  echo "integration_test.sh: cannot find the rpx binary (set RPX_BIN)" >&2
  exit 2
fi
command -v curl >/dev/null || { echo "integration_test.sh: curl is required" >&2; exit 2; }

exec /usr/bin/python3 "$script_dir/run_all.py" "$@"
