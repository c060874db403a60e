#!/usr/bin/env bash
# Runs every benchmark under bench/ briefly; figures are reported in bench/RESULTS.md by hand,
# with the command that produced them.
set -euo pipefail
build=${1:-build}
for b in "${build}"/bench/bench_*; do
  echo "== $(basename "$b")"
  "$b" --benchmark_min_time=${BENCH_MIN_TIME:-0.2}
done
if [ -x "${build}/bin/libai-actor" ]; then echo "== run_pipeline_bench.py"; python3 "$(dirname "$0")/../bench/run_pipeline_bench.py" --build "${build}" --quick; fi
