#!/usr/bin/env bash
# Builds the fuzz targets (checkpoint loaders, tokenizer loader, indexed dataset reader) with libFuzzer + ASan + UBSan
# and runs each for a bounded time, seeded with the committed fixtures. Not part of the CMake
# build (it needs clang).
#
#   tools/run_fuzzers.sh                   # 20 s per target
#   FUZZ_SECONDS=300 tools/run_fuzzers.sh  # longer
#   FUZZ_TARGETS=fuzz_tokenizer tools/run_fuzzers.sh
#
# Output goes to ${FUZZ_OUT:-build-fuzz}/: the binaries, <target>.log, and any crash-* inputs.
# A finding exits non-zero; replay it with build-fuzz/<target> build-fuzz/crash-....
set -euo pipefail
cd "$(dirname "$0")/.."

CXX=${CXX:-clang++}
OUT=${FUZZ_OUT:-build-fuzz}
SECONDS_PER_TARGET=${FUZZ_SECONDS:-20}
TARGETS=${FUZZ_TARGETS:-fuzz_safetensors fuzz_torch_zip fuzz_tokenizer fuzz_indexed_dataset}
mkdir -p "$OUT"

# The loaders' sources and the parts of the runtime they use (tensor, dtype, errors).
CHECKPOINT_SOURCES=(runtime/checkpoint/*.cc runtime/error.cc runtime/tensor.cc runtime/dtype.cc
                    runtime/allocator.cc runtime/device.cc runtime/device_copy.cc
                    runtime/autograd.cc)
# The tokenizer library needs only the error types from the runtime, plus libsentencepiece (for
# .model files) and PCRE2 (harmless while no tokenizer pattern uses it).
TOKENIZER_SOURCES=(models/tokenizers/*.cc runtime/error.cc)
TOKENIZER_LIBS=(-lsentencepiece -lpcre2-8)
# The indexed dataset reader needs only the error types.
INDEXED_SOURCES=(train/data/indexed_dataset.cc runtime/error.cc)
SANITIZE=address,undefined
FLAGS=(-std=c++20 -O1 -g -fno-sanitize-recover=undefined -I. -Wall -Wextra)

# Each shared source is compiled once (instrumented, without libFuzzer's main) for all targets.
mkdir -p "$OUT/obj"
compile() {  # compile <source>...: sets OBJECTS
  OBJECTS=()
  for src in "$@"; do
    obj="$OUT/obj/$(echo "${src%.cc}" | tr / _).o"
    if [[ ! -f "$obj" || "$src" -nt "$obj" ]]; then
      echo "== compiling $src"
      "$CXX" "${FLAGS[@]}" -fsanitize=fuzzer-no-link,$SANITIZE -c "$src" -o "$obj"
    fi
    OBJECTS+=("$obj")
  done
}

# Seeds per kind, copied flat: every checkpoint fixture for the checkpoint loaders (a zip is a
# fine bad safetensors), every tokenizer.json under 64 KB and .model file for the tokenizer.
seed() {  # seed <folder> <find arguments...>
  local folder="$OUT/$1"
  shift
  rm -rf "$folder" && mkdir -p "$folder"
  find "$@" | while read -r f; do cp "$f" "$folder/$(echo "$f" | tr / _)"; done
}
seed seeds tests/data/checkpoint -type f
seed seeds_tokenizer tests/data/tokenizers tests/data/models \
  \( -name tokenizer.json -size -64k \) -o -name '*.model'
# Indexed dataset seeds: each fixture pair as the target reads it (u32 .idx size, .idx, .bin).
rm -rf "$OUT/seeds_indexed" && mkdir -p "$OUT/seeds_indexed"
le32() {  # the 4 little-endian bytes of $1
  local n=$1
  printf "$(printf '\\%03o\\%03o\\%03o\\%03o' $((n & 255)) $(((n >> 8) & 255)) \
    $(((n >> 16) & 255)) $(((n >> 24) & 255)))"
}
for idx in tests/data/indexed/*.idx; do
  { le32 "$(stat -c %s "$idx")"; cat "$idx" "${idx%.idx}.bin"; } >"$OUT/seeds_indexed/$(basename "${idx%.idx}")"
done

status=0
for target in $TARGETS; do
  if [[ $target == fuzz_tokenizer ]]; then
    compile "${TOKENIZER_SOURCES[@]}"
    libs=("${TOKENIZER_LIBS[@]}") corpus="$OUT/seeds_tokenizer" max_len=65536
  elif [[ $target == fuzz_indexed_dataset ]]; then
    compile "${INDEXED_SOURCES[@]}"
    libs=() corpus="$OUT/seeds_indexed" max_len=4096
  else
    compile "${CHECKPOINT_SOURCES[@]}"
    libs=() corpus="$OUT/seeds" max_len=16384
  fi
  echo "== building $target"
  "$CXX" "${FLAGS[@]}" -fsanitize=fuzzer,$SANITIZE "tests/fuzz/$target.cc" "${OBJECTS[@]}" \
    -o "$OUT/$target" "${libs[@]}" -lpthread
  work="$OUT/$target.corpus"
  mkdir -p "$work"
  echo "== running $target for ${SECONDS_PER_TARGET}s"
  if ! "$OUT/$target" "$work" "$corpus" -max_total_time="$SECONDS_PER_TARGET" \
      -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$OUT/" >"$OUT/$target.log" 2>&1; then
    echo "!! $target found a problem; see $OUT/$target.log"
    status=1
  fi
  grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|#[0-9]+ *DONE)" "$OUT/$target.log" || true
  tail -n 3 "$OUT/$target.log"
done
exit $status
