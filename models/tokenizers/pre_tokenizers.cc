// Pre-tokenizers of tokenizer.json: ByteLevel (the GPT-2 split pattern, scanned by hand),
// BertPreTokenizer, Metaspace, WhitespaceSplit, Split (regex or string patterns, PCRE2) and
// Sequence.
#include <algorithm>
#include <array>

#include "models/tokenizers/pipeline.h"
#include "models/tokenizers/regex.h"
#include "models/tokenizers/unicode.h"
#include "runtime/error.h"

namespace libai::tokenizers {
namespace {

// Note [GPT-2 split pattern]
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// tried alternative by alternative at each position, as the regex engine does. The only
// backtracking case: a whitespace run followed by a non-space leaves its last character to the
// next match (which then starts " ?..."), unless the run is one character long.
enum class Kind { space, letter, number, other };

Kind kind_of(char32_t c) {
  if (is_white_space(c)) return Kind::space;
  const CharClass k = char_class(c);
  if (k == CharClass::letter) return Kind::letter;
  if (k == CharClass::number) return Kind::number;
  return Kind::other;
}

size_t contraction_length(const std::u32string& s, size_t i) {
  if (s[i] != U'\'' || i + 1 >= s.size()) return 0;
  const char32_t a = s[i + 1], b = i + 2 < s.size() ? s[i + 2] : 0;
  if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return 3;
  if (a == U's' || a == U't' || a == U'm' || a == U'd') return 2;
  return 0;
}

size_t gpt2_match(const std::u32string& s, size_t i) {
  const size_t n = s.size();
  if (size_t len = contraction_length(s, i)) return len;
  size_t j = i;
  if (s[j] == U' ' && j + 1 < n) ++j;  // the optional leading space of " ?X+"
  const Kind k = kind_of(s[j]);
  if (k != Kind::space && (j == i || s[i] == U' ')) {
    size_t end = j + 1;
    while (end < n && kind_of(s[end]) == k) ++end;
    return end - i;
  }
  size_t end = i;
  while (end < n && kind_of(s[end]) == Kind::space) ++end;
  if (end == n || end - i == 1) return end - i;
  return end - i - 1;
}

class ByteLevel : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {}
  void split(const std::string& piece, bool, std::vector<std::string>& out) const override {
    std::string text = piece;
    if (add_prefix_space_ && (text.empty() || text[0] != ' ')) text = " " + text;
    const std::u32string s = utf8_decode(text);
    std::vector<std::string> words;
    if (!use_regex_) {
      words.push_back(text);
    } else {
      for (size_t i = 0; i < s.size();) {
        const size_t len = gpt2_match(s, i);
        words.push_back(utf8_encode(std::u32string_view(s).substr(i, len)));
        i += len;
      }
    }
    for (const std::string& word : words) {
      std::string mapped;
      for (unsigned char b : word) utf8_append(mapped, byte_to_unicode(b));
      out.push_back(std::move(mapped));
    }
  }

 private:
  bool add_prefix_space_, use_regex_;
};

class BertPreTokenizer : public PreTokenizer {
 public:
  void split(const std::string& piece, bool, std::vector<std::string>& out) const override {
    std::u32string word;
    auto flush = [&] {
      if (!word.empty()) out.push_back(utf8_encode(word));
      word.clear();
    };
    for (char32_t c : utf8_decode(piece)) {
      if (is_white_space(c)) {
        flush();
      } else if ((c < 0x80 && std::ispunct(static_cast<int>(c))) ||
                 char_class(c) == CharClass::punctuation) {
        flush();
        out.push_back(utf8_encode(std::u32string(1, c)));
      } else {
        word.push_back(c);
      }
    }
    flush();
  }
};

class WhitespaceSplit : public PreTokenizer {
 public:
  void split(const std::string& piece, bool, std::vector<std::string>& out) const override {
    std::u32string word;
    for (char32_t c : utf8_decode(piece)) {
      if (!is_white_space(c)) {
        word.push_back(c);
      } else if (!word.empty()) {
        out.push_back(utf8_encode(word));
        word.clear();
      }
    }
    if (!word.empty()) out.push_back(utf8_encode(word));
  }
};

enum class Prepend { always, first, never };

class Metaspace : public PreTokenizer {
 public:
  Metaspace(char32_t replacement, Prepend prepend, bool split)
      : replacement_(replacement), prepend_(prepend), split_(split) {}
  void split(const std::string& piece, bool first, std::vector<std::string>& out) const override {
    std::u32string s = utf8_decode(piece);
    for (char32_t& c : s)
      if (c == U' ') c = replacement_;
    const bool starts = !s.empty() && s[0] == replacement_;
    if (!starts && (prepend_ == Prepend::always || (prepend_ == Prepend::first && first)))
      s.insert(s.begin(), replacement_);
    if (!split_) {
      if (!s.empty()) out.push_back(utf8_encode(s));
      return;
    }
    // MergedWithNext: every replacement character starts a new piece.
    size_t begin = 0;
    for (size_t i = 1; i <= s.size(); ++i) {
      if (i == s.size() || s[i] == replacement_) {
        if (i > begin) out.push_back(utf8_encode(std::u32string_view(s).substr(begin, i - begin)));
        begin = i;
      }
    }
  }

 private:
  char32_t replacement_;
  Prepend prepend_;
  bool split_;
};

// Note [Split behaviors]
// Split cuts a piece at the pattern's matches into alternating runs of non-matching and
// matching text (flags flipped by `invert`), then:
//   Removed            keeps the non-matching runs only;
//   Isolated           keeps every run;
//   MergedWithPrevious appends a matching run to the run before it, unless that run was a match
//                      too (so "a-b--x" under "-+|x" gives "a-", "b--", "x");
//   MergedWithNext     the mirror image: prepends a matching run to the run after it, unless that
//                      one is a match;
//   Contiguous         joins neighbouring runs of the same kind.
// Empty matches count as (empty) matching runs: they cut the text and take part in the merging,
// and empty results are dropped. This is what HF's pre_tokenize_str shows for the cases in
// tests/data/tokenizers/split/expected.json.
enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

class Split : public PreTokenizer {
 public:
  Split(std::unique_ptr<Regex> regex, SplitBehavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}
  void split(const std::string& piece, bool, std::vector<std::string>& out) const override {
    // Text reaching a pre-tokenizer without a normalizer is the caller's bytes: PCRE2 needs
    // valid UTF-8, and HF's strings always are.
    const std::string text = utf8_lossy(piece);
    struct Run {
      size_t begin, end;
      bool match;
    };
    std::vector<Run> runs;
    size_t prev = 0;
    for (const auto& [begin, end] : regex_->find_all(text)) {
      if (begin > prev) runs.push_back({prev, begin, invert_});
      runs.push_back({begin, end, !invert_});
      prev = end;
    }
    if (prev < text.size()) runs.push_back({prev, text.size(), invert_});
    std::vector<std::pair<size_t, size_t>> kept;
    switch (behavior_) {
      case SplitBehavior::removed:
        for (const Run& r : runs)
          if (!r.match) kept.emplace_back(r.begin, r.end);
        break;
      case SplitBehavior::isolated:
        for (const Run& r : runs) kept.emplace_back(r.begin, r.end);
        break;
      case SplitBehavior::merged_with_previous: {
        bool previous_match = false;
        for (const Run& r : runs) {
          if (r.match && !previous_match && !kept.empty())
            kept.back().second = r.end;
          else
            kept.emplace_back(r.begin, r.end);
          previous_match = r.match;
        }
        break;
      }
      case SplitBehavior::merged_with_next: {
        bool next_match = false;
        for (size_t i = runs.size(); i-- > 0;) {
          const Run& r = runs[i];
          if (r.match && !next_match && !kept.empty())
            kept.back().first = r.begin;
          else
            kept.emplace_back(r.begin, r.end);
          next_match = r.match;
        }
        std::reverse(kept.begin(), kept.end());
        break;
      }
      case SplitBehavior::contiguous:
        for (size_t i = 0; i < runs.size(); ++i) {
          if (i > 0 && runs[i].match == runs[i - 1].match)
            kept.back().second = runs[i].end;
          else
            kept.emplace_back(runs[i].begin, runs[i].end);
        }
        break;
    }
    for (const auto& [begin, end] : kept)
      if (end > begin) out.push_back(text.substr(begin, end - begin));
  }

 private:
  std::unique_ptr<Regex> regex_;
  SplitBehavior behavior_;
  bool invert_;
};

class Sequence : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> items) : items_(std::move(items)) {}
  void split(const std::string& piece, bool first, std::vector<std::string>& out) const override {
    std::vector<std::string> pieces{piece};
    for (const auto& item : items_) {
      std::vector<std::string> next;
      for (size_t i = 0; i < pieces.size(); ++i) item->split(pieces[i], first && i == 0, next);
      pieces = std::move(next);
    }
    out.insert(out.end(), pieces.begin(), pieces.end());
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> items_;
};

const std::array<char32_t, 256>& byte_table() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      t[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

}  // namespace

char32_t byte_to_unicode(uint8_t byte) { return byte_table()[byte]; }

std::optional<uint8_t> unicode_to_byte(char32_t c) {
  static const std::unordered_map<char32_t, uint8_t> reverse = [] {
    std::unordered_map<char32_t, uint8_t> r;
    for (int b = 0; b < 256; ++b) r[byte_table()[b]] = static_cast<uint8_t>(b);
    return r;
  }();
  auto it = reverse.find(c);
  if (it == reverse.end()) return std::nullopt;
  return it->second;
}

std::unique_ptr<PreTokenizer> make_byte_level_pre_tokenizer(bool add_prefix_space) {
  return std::make_unique<ByteLevel>(add_prefix_space, true);
}

std::unique_ptr<PreTokenizer> make_bert_pre_tokenizer() {
  return std::make_unique<BertPreTokenizer>();
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& section, const JsonPlace& place) {
  if (section.is_null()) return nullptr;
  const std::string type = json_type(section, place);
  if (type == "ByteLevel")
    return std::make_unique<ByteLevel>(json_bool(section, "add_prefix_space", true, place),
                                       json_bool(section, "use_regex", true, place));
  if (type == "BertPreTokenizer") return make_bert_pre_tokenizer();
  if (type == "WhitespaceSplit") return std::make_unique<WhitespaceSplit>();
  if (type == "Metaspace") {
    const std::u32string replacement = utf8_decode(json_string(section, "replacement", place));
    if (replacement.size() != 1) json_error(place.at("replacement"), "expected one character");
    Prepend prepend =
        json_bool(section, "add_prefix_space", true, place) ? Prepend::always : Prepend::never;
    if (section.contains("prepend_scheme")) {
      const std::string scheme = json_string(section, "prepend_scheme", place);
      if (scheme == "always")
        prepend = Prepend::always;
      else if (scheme == "first")
        prepend = Prepend::first;
      else if (scheme == "never")
        prepend = Prepend::never;
      else
        json_error(place.at("prepend_scheme"), "expected always, first or never");
    }
    return std::make_unique<Metaspace>(replacement[0], prepend,
                                       json_bool(section, "split", true, place));
  }
  if (type == "Split") {
    const JsonPlace pattern_place = place.at("pattern");
    const json& pattern = json_field(section, "pattern", place);
    std::string regex;
    if (pattern.is_object() && pattern.size() == 1 && pattern.contains("Regex") &&
        pattern["Regex"].is_string())
      regex = pattern["Regex"].get<std::string>();
    else if (pattern.is_object() && pattern.size() == 1 && pattern.contains("String") &&
             pattern["String"].is_string())
      regex = regex_escape(pattern["String"].get<std::string>());
    else
      json_error(pattern_place, "expected {\"Regex\": \"...\"} or {\"String\": \"...\"}");
    const JsonPlace compiled_place =
        pattern_place.at(pattern.contains("Regex") ? "Regex" : "String");
    auto compiled = std::make_unique<Regex>(
        regex, compiled_place.file + ": field '" + compiled_place.field + "'");
    const std::string behavior = json_string(section, "behavior", place);
    static const std::pair<const char*, SplitBehavior> kBehaviors[] = {
        {"Removed", SplitBehavior::removed},
        {"Isolated", SplitBehavior::isolated},
        {"MergedWithPrevious", SplitBehavior::merged_with_previous},
        {"MergedWithNext", SplitBehavior::merged_with_next},
        {"Contiguous", SplitBehavior::contiguous}};
    const SplitBehavior* found = nullptr;
    for (const auto& [name, value] : kBehaviors)
      if (behavior == name) found = &value;
    if (found == nullptr)
      json_error(place.at("behavior"),
                 "unknown behavior '" + behavior +
                     "' (expected Removed, Isolated, MergedWithPrevious, MergedWithNext or "
                     "Contiguous)");
    return std::make_unique<Split>(std::move(compiled), *found,
                                   json_bool(section, "invert", false, place));
  }
  if (type == "Sequence") {
    const json& list = json_field(section, "pretokenizers", place);
    if (!list.is_array()) json_error(place.at("pretokenizers"), "expected an array");
    std::vector<std::unique_ptr<PreTokenizer>> items;
    for (size_t i = 0; i < list.size(); ++i)
      if (auto item =
              make_pre_tokenizer(list[i], place.at("pretokenizers[" + std::to_string(i) + "]")))
        items.push_back(std::move(item));
    return std::make_unique<Sequence>(std::move(items));
  }
  LIBAI_THROW(Unsupported, place.file, ": field '", place.field, ".type': pre-tokenizer type '",
              type, "' is not supported");
}

}  // namespace libai::tokenizers
