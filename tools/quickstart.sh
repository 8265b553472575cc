#!/usr/bin/env bash
# Installs what rpx needs (Debian 12), builds it and runs it on the bundled quickstart bootstrap.
# Then, from another shell:  curl http://127.0.0.1:10000/   and   curl http://127.0.0.1:10000/admin/stats
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bazel build //source/exe:rpx
exec ./bazel-bin/source/exe/rpx -c configs/quickstart.yaml
