#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# CI smoke test for the benchmark harness: runs every workload for every
# system once at tiny sizes (bench/run.sh --quick --runs 1), so a change
# that breaks a workload program, an invariant or the aggregation fails
# here. It measures nothing worth reading: results go to
# bench/results/quick/ and docs/ is not touched.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
if ! bash ./run.sh --quick --runs 1 "$@"; then
    echo "bench smoke: FAILED" >&2
    exit 1
fi
echo "bench smoke: ok"
