#!/usr/bin/env bash
# Same-host communication side by side: the shm and ucx communicators (all-reduce, all-gather,
# send, and the shm message plane) over 2 and 4 processes from bench_comm_bus_bandwidth, and
# ucx_perftest's tag bandwidth over UCX's own shared-memory transports (posix, cma) for the
# same sizes, in one run. Prints the date, `uptime` and the tables.
#
#   bench/run_comm_bench.sh [BUILD_DIR] [MIN_BYTES] [MAX_BYTES]   # defaults: build 4 MB 256 MB
set -euo pipefail
build=${1:-build}
min=${2:-4194304}
max=${3:-268435456}
bench="$build/bench/bench_comm_bus_bandwidth"
[[ -x "$bench" ]] || { echo "no $bench: cmake --build $build --target bench_comm_bus_bandwidth" >&2; exit 1; }

echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "uptime: $(uptime)"
echo "cpu: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p')"
for backend in shm ucx; do
  "$bench" --backend "$backend" --ranks 2,4 --min-bytes "$min" --max-bytes "$max"
done

if command -v ucx_perftest > /dev/null; then
  echo
  echo "ucx_perftest -t tag_bw, UCX_TLS=posix,cma,self (one way, 2 processes)"
  echo "| bytes | MB/s |"
  echo "|---:|---:|"
  port=$((20000 + RANDOM % 20000))
  for ((bytes = min; bytes <= max; bytes *= 4)); do
    iterations=$(( (1 << 30) / bytes + 2 ))
    UCX_TLS=posix,cma,self ucx_perftest -p "$port" > /dev/null 2>&1 &
    server=$!
    sleep 0.3
    mbs=$(UCX_TLS=posix,cma,self timeout 120 ucx_perftest 127.0.0.1 -p "$port" -t tag_bw \
            -s "$bytes" -n "$iterations" -w 2 -f 2>/dev/null | awk '$1 ~ /^[0-9]+$/ && NF == 8 {v = $6} END {print v}')
    wait "$server" 2>/dev/null || true
    echo "| $((bytes >> 20)) MB | ${mbs:-failed} |"
  done
fi
echo "uptime after: $(uptime)"
