#!/usr/bin/env bash
# GPT-2 small training tokens/s across layouts (issue 13): one device (1 and 2 threads), DP2 and
# PP2, eager (graph.enabled false: ranks are threads of one process) and through the training
# stage actors (graph.enabled true: one process, or PP2 over two node processes on loopback).
# Same config, data, seed and global batch (8 x 128 tokens) in every row; each run takes
# WARMUP + STEPS steps with log_period 1 and reports the median step_ms of the measured steps
# from its metrics.json (the trainer's own clock, around runner->run for the whole step).
# The loss of the last step is printed too: every layout must train the same model.
#
#   ninja -C build -j2 libai-actor
#   bench/run_pipeline_train_bench.sh build       # env: LAYOUTS=..., STEPS=5, WARMUP=2, VOCAB=78|50257
#
# Compute threads: graph rows set train.cluster.device_threads per slot (1 per rank, so the 2
# ranks of DP2 / PP2 use 2 cores; 2 for the one-device 2-thread row). Eager training has no
# per-rank thread key: its ranks are threads sharing the process's cpu device, whose budget is
# every core (runtime/threads.h), so eager rows use the machine's cores and there is no eager
# 1-thread row (the graph one1 row is the one-device 1-thread figure).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cli="$build/bin/libai-actor"
[ -x "$cli" ] || { echo "no $cli: build the libai-actor target first" >&2; exit 1; }
steps=${STEPS:-5}
warmup=${WARMUP:-2}
vocab=${VOCAB:-78}
layouts=${LAYOUTS:-one1_graph,one2_eager,dp2_eager,pp2_eager,one2_graph,dp2_graph,pp2_graph,pp2_graph_2proc}
config=bench/configs/gpt2_small_train_layouts.yaml
case $vocab in
  78) model=bench/configs/gpt2_small_char/config.json ;;
  50257) model=bench/configs/gpt2_small/config.json ;;
  *) echo "VOCAB must be 78 or 50257, got $vocab" >&2; exit 1 ;;
esac
work="$build/gptbench"
mkdir -p "$work"
prefix="$work/shakespeare"
if [ ! -f "${prefix}_text_document.idx" ]; then
  "$cli" preprocess --input data/shakespeare/plays.txt --tokenizer configs/demo/char_gpt \
    --output-prefix "$prefix" --split-paragraphs --append-eod > /dev/null
fi
stamp=$(date -u +%Y%m%dT%H%M%S)
results="$work/layouts-v$vocab-$stamp.jsonl"
{
  echo "# $(date -u '+%F %T') UTC, nproc $(nproc), $(lscpu | sed -n 's/^Model name: *//p')," \
    "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-unset}" \
    "OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-unset}, commit $(git rev-parse --short HEAD)," \
    "vocab $vocab, load $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$results"

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

for layout in ${layouts//,/ }; do
  # name -> graph dp pp accumulation device_threads nodes
  case $layout in
    one1_graph) set -- true 1 1 4 1 1 ;;
    one2_eager) set -- false 1 1 4 1 1 ;;
    one2_graph) set -- true 1 1 4 2 1 ;;
    dp2_eager) set -- false 2 1 2 1 1 ;;
    dp2_graph) set -- true 2 1 2 1 1 ;;
    pp2_eager) set -- false 1 2 4 1 1 ;;
    pp2_graph) set -- true 1 2 4 1 1 ;;
    pp2_graph_2proc) set -- true 1 2 4 1 2 ;;
    *) echo "unknown layout $layout" >&2; exit 1 ;;
  esac
  graph=$1 dp=$2 pp=$3 acc=$4 threads=$5 nodes=$6
  out="$work/run-$layout"
  rm -rf "$out"
  overrides=(graph.enabled=$graph train.dist.data_parallel_size=$dp
             train.dist.pipeline_parallel_size=$pp train.num_accumulation_steps=$acc
             train.train_iter=$((warmup + steps)) model.config=$model
             data.prefix=${prefix}_text_document train.output_dir=$out)
  # device_threads is a key of the actor runtime: eager training leaves it unread.
  [ "$graph" = true ] && overrides+=(train.cluster.device_threads=$threads train.cluster.nodes=$nodes)
  echo "== $layout: graph $graph, dp $dp, pp $pp, accumulation $acc, threads/slot $threads, nodes $nodes" >&2
  start=$(date +%s.%N)
  status=0
  if [ "$nodes" = 1 ]; then
    "$cli" train "$config" "${overrides[@]}" > "$work/$layout.log" 2>&1 || status=$?
  else
    port=$(free_port)
    pids=()
    for ((r = nodes - 1; r >= 0; --r)); do
      "$cli" train "$config" "${overrides[@]}" --node-rank $r --port "$port" \
        > "$work/$layout.node$r.log" 2>&1 &
      pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
    cat "$work/$layout".node*.log > "$work/$layout.log"
  fi
  wall=$(python3 -c "import time; print(round(time.time() - $start, 1))")
  python3 - "$layout" "$graph" "$dp" "$pp" "$acc" "$threads" "$nodes" "$status" "$wall" \
    "$out/metrics.json" "$warmup" "$work/$layout.log" <<'PY' | tee -a "$results"
import json, os, statistics, sys
layout, graph, dp, pp, acc, threads, nodes, status, wall, metrics, warmup, log = sys.argv[1:]
row = {"layout": layout, "graph": graph == "true", "dp": int(dp), "pp": int(pp),
       "accumulation": int(acc), "threads_per_slot": int(threads), "nodes": int(nodes),
       "exit": int(status), "wall_s": float(wall),
       "load1_after": float(open("/proc/loadavg").read().split()[0])}
records = []
if os.path.exists(metrics):
    records = [json.loads(l) for l in open(metrics) if l.strip()]
    records = [r for r in records if r.get("step_ms") is not None]
measured = [r for r in records if r["iteration"] > int(warmup)]
if measured:
    ms = [r["step_ms"] for r in measured]
    row.update(step_ms=statistics.median(ms), step_ms_min=min(ms), step_ms_max=max(ms),
               tokens_per_s=statistics.median(r["tokens_per_s"] for r in measured),
               last_loss=records[-1]["loss"], steps_measured=len(ms))
else:
    lines = [l.rstrip() for l in open(log) if "error" in l.lower()] if os.path.exists(log) else []
    row["error"] = lines[-1] if lines else "no measured steps (see " + log + ")"
print(json.dumps(row))
PY
  rm -rf "$out"/model_final "$out"/tensorboard  # eager writes a 1.5 GB final checkpoint
done

python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if not l.startswith("#")]
by = {r["layout"]: r for r in rows}
def ref(name):
    r = by.get(name)
    return r.get("tokens_per_s") if r else None
one1, one2e, one2g = ref("one1_graph"), ref("one2_eager"), ref("one2_graph")
print("| layout | graph | dp x pp | accumulation (m) | threads/slot | nodes | step ms median (min-max) "
      "| tokens/s | vs one device, 2 threads, same mode | vs one device, 1 thread | last loss |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for r in rows:
    if "tokens_per_s" not in r:
        print(f"| {r['layout']} | {r['graph']} | {r['dp']} x {r['pp']} | {r['accumulation']} | "
              f"{r['threads_per_slot']} | {r['nodes']} | failed (exit {r['exit']}): {r['error']} | | | | |")
        continue
    t = r["tokens_per_s"]
    same = one2g if r["graph"] else one2e
    vs2 = f"{t / same:.2f}" if same else "-"
    vs1 = f"{t / one1:.2f}" if one1 else "-"
    print(f"| {r['layout']} | {r['graph']} | {r['dp']} x {r['pp']} | {r['accumulation']} | "
          f"{r['threads_per_slot']} | {r['nodes']} | {r['step_ms']:.0f} ({r['step_ms_min']:.0f}-"
          f"{r['step_ms_max']:.0f}) | {t:.1f} | {vs2} | {vs1} | {r['last_loss']:.6f} |")
PY
echo "results: $results" >&2
