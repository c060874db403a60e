// Normalizers of tokenizer.json: BertNormalizer, Lowercase, NFD, NFC, NFKD, NFKC, Precompiled
// (SentencePiece's charsmap), StripAccents, Strip, Replace (string patterns), Prepend and
// Sequence.
#include "models/tokenizers/charsmap.h"
#include "models/tokenizers/pipeline.h"
#include "models/tokenizers/unicode.h"
#include "runtime/error.h"

namespace libai::tokenizers {
namespace {

bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

void lowercase(std::u32string& text) {
  std::u32string out;
  out.reserve(text.size());
  for (char32_t c : text) append_lower(out, c);
  text = std::move(out);
}

void strip_accents(std::u32string& text) {
  std::u32string out;
  for (char32_t c : nfd(text))
    if (char_class(c) != CharClass::nonspacing_mark) out.push_back(c);
  text = std::move(out);
}

class BertNormalizer : public Normalizer {
 public:
  BertNormalizer(bool clean, bool chinese, bool strip, bool lower)
      : clean_(clean), chinese_(chinese), strip_(strip), lower_(lower) {}
  void normalize(std::u32string& text) const override {
    if (clean_) {
      std::u32string out;
      for (char32_t c : text) {
        const bool tab_like = c == U'\t' || c == U'\n' || c == U'\r';
        if (c == 0 || c == 0xFFFD || (!tab_like && char_class(c) == CharClass::control)) continue;
        out.push_back(tab_like || is_white_space(c) ? U' ' : c);
      }
      text = std::move(out);
    }
    if (chinese_) {
      std::u32string out;
      for (char32_t c : text) {
        if (is_chinese_char(c)) {
          out += U' ';
          out += c;
          out += U' ';
        } else {
          out.push_back(c);
        }
      }
      text = std::move(out);
    }
    if (strip_) strip_accents(text);
    if (lower_) lowercase(text);
  }

 private:
  bool clean_, chinese_, strip_, lower_;
};

class FunctionNormalizer : public Normalizer {
 public:
  explicit FunctionNormalizer(void (*fn)(std::u32string&)) : fn_(fn) {}
  void normalize(std::u32string& text) const override { fn_(text); }

 private:
  void (*fn_)(std::u32string&);
};

class Strip : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::u32string& text) const override {
    size_t begin = 0, end = text.size();
    if (left_)
      while (begin < end && is_white_space(text[begin])) ++begin;
    if (right_)
      while (end > begin && is_white_space(text[end - 1])) --end;
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

class Replace : public Normalizer {
 public:
  Replace(std::u32string pattern, std::u32string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::u32string& text) const override {
    if (pattern_.empty()) return;
    std::u32string out;
    size_t at = 0;
    for (size_t hit; (hit = text.find(pattern_, at)) != std::u32string::npos;
         at = hit + pattern_.size()) {
      out.append(text, at, hit - at);
      out += content_;
    }
    out.append(text, at, std::u32string::npos);
    text = std::move(out);
  }

 private:
  std::u32string pattern_, content_;
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::u32string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::u32string& text) const override {
    if (!text.empty()) text = prefix_ + text;
  }

 private:
  std::u32string prefix_;
};

// Note [Precompiled by grapheme]
// As the Hugging Face Precompiled normalizer (spm_precompiled) does, to give its ids: a grapheme
// cluster of fewer than 6 UTF-8 bytes is looked up whole, and the first (shortest) key that
// prefixes it replaces the whole cluster, marks after the key included ("e\u0301\u0301" under a
// rule for "e\u0301" gives one "é"); a longer cluster, or one with no key, is looked up code
// point by code point. SentencePiece's own normalizer takes the longest match instead.
class Precompiled : public Normalizer {
 public:
  explicit Precompiled(Charsmap map) : map_(std::move(map)) {}
  void normalize(std::u32string& text) const override {
    std::string out;
    std::string piece;
    for (size_t begin = 0, end; begin < text.size(); begin = end) {
      end = grapheme_end(text, begin);
      piece = utf8_encode(std::u32string_view(text).substr(begin, end - begin));
      if (piece.size() < 6) {
        if (auto whole = map_.replacement(piece)) {
          out += *whole;
          continue;
        }
      }
      for (size_t i = begin; i < end; ++i) {
        piece.clear();
        utf8_append(piece, text[i]);
        auto one = map_.replacement(piece);
        out += one ? *one : std::string_view(piece);
      }
    }
    text = utf8_decode(out);
  }

 private:
  Charsmap map_;
};

// Standard base64 with padding (how tokenizer.json stores precompiled_charsmap).
std::string base64_decode(const std::string& text, const JsonPlace& place) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  size_t length = text.size();
  while (length > 0 && text[length - 1] == '=' && text.size() - length < 2) --length;
  if (text.size() % 4 != 0 || length % 4 == 1)
    json_error(place, "not base64 (length " + std::to_string(text.size()) + ")");
  std::string out;
  out.reserve(length / 4 * 3 + 2);
  uint32_t bits = 0;
  int count = 0;
  for (size_t i = 0; i < length; ++i) {
    const int v = value(text[i]);
    if (v < 0) json_error(place, "not base64 (character " + std::to_string(i) + ")");
    bits = (bits << 6) | uint32_t(v);
    if (++count == 4) {
      out.push_back(char(bits >> 16));
      out.push_back(char(bits >> 8));
      out.push_back(char(bits));
      bits = 0;
      count = 0;
    }
  }
  if (count == 2) out.push_back(char(bits >> 4));
  if (count == 3) {
    out.push_back(char(bits >> 10));
    out.push_back(char(bits >> 2));
  }
  return out;
}

class Sequence : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> items) : items_(std::move(items)) {}
  void normalize(std::u32string& text) const override {
    for (const auto& item : items_) item->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> items_;
};

}  // namespace

std::unique_ptr<Normalizer> make_bert_normalizer(bool clean_text, bool chinese_chars,
                                                 bool strip_accents, bool lowercase) {
  return std::make_unique<BertNormalizer>(clean_text, chinese_chars, strip_accents, lowercase);
}

std::unique_ptr<Normalizer> make_normalizer(const json& section, const JsonPlace& place) {
  if (section.is_null()) return nullptr;
  const std::string type = json_type(section, place);
  if (type == "BertNormalizer") {
    const bool lower = json_bool(section, "lowercase", true, place);
    const json& strip = section.contains("strip_accents") ? section["strip_accents"] : json();
    if (!strip.is_null() && !strip.is_boolean())
      json_error(place.at("strip_accents"), "expected true, false or null");
    return make_bert_normalizer(json_bool(section, "clean_text", true, place),
                                json_bool(section, "handle_chinese_chars", true, place),
                                strip.is_null() ? lower : strip.get<bool>(), lower);
  }
  if (type == "Lowercase") return std::make_unique<FunctionNormalizer>(lowercase);
  if (type == "StripAccents") return std::make_unique<FunctionNormalizer>(strip_accents);
  if (type == "NFD")
    return std::make_unique<FunctionNormalizer>([](std::u32string& t) { t = nfd(t); });
  if (type == "NFC")
    return std::make_unique<FunctionNormalizer>([](std::u32string& t) { t = nfc(t); });
  if (type == "NFKD")
    return std::make_unique<FunctionNormalizer>([](std::u32string& t) { t = nfkd(t); });
  if (type == "NFKC")
    return std::make_unique<FunctionNormalizer>([](std::u32string& t) { t = nfkc(t); });
  if (type == "Precompiled") {
    const JsonPlace at = place.at("precompiled_charsmap");
    const json& blob = json_field(section, "precompiled_charsmap", place);
    if (!blob.is_string()) json_error(at, "expected a base64 string");
    return std::make_unique<Precompiled>(Charsmap(base64_decode(blob.get<std::string>(), at),
                                                  at.file + ": field '" + at.field + "'"));
  }
  if (type == "Strip")
    return std::make_unique<Strip>(json_bool(section, "strip_left", true, place),
                                   json_bool(section, "strip_right", true, place));
  if (type == "Replace") {
    const json& pattern = json_field(section, "pattern", place);
    if (!pattern.is_object() || !pattern.contains("String") || !pattern["String"].is_string())
      LIBAI_THROW(Unsupported, place.file, ": field '", place.at("pattern").field,
                  "': only {\"String\": ...} patterns are supported (regex patterns are not)");
    return std::make_unique<Replace>(utf8_decode(pattern["String"].get<std::string>()),
                                     utf8_decode(json_string(section, "content", place)));
  }
  if (type == "Prepend")
    return std::make_unique<Prepend>(utf8_decode(json_string(section, "prepend", place)));
  if (type == "Sequence") {
    const json& list = json_field(section, "normalizers", place);
    if (!list.is_array()) json_error(place.at("normalizers"), "expected an array");
    std::vector<std::unique_ptr<Normalizer>> items;
    for (size_t i = 0; i < list.size(); ++i)
      if (auto item = make_normalizer(list[i], place.at("normalizers[" + std::to_string(i) + "]")))
        items.push_back(std::move(item));
    return std::make_unique<Sequence>(std::move(items));
  }
  LIBAI_THROW(Unsupported, place.file, ": field '", place.field, ".type': normalizer type '", type,
              "' is not supported");
}

}  // namespace libai::tokenizers
