#!/usr/bin/env bash
# `libai-actor preprocess` against Megatron-LM's tools/preprocess_data.py: the same JSONL, the
# same GPT-2 byte-level BPE files (vocab.json + merges.txt), the same worker counts, --append-eod.
# Prints seconds and MB/s of each run, the ratio, and whether the outputs are byte-identical.
#
#   bench/run_preprocess_bench.sh BUILD MEGATRON_CHECKOUT [PYTHON]
#
# BUILD holds bin/libai-actor; MEGATRON_CHECKOUT is a Megatron-LM working tree (its tools/ and
# megatron/ folders), not part of this repository; PYTHON has torch, numpy, transformers and
# tokenizers. The corpus and tokenizer come from bench/preprocess_corpus.py (BENCH_MB, default 25).
set -euo pipefail
build=$(realpath "$1")
megatron=$(realpath "$2")
python=${3:-python3}
here=$(cd "$(dirname "$0")" && pwd)
work="$build/preprocess_bench"
mkdir -p "$work/out"
[[ -f "$work/corpus.jsonl" ]] || "$python" "$here/preprocess_corpus.py" "$work" "${BENCH_MB:-25}"
mb=$(stat -c %s "$work/corpus.jsonl" | awk '{printf "%.1f", $1 / 1e6}')
echo "corpus $mb MB, nproc $(nproc), $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1 /proc/loadavg)"

# Megatron's HEAD imports typing.override (Python 3.12); on 3.11 typing_extensions' equal no-op
# decorator stands in for it. Its GPT2BPETokenizer is transformers' AutoTokenizer("gpt2", vocab,
# merges): run from $work, where ./gpt2 is our tokenizer folder, since the hub is unreachable.
# Nothing else of Megatron is changed.
ln -sfn tokenizer "$work/gpt2"
cat >"$work/run_megatron.py" <<'PY'
import runpy, sys, typing, typing_extensions
typing.override = typing_extensions.override
megatron = sys.argv[1]
sys.argv = [megatron + "/tools/preprocess_data.py"] + sys.argv[2:]
sys.path.insert(0, megatron)
runpy.run_path(sys.argv[0], run_name="__main__")
PY

seconds() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null 2>"$work/last.err" || { cat "$work/last.err"; exit 1; }; t1=$(date +%s.%N); echo "$t1 - $t0" | bc -l; }
for workers in ${BENCH_WORKERS:-1 2}; do
  ours=$(seconds "$build/bin/libai-actor" preprocess --input "$work/corpus.jsonl" \
    --tokenizer "$work/tokenizer" --output-prefix "$work/out/ours_w$workers" --append-eod \
    --workers "$workers")
  theirs=$(cd "$work" && HF_HUB_OFFLINE=1 seconds "$python" "$work/run_megatron.py" "$megatron" --input "$work/corpus.jsonl" \
    --tokenizer-type GPT2BPETokenizer --vocab-file "$work/tokenizer/vocab.json" \
    --merge-file "$work/tokenizer/merges.txt" --output-prefix "$work/out/megatron_w$workers" \
    --append-eod --workers "$workers")
  same=no
  cmp -s "$work/out/ours_w${workers}_text_document.bin" "$work/out/megatron_w${workers}_text_document.bin" &&
    cmp -s "$work/out/ours_w${workers}_text_document.idx" "$work/out/megatron_w${workers}_text_document.idx" &&
    same=yes
  printf "workers %s: libai-actor %.2f s (%.2f MB/s), Megatron %.2f s (%.2f MB/s), ratio %.2fx, byte-identical %s\n" \
    "$workers" "$ours" "$(echo "$mb / $ours" | bc -l)" "$theirs" "$(echo "$mb / $theirs" | bc -l)" \
    "$(echo "$theirs / $ours" | bc -l)" "$same"
done
