#!/usr/bin/env bash
# The bundled demo job: what the project can run today, end to end, on this machine.
set -euo pipefail
build=${1:-build}
echo "== libai-actor $(${build}/bin/libai-actor --version | awk '{print $2}')"
echo
echo "== The resolved default config, with two overrides from the command line"
"${build}/bin/libai-actor" config show configs/default.yaml \
  train.dist.tensor_parallel_size=2 train.dist.custom_pipeline_stage_id='[0,0,1,1]' | head -40
echo "   ..."
echo
echo "== A bad override is one clear error naming the key"
"${build}/bin/libai-actor" config show configs/default.yaml train.dist.tensor_paralel_size=2 || true
echo
echo "== Eager training of a small MLP on this CPU with our kernels and autograd"
"${build}/examples/eager_mlp"
