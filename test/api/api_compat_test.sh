#!/usr/bin/env bash
# Checks that every message and field in api/ matches Envoy's canonical protos (as shipped by the
# npm package @grpc/grpc-js-xds under deps/), so real control planes can drive rpx.
set -euo pipefail
ROOT="${TEST_SRCDIR:-}/rpx"
[ -d "$ROOT/api" ] || ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

bash "$ROOT/test/api/canonical_protos.sh" "$WORK/canonical.pb"
mapfile -t PROTOS < <(grep -v '^\s*$' "$ROOT/api/PROTOS.txt")
(cd "$ROOT/api" && protoc -I. -I/usr/include --include_imports \
  --descriptor_set_out="$WORK/mine.pb" "${PROTOS[@]}")
/usr/bin/python3 "$ROOT/test/api/compare_descriptors.py" "$WORK/canonical.pb" "$WORK/mine.pb"
