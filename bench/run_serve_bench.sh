#!/usr/bin/env bash
# Serving on loopback (docs: bench/RESULTS.md, rules: docs/BENCHMARKS.md): `libai-actor serve`
# one request at a time (--max-batch 1) against continuous batching (--max-batch 32), and
# bench/peer_serve.py (transformers' generate behind http.server, one generate at a time), all
# on the same random-weight model, threads and requests, measured by build/bench/bench_serve_load
# at 1, 8 and 32 concurrent clients. Every request: a 16-token prompt of seeded ids, greedy,
# 32 new tokens exactly (min_tokens = max_tokens), streamed (so time to first token is seen).
#
#   cmake --build build -j2 --target libai-actor bench_serve_load
#   bench/run_serve_bench.sh build     # env: THREADS=2, CLIENTS="1 8 32", REQUESTS (per client;
#                                      # default 4 at 1 client, 2 above), MAX_TOKENS=32,
#                                      # PYTHON=.venv/bin/python (torch + transformers), PEER=1,
#                                      # PEER_CLIENTS="1 8", ROUNDS=2
#   SUMMARY_ONLY=build/serve_bench/results.jsonl bench/run_serve_bench.sh build
#
# The model: GPT-2 small's body (12 layers, 768 wide, 12 heads) with the 503-token vocabulary of
# the tokenizer fixture tests/data/models/gpt2 (the server detokenizes what it streams, and that
# tokenizer is in the tree), torch's random init, saved once under <build>/serve_bench/.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
py=${PYTHON:-.venv/bin/python}
threads=${THREADS:-2}
client_counts=${CLIENTS:-1 8 32}
max_tokens=${MAX_TOKENS:-32}
peer=${PEER:-1}
rounds=${ROUNDS:-2}  # rounds over the servers; the order of ours alternates (1 32, 32 1, ...)
# The peer decodes one request at a time, so its tokens/s does not grow with clients: 1 and 8
# show that and keep the run bounded.
peer_client_counts=${PEER_CLIENTS:-1 8}
ours="$build/bin/libai-actor"
load="$build/bench/bench_serve_load"
work="$build/serve_bench"
results="$work/results.jsonl"

summary() {
python3 - "$1" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
med = statistics.median
print("Medians over rounds (min-max); ratio = tokens/s over that of `serve --max-batch 1` at the same")
print("client count in the same round.")
print()
print("| clients | server | max_batch | rounds | requests x tokens | tokens/s | ratio to serial | latency p50 / p99 ms | TTFT p50 / p99 ms | errors, short | load (1 min) |")
print("|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|")
for c in sorted({r["clients"] for r in rows}):
    for server, batch in [("libai", 1), ("libai", 32), ("transformers", 1)]:
        rr = [r for r in rows if r["clients"] == c and r["server"] == server and r["max_batch"] == batch]
        if not rr:
            continue
        serial = {r.get("round", 1): r["tokens_per_s"] for r in rows
                  if r["clients"] == c and r["server"] == "libai" and r["max_batch"] == 1}
        ratios = [r["tokens_per_s"] / serial[r.get("round", 1)] for r in rr if r.get("round", 1) in serial]
        span = lambda v, f: f"{f(med(v))} ({f(min(v))}-{f(max(v))})" if len(v) > 1 else f(v[0])
        f1, f0, f2 = (lambda x: f"{x:.1f}"), (lambda x: f"{x:.0f}"), (lambda x: f"{x:.2f}")
        print(f"| {c} | {server} | {batch} | {len(rr)} | {rr[0]['requests']} x {rr[0]['max_tokens']} | "
              f"{span([r['tokens_per_s'] for r in rr], f1)} | {span(ratios, f2) if ratios else '-'} | "
              f"{f0(med(r['latency_ms']['p50'] for r in rr))} / {f0(med(r['latency_ms']['p99'] for r in rr))} | "
              f"{f0(med(r['ttft_ms']['p50'] for r in rr))} / {f0(med(r['ttft_ms']['p99'] for r in rr))} | "
              f"{sum(r['errors'] for r in rr)}, {sum(r['short_requests'] for r in rr)} | "
              f"{min(r['load'] for r in rr):.1f}-{max(r['load'] for r in rr):.1f} |")
EOF
}
if [ -n "${SUMMARY_ONLY:-}" ]; then
  summary "$SUMMARY_ONLY"
  exit 0
fi

[ -x "$ours" ] || { echo "no $ours: build the libai-actor target first" >&2; exit 1; }
[ -x "$load" ] || { echo "no $load: build the bench_serve_load target first" >&2; exit 1; }
[ -x "$py" ] || { echo "no python at $py (set PYTHON)" >&2; exit 1; }
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads MKL_NUM_THREADS=$threads
mkdir -p "$work"
model="$work/gpt2-small-random-v503"
if [ ! -f "$model/config.json" ]; then
  echo "== creating $model"
  "$py" - "$model" <<'EOF'
import shutil, sys, torch
from transformers import GPT2Config, GPT2LMHeadModel
torch.manual_seed(0)
config = GPT2Config(n_embd=768, n_layer=12, n_head=12, vocab_size=503, n_positions=1024,
                    bos_token_id=2, eos_token_id=2)
GPT2LMHeadModel(config).eval().save_pretrained(sys.argv[1])
for f in ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]:
    shutil.copy(f"tests/data/models/gpt2/{f}", sys.argv[1])
EOF
fi

server_pid=""
stop_server() {
  if [ -n "$server_pid" ]; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
  fi
}
trap stop_server EXIT

# Starts a server command (it prints "serving NAME on http://HOST:PORT" for --port 0), then
# waits up to 120 s for the line and for /health.
start_server() {
  local log="$work/server.log"
  : > "$log"
  "$@" > "$log" 2>&1 &
  server_pid=$!
  port=""
  for _ in $(seq 1 240); do
    port=$(sed -n 's|^serving .* on http://[^:]*:\([0-9]*\)$|\1|p' "$log" | head -1)
    if [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" > /dev/null; then return 0; fi
    kill -0 "$server_pid" 2>/dev/null || { cat "$log" >&2; echo "server exited" >&2; exit 1; }
    sleep 0.5
  done
  cat "$log" >&2
  echo "server not healthy within 120 s: $*" >&2
  exit 1
}

# One server, every client count; each row is one JSON line with the server and the load.
measure() {
  local name=$1 batch=$2 counts=$3 round=$4
  for c in $counts; do
    local requests=${REQUESTS:-$([ "$c" -eq 1 ] && echo 4 || echo 2)}
    echo "== round $round: $name max_batch=$batch clients=$c requests/client=$requests (load $(cut -d' ' -f1 /proc/loadavg))"
    local line
    line=$("$load" --port "$port" --clients "$c" --requests "$requests" --max-tokens "$max_tokens" \
             --prompt-tokens 16 --vocab 500 --seed 0 --warmup 1 --stream)
    echo "$line"
    python3 -c 'import json, sys; r = json.loads(sys.argv[1]); r.update(server=sys.argv[2], max_batch=int(sys.argv[3]), threads=int(sys.argv[4]), round=int(sys.argv[5]), load=float(open("/proc/loadavg").read().split()[0])); print(json.dumps(r))' \
      "$line" "$name" "$batch" "$threads" "$round" >> "$results"
  done
}

: > "$results"
echo "nproc $(nproc), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), threads $threads, commit $(git rev-parse --short HEAD), OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
for round in $(seq 1 "$rounds"); do
  order="1 32"
  [ $((round % 2)) -eq 0 ] && order="32 1"
  for batch in $order; do
    start_server "$ours" serve --model "$model" --port 0 --threads "$threads" --max-batch "$batch"
    measure libai "$batch" "$client_counts" "$round"
    stop_server
  done
  if [ "$peer" = 1 ]; then
    start_server "$py" bench/peer_serve.py --model "$model" --port 0 --threads "$threads"
    measure transformers 1 "$peer_client_counts" "$round"
    stop_server
  fi
done
summary "$results"
