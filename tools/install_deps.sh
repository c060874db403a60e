#!/usr/bin/env bash
# Installs the Debian packages the build needs, when any is missing.
# As root: installs them. Otherwise: prints the exact apt command and exits 1.
set -euo pipefail
packages=(build-essential cmake ninja-build pkg-config
  libcaf-dev libucx-dev ucx-utils capnproto libcapnp-dev libspdlog-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev libopenblas-dev libdnnl-dev libyaml-cpp-dev
  nlohmann-json3-dev libcli11-dev libpcre2-dev libsentencepiece-dev libstb-dev
  libonnx-dev libprotobuf-dev protobuf-compiler libcpp-httplib-dev
  clang libclang-rt-14-dev clang-format
  python3)  # tools/check_layers.py (the layers.check_layers test)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
command="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "Missing system packages. Run as root:" >&2
  echo "  apt-get update && $command" >&2
  exit 1
fi
echo "Installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
