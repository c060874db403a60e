#!/usr/bin/env bash
# One-shot check of the CUDA backend on a machine with a GPU: fresh CUDA build of the ops
# tests, the Cuda* suites (CUDA against the CPU oracle), and nvidia-smi. Run from anywhere:
#
#   tools/gpu_check.sh              # builds build-gpu-check/ next to this repository's root
#   ALL=1 tools/gpu_check.sh        # also builds the whole project with CUDA on
#   ARCH="80;90" tools/gpu_check.sh # compile for these architectures (default: this GPU's)
#
# When $OUT is set (the device runner's result folder), logs and a JUnit report land there.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build-gpu-check}"
out="${OUT:-$build}"
arch="${ARCH:-native}"
jobs="${JOBS:-16}"
mkdir -p "$out"

nvidia-smi 2>&1 | tee "$out/nvidia-smi.txt"

rm -rf "$build"
cmake -S "$root" -B "$build" -G Ninja -DLIBAI_WITH_CUDA=ON -DLIBAI_BUILD_BENCH=OFF \
  -DCMAKE_CUDA_ARCHITECTURES="$arch" \
  >"$out/configure.log" 2>&1 ||
  { tail -40 "$out/configure.log"; exit 2; }

target="libai_ops_gpu_tests"
[[ "${ALL:-0}" == 1 ]] && target="all"
if ! cmake --build "$build" --target "$target" -j"$jobs" >"$out/build.log" 2>&1; then
  grep -E "error|FAILED" "$out/build.log" | head -40
  exit 3
fi

cd "$build" || exit 4
ctest -R Cuda --output-on-failure --output-junit "$out/cuda-tests.xml" 2>&1 |
  tee "$out/ctest.log"
status=${PIPESTATUS[0]}
# CudaProbe passes without a GPU; a run where the GPU tests skipped has checked nothing.
if grep -q "CudaRuntime.AllocatorReusesFreedBlocks .*Skipped" "$out/ctest.log"; then
  echo "gpu_check: every CUDA test was skipped (no usable GPU?)"
  exit 5
fi
exit "$status"
