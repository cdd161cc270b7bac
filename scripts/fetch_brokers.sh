#!/usr/bin/env bash
# Fetch (once) and unpack the broker distributions the local cluster harness runs, into the
# clustermq cache ($CLUSTERMQ_CACHE, else <repo>/.cache/clustermq). Useful to warm a CI cache;
# `clustermq cluster up` does the same on demand. Needs Maven (mvn) and network access to
# Maven Central unless the artifact is already in ~/.m2.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-$repo/.venv/bin/python}"
[ -x "$python" ] || python=python3
flavors=("$@"); [ ${#flavors[@]} -gt 0 ] || flavors=(classic artemis)
for flavor in "${flavors[@]}"; do
  PYTHONPATH="$repo/connector${PYTHONPATH:+:$PYTHONPATH}" "$python" -c \
    'import sys; from clustermq.devtools.localcluster.fetch import ensure_distribution as e; print(e(sys.argv[1], progress=print))' \
    "$flavor"
done
