// The regular expressions of tokenizer.json ({"Regex": ...} patterns), run by PCRE2 the way
// Hugging Face `tokenizers` runs them through Oniguruma: Note [Oniguruma through PCRE2].
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace libai::tokenizers {

class Regex {
 public:
  // `where` names the pattern for errors ("<file>: field 'pre_tokenizer.pattern.Regex'"); a
  // pattern PCRE2 rejects is CorruptInput naming it, the offset and PCRE2's reason.
  Regex(const std::string& pattern, std::string where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // The matches in `text` (valid UTF-8) as [begin, end) byte offsets, in order and not
  // overlapping, found as HF's iterator finds them: after an empty match the search moves on one
  // character, and an empty match right where the previous match ended is skipped.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

 private:
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
  std::string where_;
};

// `literal` as a pattern that matches exactly it (HF compiles {"String": ...} patterns of Split
// this way).
std::string regex_escape(std::string_view literal);

// The Oniguruma (Ruby syntax) pattern rewritten for PCRE2: the class escapes with Oniguruma's
// Unicode meaning, (?m) as dot-all. Exposed for tests.
std::string oniguruma_to_pcre2(std::string_view pattern);

}  // namespace libai::tokenizers
