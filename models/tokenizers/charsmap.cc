// The precompiled charsmap (charsmap.h): its safety check and its prefix search.
#include "models/tokenizers/charsmap.h"

#include <vector>

#include "runtime/error.h"

namespace libai::tokenizers {
namespace {

uint32_t read_u32(const char* at) {
  const auto* p = reinterpret_cast<const uint8_t*>(at);
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// A darts-clone unit's offset to its children.
size_t unit_offset(uint32_t u) { return size_t(u >> 10) << ((u & (1u << 9)) >> 6); }

}  // namespace

// Note [Precompiled charsmaps]
// A normalizer_spec (ModelProto field 3) or denormalizer_spec (5) may carry a precompiled
// charsmap (NormalizerSpec field 2): a little-endian u32 n, a darts-clone double array of n / 4
// u32 units, then the replacement strings, each ending in NUL. libsentencepiece trusts it: it
// walks the array by the units' offsets and takes the strings at the leaves' values with
// strlen, so a crafted file read past the blob (a fuzzer found one). Before the library sees
// a model, every charsmap is checked so that no walk can leave the array or the strings:
// whole 256-unit blocks, every base a search can reach inside the array, every leaf's value
// inside the strings, and the strings ending in NUL. Arrays darts-clone builds pass.
// tokenizer.json's Precompiled normalizer carries the same bytes (base64) and gets the same
// check before our own search (Charsmap::replacement) walks them.
std::string charsmap_problem(std::string_view blob) {
  if (blob.empty()) return "";  // no rules: the identity
  if (blob.size() <= 4) return "shorter than its header";
  const auto* b = reinterpret_cast<const uint8_t*>(blob.data());
  const uint64_t trie_bytes =
      uint64_t(b[0]) | uint64_t(b[1]) << 8 | uint64_t(b[2]) << 16 | uint64_t(b[3]) << 24;
  if (trie_bytes >= blob.size() - 4) return "its trie leaves no room for the strings";
  if (trie_bytes % 4 != 0 || trie_bytes == 0 || (trie_bytes / 4) % 256 != 0)
    return "its trie is not whole 256-unit blocks";
  const size_t units = size_t(trie_bytes / 4);
  const std::string_view strings = blob.substr(4 + size_t(trie_bytes));
  if (strings.back() != '\0') return "its strings do not end in NUL";
  auto unit = [&](size_t i) {
    const uint8_t* p = b + 4 + 4 * i;
    return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
  };
  auto offset = [](uint32_t u) { return size_t(u >> 10) << ((u & (1u << 9)) >> 6); };
  // Walk every path a prefix search can take (darts-clone's commonPrefixSearch): from a base
  // b, byte c reads unit b ^ c, which continues only if its label is c. With whole blocks, a
  // base inside the array keeps b ^ c inside it; so every base reached must be inside, and
  // every leaf's value unit and value too.
  std::vector<bool> seen(units, false);
  std::vector<size_t> bases;
  const size_t root = offset(unit(0));
  if (root >= units) return "its root points outside the trie";
  bases.push_back(root);
  seen[root] = true;
  while (!bases.empty()) {
    const size_t base = bases.back();
    bases.pop_back();
    for (uint32_t c = 0; c < 256; ++c) {
      const size_t at = base ^ c;
      const uint32_t u = unit(at);
      if ((u & ((1u << 31) | 0xFFu)) != c) continue;  // not a child: the search stops here
      const size_t next = at ^ offset(u);
      if (next >= units) return str_cat("unit ", at, " points outside the trie");
      if (((u >> 8) & 1) != 0 && (unit(next) & 0x7FFFFFFFu) >= strings.size())
        return str_cat("unit ", at, "'s value points outside the strings");
      if (!seen[next]) {
        seen[next] = true;
        bases.push_back(next);
      }
    }
  }
  return "";
}

Charsmap::Charsmap(std::string blob, const std::string& where) : blob_(std::move(blob)) {
  const std::string problem = charsmap_problem(blob_);
  LIBAI_CHECK_KIND(CorruptInput, problem.empty(), where,
                   ": the precompiled_charsmap is broken: ", problem);
  if (blob_.empty()) return;
  units_ = read_u32(blob_.data()) / 4;
  strings_begin_ = 4 + 4 * units_;
}

uint32_t Charsmap::unit(size_t i) const { return read_u32(blob_.data() + 4 + 4 * i); }

// darts-clone's commonPrefixSearch, stopped at the first match; charsmap_problem has checked
// that every position this walk reads lies inside the array and the strings.
std::optional<std::string_view> Charsmap::replacement(std::string_view utf8) const {
  if (units_ == 0) return std::nullopt;
  size_t node = unit_offset(unit(0));
  for (const char ch : utf8) {
    const uint32_t c = uint8_t(ch);
    node ^= c;
    const uint32_t u = unit(node);
    if ((u & ((1u << 31) | 0xFFu)) != c) return std::nullopt;
    node ^= unit_offset(u);
    if (((u >> 8) & 1) != 0) {
      const std::string_view strings = std::string_view(blob_).substr(strings_begin_);
      const size_t at = unit(node) & 0x7FFFFFFFu;
      const size_t end = strings.find('\0', at);  // the strings end in NUL (checked)
      return strings.substr(at, end - at);
    }
  }
  return std::nullopt;
}

}  // namespace libai::tokenizers
