#!/usr/bin/env bash
# Fetch (once) and unpack the broker distributions the local cluster harness runs, into the
# clustermq cache ($CLUSTERMQ_CACHE, else <repo>/.cache/clustermq), without a venv: useful to warm
# a CI cache. The same as `clustermq cluster fetch --flavor F ...` (what `make setup` runs);
# `clustermq cluster up` never downloads. Needs Maven (mvn) and network access to Maven Central
# unless the artifact is already in ~/.m2.
# Usage: scripts/fetch_brokers.sh [classic] [artemis]   (default: both)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-$repo/.venv/bin/python}"
[ -x "$python" ] || python=python3
args=()
for flavor in "$@"; do args+=(--flavor "$flavor"); done
PYTHONPATH="$repo/connector${PYTHONPATH:+:$PYTHONPATH}" exec "$python" -c \
  'import sys; from clustermq.devtools.localcluster.fetch import main; sys.exit(main(sys.argv[1:]))' "${args[@]}"
