#!/usr/bin/env bash
# Builds the fuzz targets with libFuzzer + ASan + UBSan and runs each for a bounded time, seeded
# with the committed fixtures and replaying the committed corpus (tests/fuzz/corpus/<target>/:
# the inputs that once found a problem, kept as regression inputs). Not part of the CMake build
# (it needs clang). The targets and what they cover are in docs/TESTING.md ("Fuzzing").
#
#   tools/run_fuzzers.sh                   # 20 s per target
#   FUZZ_SECONDS=300 tools/run_fuzzers.sh  # longer
#   FUZZ_TARGETS=fuzz_tokenizer tools/run_fuzzers.sh
#
# Output goes to ${FUZZ_OUT:-build-fuzz}/: the binaries, <target>.log, and any crash-* inputs.
# A finding exits non-zero; replay it with build-fuzz/<target> build-fuzz/crash-..., then keep
# it as tests/fuzz/corpus/<target>/<short name> once fixed.
set -euo pipefail
cd "$(dirname "$0")/.."

CXX=${CXX:-clang++}
OUT=${FUZZ_OUT:-build-fuzz}
SECONDS_PER_TARGET=${FUZZ_SECONDS:-20}
TARGETS=${FUZZ_TARGETS:-fuzz_safetensors fuzz_torch_zip fuzz_gguf fuzz_tokenizer fuzz_indexed_dataset
  fuzz_control_messages fuzz_packet_header fuzz_credits fuzz_config}
mkdir -p "$OUT"

# The loaders' sources and the parts of the runtime they use (tensor, dtype, errors).
CHECKPOINT_SOURCES=(runtime/checkpoint/*.cc runtime/error.cc runtime/tensor.cc runtime/dtype.cc
                    runtime/allocator.cc runtime/device.cc runtime/device_copy.cc
                    runtime/autograd.cc)
# The tokenizer library needs the checkpoint readers (GGUF vocabularies) and the error types
# from the runtime, plus libsentencepiece (for .model files) and PCRE2 (harmless while no
# tokenizer pattern uses it).
TOKENIZER_SOURCES=(models/tokenizers/*.cc "${CHECKPOINT_SOURCES[@]}")
TOKENIZER_LIBS=(-lsentencepiece -lpcre2-8)
# The indexed dataset reader needs only the error types.
INDEXED_SOURCES=(train/data/indexed_dataset.cc runtime/error.cc)
# The control-plane messages: the Cap'n Proto schema's generated code and the decoders.
mkdir -p "$OUT/gen"
capnp compile -oc++:"$OUT/gen" --src-prefix=. actors/wire/control.capnp
WIRE_SOURCES=(actors/wire/wire.cc "$OUT/gen/actors/wire/control.capnp.c++" runtime/error.cc
              runtime/dtype.cc)
WIRE_LIBS=(-lcapnp -lkj)
# A packet message into tensors: the decoders and the tensor runtime.
PACKET_SOURCES=(actors/packet_message.cc "${WIRE_SOURCES[@]}" runtime/tensor.cc
                runtime/allocator.cc runtime/device.cc runtime/device_copy.cc runtime/autograd.cc)
# The credit accounting is header-only; the config reader needs yaml-cpp.
CREDITS_SOURCES=(runtime/error.cc)
CONFIG_SOURCES=(runtime/config/*.cc app/*.cc runtime/error.cc)
CONFIG_LIBS=(-lyaml-cpp)
SANITIZE=address,undefined
# The config writer names the version, as the CMake build defines it.
VERSION=$(sed -n 's/^project(.* VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
FLAGS=(-std=c++20 -O1 -g -fno-sanitize-recover=undefined -I. -I"$OUT/gen" -Wall -Wextra
       -DLIBAI_VERSION="\"$VERSION\"")

# Each shared source is compiled once (instrumented, without libFuzzer's main) for all targets.
mkdir -p "$OUT/obj"
compile() {  # compile <source>...: sets OBJECTS
  OBJECTS=()
  for src in "$@"; do
    obj="$OUT/obj/$(echo "${src%.cc}" | tr / _).o"
    [[ $src == "$OUT"/gen/* ]] && obj="$OUT/obj/$(basename "$src").o"
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
seed seeds_gguf tests/data/gguf -name '*.gguf' -size -64k
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

# Control messages and packet headers: one message of every type, written by a small program
# over the encoders (tests/fuzz/write_seeds.cc), so the seeds follow the schema.
compile "${WIRE_SOURCES[@]}"
"$CXX" "${FLAGS[@]}" -fsanitize=$SANITIZE tests/fuzz/write_seeds.cc "${OBJECTS[@]}" \
  -o "$OUT/write_seeds" "${WIRE_LIBS[@]}" -lpthread
rm -rf "$OUT/seeds_control" "$OUT/seeds_packet" && mkdir -p "$OUT/seeds_control" "$OUT/seeds_packet"
"$OUT/write_seeds" "$OUT/seeds_control" "$OUT/seeds_packet"
# Configs: every committed config, and each with a few overrides after the "--8<--" line.
rm -rf "$OUT/seeds_config" && mkdir -p "$OUT/seeds_config"
find configs -name '*.yaml' | while read -r f; do
  name=$(echo "$f" | tr / _)
  cp "$f" "$OUT/seeds_config/$name"
  { cat "$f"; printf '\n--8<--\ntrain.train_iter=3\n+extra.key=[1, {a: null}]\ntrain.dist.pipeline_parallel_size=2\n'; } \
    >"$OUT/seeds_config/$name.overrides"
done
# Credits: a few event sequences (quota byte, then events); the fuzzer grows its own.
rm -rf "$OUT/seeds_credits" && mkdir -p "$OUT/seeds_credits"
printf '\004\000\000\000\000\002\006\003' >"$OUT/seeds_credits/fill_and_free"
printf '\002\000\003\377\377\377\377\002' >"$OUT/seeds_credits/hostile_credit"

status=0
for target in $TARGETS; do
  if [[ $target == fuzz_gguf ]]; then
    compile "${TOKENIZER_SOURCES[@]}"
    libs=("${TOKENIZER_LIBS[@]}") corpus="$OUT/seeds_gguf" max_len=65536
  elif [[ $target == fuzz_tokenizer ]]; then
    compile "${TOKENIZER_SOURCES[@]}"
    libs=("${TOKENIZER_LIBS[@]}") corpus="$OUT/seeds_tokenizer" max_len=65536
  elif [[ $target == fuzz_indexed_dataset ]]; then
    compile "${INDEXED_SOURCES[@]}"
    libs=() corpus="$OUT/seeds_indexed" max_len=4096
  elif [[ $target == fuzz_control_messages ]]; then
    compile "${WIRE_SOURCES[@]}"
    libs=("${WIRE_LIBS[@]}") corpus="$OUT/seeds_control" max_len=4096
  elif [[ $target == fuzz_packet_header ]]; then
    compile "${PACKET_SOURCES[@]}"
    libs=("${WIRE_LIBS[@]}") corpus="$OUT/seeds_packet" max_len=4096
  elif [[ $target == fuzz_credits ]]; then
    compile "${CREDITS_SOURCES[@]}"
    libs=() corpus="$OUT/seeds_credits" max_len=1024
  elif [[ $target == fuzz_config ]]; then
    compile "${CONFIG_SOURCES[@]}"
    libs=("${CONFIG_LIBS[@]}") corpus="$OUT/seeds_config" max_len=16384
  else
    compile "${CHECKPOINT_SOURCES[@]}"
    libs=() corpus="$OUT/seeds" max_len=16384
  fi
  # The committed regression inputs of the target are replayed first (and seed the run).
  kept=()
  [[ -d tests/fuzz/corpus/$target ]] && kept=("tests/fuzz/corpus/$target")
  echo "== building $target"
  "$CXX" "${FLAGS[@]}" -fsanitize=fuzzer,$SANITIZE "tests/fuzz/$target.cc" "${OBJECTS[@]}" \
    -o "$OUT/$target" "${libs[@]}" -lpthread
  work="$OUT/$target.corpus"
  mkdir -p "$work"
  echo "== running $target for ${SECONDS_PER_TARGET}s"
  if ! "$OUT/$target" "$work" "$corpus" "${kept[@]}" -max_total_time="$SECONDS_PER_TARGET" \
      -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$OUT/" >"$OUT/$target.log" 2>&1; then
    echo "!! $target found a problem; see $OUT/$target.log"
    status=1
  fi
  grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|#[0-9]+ *DONE)" "$OUT/$target.log" || true
  tail -n 3 "$OUT/$target.log"
done
exit $status
