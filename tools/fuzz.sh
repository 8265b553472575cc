#!/usr/bin/env bash
# Real fuzzing, outside Bazel (a clang toolchain there would thrash the Bazel cache): builds one
# fuzz target of test/fuzz/ with clang, libFuzzer, ASan and UBSan, then runs it for a while on a
# copy of its seed corpus. See test/fuzz/README.md.
#
# Usage: tools/fuzz.sh TARGET [SECONDS] [--merge] [--build-only] [-- LIBFUZZER_FLAGS...]
#   TARGET     http1_request_fuzz | http1_response_fuzz | route_matcher_fuzz
#   SECONDS    how long to fuzz (default 60)
#   --merge    afterwards, add the inputs that found new coverage to test/fuzz/corpus/TARGET/
#   Environment: RPX_FUZZ_OUT (default /tmp/rpx-fuzz) holds objects, binaries, corpus copies,
#   logs and crash artifacts.
# Needs clang (Debian's clang package; installed on demand when run as root) and, for
# route_matcher_fuzz, the generated API headers: run `bazel build //api:envoy_api_gen` first.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

usage() { sed -n '6,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[ $# -ge 1 ] || usage
TARGET=$1
shift
SECONDS_TO_RUN=60
MERGE=0
BUILD_ONLY=0
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --merge) MERGE=1 ;;
    --build-only) BUILD_ONLY=1 ;;
    --) shift; EXTRA=("$@"); break ;;
    ''|*[!0-9]*) usage ;;
    *) SECONDS_TO_RUN=$1 ;;
  esac
  shift
done

OUT=${RPX_FUZZ_OUT:-/tmp/rpx-fuzz}
CXX=${CXX_FUZZ:-clang++}
CC=${CC_FUZZ:-clang}
if ! command -v "$CXX" >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    echo "fuzz: installing clang" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends clang >/dev/null
  else
    echo "fuzz: clang++ not found: apt-get install clang" >&2
    exit 1
  fi
fi

COMMON_SRCS=(source/common/buffer.cc source/common/logger.cc source/http/headers.cc)
LLHTTP_SRCS=(/usr/share/llhttp/api.c /usr/share/llhttp/http.c /usr/share/llhttp/llhttp.c)
PROTO_SRCS=()
case "$TARGET" in
  http1_request_fuzz)
    SRCS=("${COMMON_SRCS[@]}" source/http/http1_parser.cc source/http/server_connection.cc
          source/network/connection.cc source/network/address.cc source/event/dispatcher.cc
          source/event/io_ring.cc)
    PKGS=(absl_strings absl_str_format absl_status absl_statusor)
    ;;
  http1_response_fuzz)
    SRCS=("${COMMON_SRCS[@]}" source/http/http1_parser.cc)
    PKGS=(absl_strings absl_str_format)
    ;;
  route_matcher_fuzz)
    SRCS=("${COMMON_SRCS[@]}" source/router/route_table.cc)
    LLHTTP_SRCS=()
    PKGS=(protobuf re2 absl_strings absl_str_format absl_status absl_statusor absl_flat_hash_map)
    GEN=bazel-bin/api
    if [ ! -f "$GEN/envoy/config/route/v3/route.pb.h" ]; then
      echo "fuzz: generated API headers missing: run 'bazel build //api:envoy_api_gen' first" >&2
      exit 1
    fi
    # The generated code of route.proto and everything it imports (google/protobuf/* is in
    # libprotobuf).
    todo=(envoy/config/route/v3/route.proto)
    declare -A seen=()
    while [ ${#todo[@]} -gt 0 ]; do
      p=${todo[0]}
      todo=("${todo[@]:1}")
      [ -z "${seen[$p]:-}" ] || continue
      seen[$p]=1
      PROTO_SRCS+=("$GEN/${p%.proto}.pb.cc")
      for imp in $(sed -n 's/^import "\(.*\.proto\)";/\1/p' "api/$p"); do
        case "$imp" in google/protobuf/*) ;; *) todo+=("$imp") ;; esac
      done
    done
    ;;
  *) echo "fuzz: unknown target '$TARGET'" >&2; usage ;;
esac

PKG_CFLAGS=$(pkg-config --cflags "${PKGS[@]}")
PKG_LIBS=$(pkg-config --libs "${PKGS[@]}")
SAN=(-fsanitize=address,undefined -fno-sanitize-recover=undefined)
CXXFLAGS=(-std=c++17 -g -O1 -fno-omit-frame-pointer -I"$ROOT" -I"$ROOT/bazel-bin/api"
          -I/usr/share/include/llhttp $PKG_CFLAGS)
OBJ=$OUT/obj
mkdir -p "$OBJ"

# Compiles $2 into $1 unless the object is newer than the source and every header it included.
compile() {
  local obj=$1 src=$2
  shift 2
  local dep=${obj%.o}.d
  if [ -f "$obj" ] && [ -f "$dep" ]; then
    local stale=0 f
    for f in $(sed -e 's/\\$//' -e 's/^[^:]*://' "$dep"); do
      if [ "$f" -nt "$obj" ]; then stale=1; break; fi
    done
    [ $stale = 1 ] || return 0
  fi
  mkdir -p "$(dirname "$obj")"
  echo "fuzz: compiling $src" >&2
  "$@" -MMD -MF "$dep" -c "$src" -o "$obj"
}

OBJS=()
pids=()
jobs_max=$(nproc)
run_bg() {
  "$@" &
  pids+=($!)
  if [ ${#pids[@]} -ge "$jobs_max" ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
}
for s in "${SRCS[@]}" "test/fuzz/$TARGET.cc"; do
  o=$OBJ/fuzz/${s%.cc}.o
  OBJS+=("$o")
  run_bg compile "$o" "$s" "$CXX" "${CXXFLAGS[@]}" "${SAN[@]}" -fsanitize=fuzzer-no-link
done
for s in "${LLHTTP_SRCS[@]}"; do
  o=$OBJ/llhttp/$(basename "${s%.c}").o
  OBJS+=("$o")
  run_bg compile "$o" "$s" "$CC" -g -O1 -I/usr/share/include/llhttp "${SAN[@]}" \
    -fsanitize=fuzzer-no-link
done
# Generated protobuf code: not instrumented (it is not what is being fuzzed), built once.
for s in "${PROTO_SRCS[@]}"; do
  o=$OBJ/proto/${s#bazel-bin/api/}
  o=${o%.cc}.o
  OBJS+=("$o")
  run_bg compile "$o" "$s" "$CXX" -std=c++17 -g -O1 -w -I"$ROOT/bazel-bin/api" $PKG_CFLAGS
done
for p in "${pids[@]}"; do wait "$p"; done

BIN=$OUT/bin/$TARGET
mkdir -p "$OUT/bin"
echo "fuzz: linking $BIN" >&2
"$CXX" "${SAN[@]}" -fsanitize=fuzzer "${OBJS[@]}" $PKG_LIBS -lpthread -o "$BIN"
[ $BUILD_ONLY = 0 ] || exit 0

# Fuzz a copy of the corpus: libFuzzer writes what it finds into the first directory.
SEED=$ROOT/test/fuzz/corpus/$TARGET
WORK=$OUT/corpus/$TARGET
ARTIFACTS=$OUT/artifacts/$TARGET/
rm -rf "$WORK"
mkdir -p "$WORK" "$ARTIFACTS"
cp -r "$SEED/." "$WORK/"
DICT=()
if [ -f "test/fuzz/$TARGET.dict" ]; then DICT=(-dict="$ROOT/test/fuzz/$TARGET.dict"); fi
LOG=$OUT/$TARGET.log
echo "fuzz: running $TARGET for ${SECONDS_TO_RUN}s on $WORK (log: $LOG)" >&2
set +e
"$BIN" -max_total_time="$SECONDS_TO_RUN" -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$ARTIFACTS" "${DICT[@]}" "${EXTRA[@]}" "$WORK" >"$LOG" 2>&1
rc=$?
set -e
grep -E '^#[0-9]+.*(INITED|DONE)|^stat::' "$LOG" || true
echo "fuzz: corpus now $(ls "$WORK" | wc -l) inputs (seed: $(ls "$SEED" | wc -l))" >&2
if [ $rc != 0 ]; then
  grep -E -A3 'invariant failed|rpx wrote|ERROR: |SUMMARY|Test unit written' "$LOG" | head -40 >&2
  echo "fuzz: $TARGET failed (exit $rc); crash inputs in $ARTIFACTS, log in $LOG" >&2
  exit $rc
fi
if [ $MERGE = 1 ]; then
  echo "fuzz: merging inputs with new coverage into $SEED" >&2
  "$BIN" -merge=1 -rss_limit_mb=2048 "$SEED" "$WORK" 2>&1 | tail -n 3
fi
