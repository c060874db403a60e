// Fuzz target: IndexedDataset::open_bytes and every accessor on whatever it accepts. The input
// is a little-endian u32 n, then n bytes of .idx (fewer if the input is shorter), then the .bin.
#include <algorithm>
#include <cstring>
#include <string_view>

#include "tests/fuzz/fuzz_harness.h"
#include "train/data/indexed_dataset.h"

namespace {

void load_indexed_dataset(const uint8_t* data, size_t size) {
  using namespace libai::train::data;
  uint32_t idx_size = 0;
  if (size >= 4) std::memcpy(&idx_size, data, 4);
  const size_t header = std::min<size_t>(size, 4);
  const size_t idx_bytes = std::min<size_t>(idx_size, size - header);
  const auto* chars = reinterpret_cast<const char*>(data);
  const auto dataset = IndexedDataset::open_bytes(
      std::string_view(chars + header, idx_bytes),
      std::string_view(chars + header + idx_bytes, size - header - idx_bytes), "fuzz");
  int64_t tokens = 0;
  for (int64_t i = 0; i < dataset.size(); ++i) {
    const int64_t length = dataset.length(i);
    tokens += int64_t(dataset.get(i).size());
    if (length > 1) (void)dataset.get(i, length / 2, length - length / 2);
  }
  // What validation promises; a libai::Error here would be swallowed by run_one, so trap.
  const auto& documents = dataset.document_indices();
  if (tokens != dataset.total_tokens() || documents.empty() || documents.front() != 0 ||
      documents.back() != dataset.size())
    __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  libai::fuzz::run_one(data, size, load_indexed_dataset);
  return 0;
}
