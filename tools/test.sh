#!/usr/bin/env bash
# Runs the whole rpx test suite (unit and integration tests) with Bazel and prints one plain
# "N passed, N failed" line counted from the test cases in Bazel's test.xml files.
# Usage: bash tools/test.sh [extra bazel test args, e.g. --config=asan]
set -uo pipefail
cd "$(dirname "$0")/.."
ulimit -n 20000 2>/dev/null || true
bazel test //... "$@" 2>&1 | tee /tmp/rpx-test-$$.log | grep -vE '^(Loading|Analyzing|\[[0-9,]+ / [0-9,]+\])'
rc=${PIPESTATUS[0]}
python3 tools/count_tests.py "$(bazel info bazel-testlogs 2>/dev/null)" 
count_rc=$?
rm -f /tmp/rpx-test-$$.log
if [ "$rc" -ne 0 ] || [ "$count_rc" -ne 0 ]; then exit 1; fi
exit 0
