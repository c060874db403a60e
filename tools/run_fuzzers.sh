#!/usr/bin/env bash
# Builds the checkpoint fuzz targets with libFuzzer + ASan + UBSan and runs each for a bounded
# time, seeded with the committed fixtures. Not part of the CMake build (it needs clang).
#
#   tools/run_fuzzers.sh                   # 20 s per target
#   FUZZ_SECONDS=300 tools/run_fuzzers.sh  # longer
#   FUZZ_TARGETS=fuzz_torch_zip tools/run_fuzzers.sh
#
# Output goes to ${FUZZ_OUT:-build-fuzz}/: the binaries, <target>.log, and any crash-* inputs.
# A finding exits non-zero; replay it with build-fuzz/<target> build-fuzz/crash-....
set -euo pipefail
cd "$(dirname "$0")/.."

CXX=${CXX:-clang++}
OUT=${FUZZ_OUT:-build-fuzz}
SECONDS_PER_TARGET=${FUZZ_SECONDS:-20}
TARGETS=${FUZZ_TARGETS:-fuzz_safetensors fuzz_torch_zip}
mkdir -p "$OUT"

# The loaders' sources and the parts of the runtime they use (tensor, dtype, errors).
SOURCES=(runtime/checkpoint/*.cc runtime/error.cc runtime/tensor.cc runtime/dtype.cc
         runtime/allocator.cc runtime/device.cc runtime/device_copy.cc runtime/autograd.cc)
SANITIZE=address,undefined
FLAGS=(-std=c++20 -O1 -g -fno-sanitize-recover=undefined -I. -Wall -Wextra)

# The shared sources are compiled once (instrumented, without libFuzzer's main) for all targets.
mkdir -p "$OUT/obj"
OBJECTS=()
for src in "${SOURCES[@]}"; do
  obj="$OUT/obj/$(echo "${src%.cc}" | tr / _).o"
  if [[ ! -f "$obj" || "$src" -nt "$obj" ]]; then
    echo "== compiling $src"
    "$CXX" "${FLAGS[@]}" -fsanitize=fuzzer-no-link,$SANITIZE -c "$src" -o "$obj"
  fi
  OBJECTS+=("$obj")
done

# Seeds: every fixture file (both targets get all of them: a zip is a fine bad safetensors).
CORPUS="$OUT/seeds"
rm -rf "$CORPUS" && mkdir -p "$CORPUS"
find tests/data/checkpoint -type f | while read -r f; do cp "$f" "$CORPUS/$(echo "$f" | tr / _)"; done

status=0
for target in $TARGETS; do
  echo "== building $target"
  "$CXX" "${FLAGS[@]}" -fsanitize=fuzzer,$SANITIZE "tests/fuzz/$target.cc" "${OBJECTS[@]}" \
    -o "$OUT/$target" -lpthread
  work="$OUT/$target.corpus"
  mkdir -p "$work"
  echo "== running $target for ${SECONDS_PER_TARGET}s"
  if ! "$OUT/$target" "$work" "$CORPUS" -max_total_time="$SECONDS_PER_TARGET" -max_len=16384 \
      -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$OUT/" \
      >"$OUT/$target.log" 2>&1; then
    echo "!! $target found a problem; see $OUT/$target.log"
    status=1
  fi
  grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|#[0-9]+ *DONE)" "$OUT/$target.log" || true
  tail -n 3 "$OUT/$target.log"
done
exit $status
