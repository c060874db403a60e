// tokenizer.json regular expressions through PCRE2 (8-bit, UTF + Unicode properties).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "models/tokenizers/regex.h"

#include <pcre2.h>

#include <cctype>

#include "runtime/error.h"

namespace libai::tokenizers {

// Note [Oniguruma through PCRE2]
// Hugging Face `tokenizers` compiles its patterns with Oniguruma in Ruby syntax; the patterns
// tokenizer.json files carry (GPT-2's, Llama 3's, Qwen2's: \p{L}, \p{N}, \s, (?i:...),
// lookahead) mean the same in PCRE2 with PCRE2_UTF | PCRE2_UCP, except where the dialects
// disagree, which the rewrite below removes:
//   - \s / \S: Oniguruma's is the Unicode White_Space property; PCRE2's also takes U+180E.
//   - \w / \W: Oniguruma's is Alphabetic, marks, decimal digits, connector punctuation and six
//     Latin-1 digits and fractions (² ³ ¹ ¼ ½ ¾); PCRE2 10.42's is letters, all numbers and '_'.
//   - \h / \H: a hexadecimal digit in Oniguruma, horizontal space in PCRE2.
//   - ^ and $ always match at line boundaries in Ruby (PCRE2_MULTILINE), and Ruby's (?m) is
//     PCRE2's (?s) (dot matches newline).
// Inside a character class \s, \w and \h become their ranges; \S, \W and \H there keep PCRE2's
// meaning (a class cannot hold a negated range list), as do \b and the POSIX classes. PCRE2
// 10.42 knows Unicode 14, Oniguruma 6.9.8 Unicode 15: characters new in 15 may differ.
namespace {

constexpr const char* kSpace =
    "\\x{9}-\\x{d}\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}"
    "\\x{205f}\\x{3000}";
// Oniguruma's Unicode word class, plus the superscript digits and vulgar fractions of Latin-1
// that its ISO-8859-1 table also counts as word characters (HF matches them).
constexpr const char* kWord =
    "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{b2}\\x{b3}\\x{b9}\\x{bc}-\\x{be}";
constexpr const char* kHex = "0-9a-fA-F";

}  // namespace

std::string oniguruma_to_pcre2(std::string_view p) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      ++i;
      if (e == 'Q') {  // \Q...\E: literal text, copied as it is
        const size_t end = p.find("\\E", i + 1);
        const size_t stop = end == std::string_view::npos ? p.size() : end + 2;
        out.append("\\Q").append(p.substr(i + 1, stop - i - 1));
        i = stop - 1;
        continue;
      }
      const char* range = e == 's' || e == 'S'   ? kSpace
                          : e == 'w' || e == 'W' ? kWord
                          : e == 'h' || e == 'H' ? kHex
                                                 : nullptr;
      const bool negated = e == 'S' || e == 'W' || e == 'H';
      if (range != nullptr && !in_class) {
        out.append(negated ? "[^" : "[").append(range).append("]");
      } else if (range != nullptr && !negated) {
        out.append(range);
      } else {
        out.push_back('\\');
        out.push_back(e);
      }
      continue;
    }
    if (in_class) {
      if (c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // [:alpha:] inside a class
        const size_t end = p.find(":]", i + 2);
        const size_t stop = end == std::string_view::npos ? p.size() : end + 2;
        out.append(p.substr(i, stop - i));
        i = stop - 1;
        continue;
      }
      if (c == ']') in_class = false;
      out.push_back(c);
      continue;
    }
    if (c == '[') {
      in_class = true;
      out.push_back(c);
      // "[]..." and "[^]...": that ']' is a literal member, not the end.
      if (i + 1 < p.size() && p[i + 1] == '^') out.push_back(p[++i]);
      if (i + 1 < p.size() && p[i + 1] == ']') out.push_back(p[++i]);
      continue;
    }
    if (c == '(' && p.substr(i, 2) == "(?") {
      // Inline flags "(?imx-imx)" or "(?imx-imx:": Ruby's m is dot-all.
      size_t j = i + 2;
      while (j < p.size() && (p[j] == 'i' || p[j] == 'm' || p[j] == 'x' || p[j] == '-')) ++j;
      if (j > i + 2 && j < p.size() && (p[j] == ')' || p[j] == ':')) {
        out.append("(?");
        for (size_t k = i + 2; k < j; ++k) out.push_back(p[k] == 'm' ? 's' : p[k]);
        i = j - 1;
        continue;
      }
    }
    out.push_back(c);
  }
  return out;
}

std::string regex_escape(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    const auto u = static_cast<unsigned char>(c);
    // ASCII punctuation and space are escaped; letters, digits and UTF-8 bytes are literal (a
    // backslash before an ASCII letter or digit would make an escape sequence).
    if (u < 0x80 && !std::isalnum(u)) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

struct Regex::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }  // null is fine
};

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  if (pcre2_get_error_message(code, buffer, sizeof(buffer)) < 0)
    return "error " + std::to_string(code);
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

Regex::Regex(const std::string& pattern, std::string where)
    : compiled_(std::make_unique<Compiled>()), where_(std::move(where)) {
  const std::string translated = oniguruma_to_pcre2(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  // Ruby's lines end at "\n" only, whatever newline convention PCRE2 was built with.
  pcre2_compile_context* context = pcre2_compile_context_create(nullptr);
  LIBAI_CHECK(context != nullptr, "out of memory compiling a regular expression");
  pcre2_set_newline(context, PCRE2_NEWLINE_LF);
  compiled_->code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &error, &offset, context);
  pcre2_compile_context_free(context);
  if (compiled_->code == nullptr) {
    LIBAI_THROW(CorruptInput, where_, ": invalid regular expression '", pattern,
                "': ", pcre2_message(error), " (at offset ", offset,
                " of the pattern as PCRE2 "
                "reads it)");
  }
  // The JIT is an optimisation: without it (or where it fails) the interpreter runs.
  (void)pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);
}

Regex::~Regex() = default;

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(compiled_->code, nullptr);
  LIBAI_CHECK(data != nullptr, "out of memory for a regex match");
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t from = 0;
  bool have_last = false;
  size_t last_end = 0;
  uint32_t options = 0;
  while (from <= text.size()) {
    int rc = pcre2_match(compiled_->code, subject, text.size(), from, options, data, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {  // a long run: the interpreter's heap has room
      options |= PCRE2_NO_JIT;
      continue;
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(data);
      LIBAI_THROW(InvalidArgument, where_,
                  ": matching the regular expression failed: ", pcre2_message(rc));
    }
    const PCRE2_SIZE* at = pcre2_get_ovector_pointer(data);
    const size_t begin = at[0], end = at[1];
    if (begin == end && have_last && last_end == end) {
      // An empty match where the last one ended: step over one character and search again.
      if (from >= text.size()) break;
      ++from;
      while (from < text.size() && (static_cast<unsigned char>(text[from]) & 0xC0) == 0x80) ++from;
      options |= PCRE2_NO_UTF_CHECK;
      continue;
    }
    out.emplace_back(begin, end);
    from = end;
    have_last = true;
    last_end = end;
    options |= PCRE2_NO_UTF_CHECK;  // checked on the first call
  }
  pcre2_match_data_free(data);
  return out;
}

}  // namespace libai::tokenizers
