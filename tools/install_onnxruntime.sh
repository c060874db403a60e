#!/usr/bin/env bash
# Installs ONNX Runtime (and numpy) for the ONNX export checks, from PyPI with
# `pip install --target BUILD/pyonnx` (no virtual environment, nothing system-wide), so that
# tools/run_onnx.py can run an exported model: PYTHONPATH=BUILD/pyonnx python3 tools/run_onnx.py.
# Prints the folder on success; exits 1 (with the reason on stderr) when python3, pip or the
# network is unavailable, so callers can skip what needs it.
#
#   tools/install_onnxruntime.sh build        # -> build/pyonnx
set -euo pipefail
build=${1:-build}
target="${build}/pyonnx"
python=$(command -v python3 || true)
if [ -z "${python}" ]; then
  echo "install_onnxruntime: python3 not found" >&2
  exit 1
fi
if ! PYTHONPATH="${target}" "${python}" -c "import onnxruntime, numpy" 2>/dev/null; then
  mkdir -p "${target}"
  if ! "${python}" -m pip install --quiet --disable-pip-version-check --upgrade \
      --target "${target}" onnxruntime numpy >&2; then
    echo "install_onnxruntime: pip could not install onnxruntime and numpy" >&2
    exit 1
  fi
  PYTHONPATH="${target}" "${python}" -c "import onnxruntime, numpy" >&2 ||
    { echo "install_onnxruntime: onnxruntime does not import from ${target}" >&2; exit 1; }
fi
echo "${target}"
