#!/usr/bin/env bash
# Real fuzzing, outside Bazel (a clang toolchain there would thrash the Bazel cache): builds one
# fuzz target of test/fuzz/ with clang, libFuzzer, ASan and UBSan, then runs it for a while on a
# copy of its seed corpus. See test/fuzz/README.md.
#
# Usage: tools/fuzz.sh TARGET [SECONDS] [--merge] [--build-only] [-- LIBFUZZER_FLAGS...]
#   TARGET     http1_request_fuzz | http1_response_fuzz | route_matcher_fuzz | tls_client_hello_fuzz
#   SECONDS    how long to fuzz (default 60)
#   --merge    afterwards, add the inputs that found new coverage to test/fuzz/corpus/TARGET/
#   --build-only  build /tmp/rpx-fuzz/bin/TARGET and stop
#   Environment: RPX_FUZZ_OUT (default /tmp/rpx-fuzz) holds objects, binaries, corpus copies,
#   logs and crash artifacts.
# Needs clang (Debian's clang package; installed on demand when run as root) and Bazel: the sources
# and flags come from `bazel query` over //test/fuzz:TARGET_replay, and generated sources (the API
# protos) are built with `bazel build` first (each waits for any other Bazel command to end).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

usage() { sed -n '6,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
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

# What to compile comes from Bazel, so that it cannot drift from the BUILD files: every cc_library
# that the target's replay test (//test/fuzz:TARGET_replay) depends on, with its sources, defines,
# include directories and link options (a system library's are the pkg-config output Bazel
# recorded). replay_main is left out: libFuzzer has its own main. Sources are sorted into project
# code and external C sources (instrumented) and generated code (protobuf: built by Bazel first,
# compiled here uninstrumented, as it is not what is being fuzzed).
[ -f "test/fuzz/$TARGET.cc" ] || { echo "fuzz: unknown target '$TARGET'" >&2; usage; }
mkdir -p "$OUT"
PLAN=$OUT/$TARGET.plan
if ! bazel query --noimplicit_deps --output=xml \
    "kind(cc_library, deps(//test/fuzz:${TARGET}_replay)) except //test/fuzz:replay_main" \
    >"$OUT/$TARGET.query.xml" 2>"$OUT/$TARGET.query.log"; then
  cat "$OUT/$TARGET.query.log" >&2
  echo "fuzz: bazel query for //test/fuzz:${TARGET}_replay failed" >&2
  exit 1
fi
OUTPUT_BASE=$(bazel info output_base 2>/dev/null)  # external repositories live under it
python3 - "$OUT/$TARGET.query.xml" "$ROOT" "$OUTPUT_BASE" >"$PLAN" <<'EOF'
# Prints the build plan, one tab-separated item a line:
#   cflag FLAG | lib FLAG | build LABEL | src KIND PATH [RULE_COPTS...]  (KIND: cc, c or gen)
import os, sys
import xml.etree.ElementTree as ET

xml, root, output_base = sys.argv[1:4]
seen = set()


def emit(*fields):
    line = "\t".join(fields)
    if line not in seen:
        seen.add(line)
        print(line)


def attr(rule, name):
    for child in rule:
        if child.get("name") == name:
            return [v.get("value") for v in child]
    return []


def split(label):
    repo, _, rest = label.partition("//")
    pkg, _, name = rest.partition(":")
    return repo.lstrip("@"), pkg, name


def package_dir(repo, pkg):
    base = os.path.join(output_base, "external", repo) if repo else root
    return os.path.join(base, pkg) if pkg else base


for rule in ET.parse(xml).getroot().findall("rule"):
    repo, pkg, _ = split(rule.get("name"))
    srcs = [l for l in attr(rule, "srcs") if l.endswith((".cc", ".c"))]
    # -O levels are the fuzz build's choice; warnings and ISA flags are the rule's. (A select() in
    # copts comes out of bazel query as all its branches: here llhttp's -msse4.2, on x86-64.)
    copts = [c for c in attr(rule, "copts") if not c.startswith("-O")]
    for d in attr(rule, "defines"):
        emit("cflag", "-D" + d)
    for inc in attr(rule, "includes"):
        emit("cflag", "-I" + os.path.normpath(os.path.join(package_dir(repo, pkg), inc)))
        if not repo:  # generated headers live under bazel-bin
            emit("cflag", "-I" + os.path.normpath(os.path.join(root, "bazel-bin", pkg, inc)))
    if not srcs:
        for c in copts:  # a system library: its pkg-config --cflags
            emit("cflag", c)
    # Not deduplicated: a rule's options can be a sequence (-Wl,--push-state ... --pop-state).
    for l in attr(rule, "linkopts"):
        print("lib\t" + l)
    for label in srcs:
        r, p, name = split(label)
        path = os.path.join(package_dir(r, p), name)
        if not r and not os.path.exists(path):
            emit("build", label)
            emit("src", "gen", os.path.join(root, "bazel-bin", p, name), *copts)
        else:
            emit("src", "c" if name.endswith(".c") else "cc", path, *copts)
EOF
CFLAGS_DERIVED=()
LIBS=()
BUILD_LABELS=()
SRC_LINES=()
while IFS=$'\t' read -r kind rest; do
  case "$kind" in
    cflag) CFLAGS_DERIVED+=("$rest") ;;
    lib) LIBS+=("$rest") ;;
    build) BUILD_LABELS+=("$rest") ;;
    src) SRC_LINES+=("$rest") ;;
  esac
done <"$PLAN"
if [ ${#BUILD_LABELS[@]} -gt 0 ]; then
  echo "fuzz: bazel build of ${#BUILD_LABELS[@]} generated sources" >&2
  bazel build "${BUILD_LABELS[@]}" >"$OUT/$TARGET.bazel-build.log" 2>&1 || {
    tail -20 "$OUT/$TARGET.bazel-build.log" >&2
    echo "fuzz: bazel build of the generated sources failed" >&2
    exit 1
  }
fi

SAN=(-fsanitize=address,undefined -fno-sanitize-recover=undefined)
CXXFLAGS=(-std=c++17 -g -O1 -fno-omit-frame-pointer -I"$ROOT" -I"$ROOT/bazel-bin"
          "${CFLAGS_DERIVED[@]}")
# Targets' flags differ (their dependencies' defines and includes): each set of flags has its own
# objects, so that building one target does not make another's stale.
OBJ=$OUT/obj/$(printf '%s\n' "$CXX" "$CC" "${CXXFLAGS[@]}" | md5sum | cut -c1-10)
mkdir -p "$OBJ"

# Compiles $2 into $1 unless the object is newer than the source and every header it included,
# and was compiled with the same command (a target's defines can differ from another's).
compile() {
  local obj=$1 src=$2
  shift 2
  local dep=${obj%.o}.d cmd="$* -c $src"
  if [ -f "$obj" ] && [ -f "$dep" ] && [ "$(cat "$obj.cmd" 2>/dev/null)" = "$cmd" ]; then
    local stale=0 f
    for f in $(sed -e 's/\\$//' -e 's/^[^:]*://' "$dep"); do
      if [ "$f" -nt "$obj" ]; then stale=1; break; fi
    done
    [ $stale = 1 ] || return 0
  fi
  mkdir -p "$(dirname "$obj")"
  echo "fuzz: compiling ${src#"$ROOT"/}" >&2
  "$@" -MMD -MF "$dep" -c "$src" -o "$obj"
  printf '%s' "$cmd" >"$obj.cmd"
}

LIB_OBJS=()
pids=()
jobs_max=$(nproc)
run_bg() {
  "$@" &
  pids+=($!)
  if [ ${#pids[@]} -ge "$jobs_max" ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
}
# Objects go under obj/<where they came from>/, keyed by their path.
object_for() {
  local p=$1
  case "$p" in
    "$ROOT"/bazel-bin/*) p=gen/${p#"$ROOT"/bazel-bin/} ;;
    "$ROOT"/*) p=fuzz/${p#"$ROOT"/} ;;
    *) p=external/${p#*/external/} ;;
  esac
  echo "$OBJ/${p%.*}.o"
}
for line in "${SRC_LINES[@]}"; do
  IFS=$'\t' read -r -a f <<<"$line"
  kind=${f[0]} src=${f[1]} copts=("${f[@]:2}")
  o=$(object_for "$src")
  LIB_OBJS+=("$o")
  case "$kind" in
    cc) run_bg compile "$o" "$src" "$CXX" "${CXXFLAGS[@]}" "${copts[@]}" "${SAN[@]}" \
          -fsanitize=fuzzer-no-link ;;
    c) run_bg compile "$o" "$src" "$CC" -g -O1 "${CFLAGS_DERIVED[@]}" "${copts[@]}" "${SAN[@]}" \
         -fsanitize=fuzzer-no-link ;;
    gen) run_bg compile "$o" "$src" "$CXX" -std=c++17 -g -O1 -w "${CXXFLAGS[@]}" "${copts[@]}" ;;
  esac
done
MAIN_OBJ=$OBJ/fuzz/test/fuzz/$TARGET.o
run_bg compile "$MAIN_OBJ" "$ROOT/test/fuzz/$TARGET.cc" "$CXX" "${CXXFLAGS[@]}" "${SAN[@]}" \
  -fsanitize=fuzzer-no-link
for p in "${pids[@]}"; do wait "$p"; done

# The dependencies go into an archive, as Bazel links them: only the objects the target needs are
# linked, so a library source the target never reaches needs none of its link options.
ARCHIVE=$OBJ/$TARGET.deps.a
rm -f "$ARCHIVE"
ar rcs "$ARCHIVE" "${LIB_OBJS[@]}"
BIN=$OUT/bin/$TARGET
mkdir -p "$OUT/bin"
echo "fuzz: linking $BIN" >&2
"$CXX" "${SAN[@]}" -fsanitize=fuzzer "$MAIN_OBJ" "$ARCHIVE" "${LIBS[@]}" -lpthread -o "$BIN"
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
