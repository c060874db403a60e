#!/usr/bin/env bash
# A training step of GPT-2 small against PyTorch + transformers, side by side in one run
# (rules: docs/BENCHMARKS.md). A = build/bench/bench_train_step, B = bench/peer_train_step.py on the
# same random-weight folder, batch, dtype policy and threads. Each row: rounds alternating
# A B, B A, ...; each process runs 1 untimed step and `reps` timed ones and reports their
# median and its peak RSS. ratio = B time / A time per round (> 1: we are faster).
#
#   cmake --build build -j2 --target bench_train_step
#   bench/run_train_bench.sh build        # env: THREADS=2, ROUNDS=3, REPS=3, ROWS=f32,bf16,ckpt,f32_nodrop
#
# Rows: f32 (config dropout 0.1), f32_nodrop (dropout 0), bf16 (autocast bf16 on both sides),
# ckpt (activation checkpointing on both sides).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
py=${PYTHON:-.venv/bin/python}
threads=${THREADS:-2}
rounds=${ROUNDS:-3}
reps=${REPS:-3}
rows=${ROWS:-f32,f32_nodrop,bf16,ckpt}
ours="$build/bench/bench_train_step"
[ -x "$ours" ] || { echo "no $ours: build the bench_train_step target first" >&2; exit 1; }
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads MKL_NUM_THREADS=$threads
work="$build/model_bench"
mkdir -p "$work"
gpt2="$work/gpt2-small-random"
if [ ! -f "$gpt2/config.json" ]; then
  echo "== creating $gpt2"
  "$py" - "$gpt2" <<'PY'
import sys, torch
from transformers import GPT2Config, GPT2LMHeadModel
torch.manual_seed(0)
config = GPT2Config(n_embd=768, n_layer=12, n_head=12, vocab_size=50257, n_positions=1024)
GPT2LMHeadModel(config).eval().save_pretrained(sys.argv[1])
PY
fi
results="$work/train-results-t$threads-$(date -u +%Y%m%dT%H%M%S).jsonl"
echo "# $(date -u +%F) nproc $(nproc), $(lscpu | sed -n 's/^Model name: *//p'), OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}" | tee -a "$results"
common="--model $gpt2 --batch 4 --seq 256 --reps $reps --warmup ${WARMUP:-2} --threads $threads"
for row in ${rows//,/ }; do
  case $row in
    f32) flags="" ;;
    f32_nodrop) flags="--dropout 0" ;;
    bf16) flags="--amp bf16" ;;
    ckpt) flags="--checkpoint" ;;
    *) echo "unknown row $row" >&2; exit 1 ;;
  esac
  for ((r = 0; r < rounds; ++r)); do
    if ((r % 2 == 0)); then order="ours peer"; else order="peer ours"; fi
    for who in $order; do
      if [ "$who" = ours ]; then line=$("$ours" $common $flags)
      else line=$("$py" bench/peer_train_step.py $common $flags); fi
      echo "{\"row\": \"$row\", \"round\": $r, \"result\": $line}" | tee -a "$results"
    done
  done
done
"$py" - "$results" <<'PY'
import json, sys, statistics
rows = {}
for line in open(sys.argv[1]):
    if line.startswith("#"): continue
    d = json.loads(line)
    rows.setdefault(d["row"], {}).setdefault(d["round"], {})[d["result"]["impl"]] = d["result"]
print("| row | ours ms | torch ms | ratio (torch / ours) median (min-max) | ours peak RSS MiB | torch peak RSS MiB |")
print("| --- | --- | --- | --- | --- | --- |")
for row, rounds in rows.items():
    pairs = [(r["libai"], r["torch"]) for r in rounds.values() if "libai" in r and "torch" in r]
    if not pairs: continue
    ratios = [t["median_ms"] / o["median_ms"] for o, t in pairs]
    print(f"| {row} | {statistics.median(o['median_ms'] for o, _ in pairs):.0f} | "
          f"{statistics.median(t['median_ms'] for _, t in pairs):.0f} | {statistics.median(ratios):.2f} "
          f"({min(ratios):.2f}-{max(ratios):.2f}) | {max(o['peak_rss_mib'] for o, _ in pairs):.0f} | "
          f"{max(t['peak_rss_mib'] for _, t in pairs):.0f} |")
PY
