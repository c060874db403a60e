// Shared by the fuzz targets. Built by tools/run_fuzzers.sh with -DLIBAI_FUZZER, each file is a
// libFuzzer target (LLVMFuzzerTestOneInput). Picked up by the tests/ glob without that define,
// each is a GoogleTest that replays the committed fixtures plus deterministic truncations and
// byte flips of them, so the "only libai::Error escapes" contract is checked on every build.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "runtime/tensor.h"

namespace libai::fuzz {

// Reads tensor values only when small: a valid stride-0 view may have a huge element count.
constexpr int64_t kMaxElementsRead = 4096;

inline void touch(const Tensor& t) {
  if (t.numel() <= kMaxElementsRead) (void)t.to_vector<double>();
}

// Runs `load` on the bytes; libai::Error is an accepted outcome, anything else propagates.
template <typename Load>
void run_one(const uint8_t* data, size_t size, Load&& load) {
  try {
    load(data, size);
  } catch (const Error&) {
  }
}

#ifndef LIBAI_FUZZER
inline std::vector<std::string> seed_files() {
  std::vector<std::string> out;
  const auto root = std::filesystem::path(LIBAI_SOURCE_DIR) / "tests/data/checkpoint";
  for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    out.push_back(s.str());
  }
  return out;
}

// Each seed whole, cut at a spread of lengths, and with single bytes flipped at a stride.
template <typename Load>
void replay_mutations(Load&& load) {
  for (const std::string& seed : seed_files()) {
    auto run = [&](const std::string& bytes) {
      run_one(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), load);
    };
    run(seed);
    const size_t step = seed.size() / 97 + 1;
    for (size_t cut = 0; cut < seed.size(); cut += step) run(seed.substr(0, cut));
    for (size_t at = 0; at < seed.size(); at += step) {
      for (uint8_t mask : {uint8_t(0x01), uint8_t(0x80), uint8_t(0xff)}) {
        std::string flipped = seed;
        flipped[at] = char(uint8_t(flipped[at]) ^ mask);
        run(flipped);
      }
    }
  }
}
#endif

}  // namespace libai::fuzz
