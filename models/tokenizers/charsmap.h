// SentencePiece's precompiled charsmap: the normalization rules of a .model file's
// normalizer_spec, and of tokenizer.json's `Precompiled` normalizer (its precompiled_charsmap is
// the same bytes in base64). A darts-clone double array over UTF-8 keys, then the replacement
// strings; see Note [Precompiled charsmaps] in charsmap.cc.
//
//   Charsmap map(blob, "tokenizer.json: field 'normalizer.precompiled_charsmap'");
//   auto r = map.replacement("\uff21");   // "A" where the rules map full-width A
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace libai::tokenizers {

// Empty when `blob` is safe to search (every walk stays inside it), else what is wrong.
std::string charsmap_problem(std::string_view blob);

class Charsmap {
 public:
  // CorruptInput naming `where` when charsmap_problem(blob) finds a problem.
  Charsmap(std::string blob, const std::string& where);
  // The replacement of the shortest key that is a prefix of `utf8` (darts-clone's first
  // common-prefix match, as the Hugging Face Precompiled normalizer takes it), if any.
  std::optional<std::string_view> replacement(std::string_view utf8) const;

 private:
  uint32_t unit(size_t i) const;
  std::string blob_;
  size_t units_ = 0;
  size_t strings_begin_ = 0;  // an offset, not a view: a moved blob_ may move its bytes (SSO)
};

}  // namespace libai::tokenizers
