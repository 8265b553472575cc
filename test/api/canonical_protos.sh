#!/usr/bin/env bash
# Writes to $1 a descriptor set (with imports) of Envoy's canonical protos for every file in
# api/PROTOS.txt, as shipped by the npm package @grpc/grpc-js-xds under deps/ (fetched once,
# cached in ~/.cache/rpx). Used by the API check and by tests that parse rpx's output with the
# canonical messages.
set -euo pipefail
OUT="$1"
VERSION=1.14.1
ROOT="${TEST_SRCDIR:-}/rpx"
[ -d "$ROOT/api" ] || ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CACHE_ROOT="${RPX_CACHE:-${HOME:-/tmp}/.cache/rpx}"
mkdir -p "$CACHE_ROOT" 2>/dev/null && [ -w "$CACHE_ROOT" ] || CACHE_ROOT="${TEST_TMPDIR:-/tmp}"
CACHE="$CACHE_ROOT/grpc-js-xds-$VERSION"
command -v npm >/dev/null || { echo "npm is required (the machine's Node.js npm) to fetch the canonical protos" >&2; exit 1; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

if [ ! -d "$CACHE/package/deps/envoy-api" ]; then
  mkdir -p "$CACHE"
  (cd "$CACHE" && npm pack --silent "@grpc/grpc-js-xds@$VERSION" >/dev/null && tar xzf grpc-grpc-js-xds-$VERSION.tgz)
fi
DEPS="$CACHE/package/deps"

# The package's validate.proto predates StringRules.ignore_empty, which the envoy protos use in
# option annotations; add it (annotations do not affect the messages compared here).
mkdir -p "$WORK/pgv/validate"
/usr/bin/python3 - "$DEPS/protoc-gen-validate/validate/validate.proto" "$WORK/pgv/validate/validate.proto" <<'PY'
import sys
s = open(sys.argv[1]).read()
if "ignore_empty" not in s[s.index("message StringRules {"):s.index("message BytesRules {")]:
    j = s.index("{", s.index("message StringRules {")) + 1
    s = s[:j] + "\n  optional bool ignore_empty = 9999;\n" + s[j:]
open(sys.argv[2], "w").write(s)
PY

mapfile -t PROTOS < <(grep -v '^\s*$' "$ROOT/api/PROTOS.txt")
protoc -I"$WORK/pgv" -I"$DEPS/envoy-api" -I"$DEPS/xds" -I"$DEPS/googleapis" \
  -I"$DEPS/protoc-gen-validate" --include_imports --descriptor_set_out="$OUT" \
  "${PROTOS[@]}"
