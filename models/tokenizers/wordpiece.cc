// The WordPiece model: greedy longest-match-first with a continuation prefix ("##"); a word
// that cannot be covered, or is longer than max_input_chars_per_word, becomes the unknown token.
#include <unordered_map>

#include "models/tokenizers/pipeline.h"
#include "models/tokenizers/unicode.h"
#include "runtime/error.h"

namespace libai::tokenizers {
namespace {

class WordPiece : public VocabModel {
 public:
  WordPiece(std::vector<std::pair<std::string, int32_t>> vocab, std::string unk_token,
            std::string prefix, size_t max_chars, const std::string& where)
      : VocabModel(std::move(vocab)),
        unk_token_(std::move(unk_token)),
        prefix_(std::move(prefix)),
        max_chars_(max_chars) {
    auto it = vocab_.find(unk_token_);
    LIBAI_CHECK_KIND(CorruptInput, it != vocab_.end(), where, ": WordPiece unk_token '", unk_token_,
                     "' is not in the vocabulary");
    unk_id_ = it->second;
  }

  void tokenize(const std::string& piece, std::vector<Token>& out) const override {
    const std::u32string chars = utf8_decode(piece);
    if (chars.size() > max_chars_) {
      out.push_back({unk_id_, unk_token_});
      return;
    }
    std::vector<Token> pieces;
    size_t start = 0;
    while (start < chars.size()) {
      size_t end = chars.size();
      bool found = false;
      for (; start < end; --end) {
        std::string candidate = utf8_encode(std::u32string_view(chars).substr(start, end - start));
        if (start > 0) candidate = prefix_ + candidate;
        if (auto it = vocab_.find(candidate); it != vocab_.end()) {
          pieces.push_back({it->second, std::move(candidate)});
          found = true;
          break;
        }
      }
      if (!found) {
        out.push_back({unk_id_, unk_token_});
        return;
      }
      start = end;
    }
    out.insert(out.end(), pieces.begin(), pieces.end());
  }

 private:
  std::string unk_token_, prefix_;
  size_t max_chars_;
  int32_t unk_id_ = 0;
};

}  // namespace

std::unique_ptr<Model> make_wordpiece(std::vector<std::pair<std::string, int32_t>> vocab,
                                      std::string unk_token, std::string prefix,
                                      size_t max_input_chars_per_word) {
  return std::make_unique<WordPiece>(std::move(vocab), std::move(unk_token), std::move(prefix),
                                     max_input_chars_per_word, "vocab.txt");
}

std::unique_ptr<Model> make_wordpiece_from_json(const json& section, const JsonPlace& place) {
  const json& vocab_json = json_field(section, "vocab", place);
  if (!vocab_json.is_object()) json_error(place.at("vocab"), "expected an object token -> id");
  std::vector<std::pair<std::string, int32_t>> vocab;
  for (auto it = vocab_json.begin(); it != vocab_json.end(); ++it) {
    if (!it.value().is_number_integer())
      json_error(place.at("vocab." + it.key()), "expected an id");
    vocab.emplace_back(it.key(), it.value().get<int32_t>());
  }
  size_t max_chars = 100;
  if (section.contains("max_input_chars_per_word")) {
    const json& m = section["max_input_chars_per_word"];
    if (!m.is_number_unsigned())
      json_error(place.at("max_input_chars_per_word"), "expected a count");
    max_chars = m.get<size_t>();
  }
  std::string prefix = "##";
  if (section.contains("continuing_subword_prefix"))
    prefix = json_string(section, "continuing_subword_prefix", place);
  return std::make_unique<WordPiece>(std::move(vocab), json_string(section, "unk_token", place),
                                     std::move(prefix), max_chars,
                                     place.file + ": field '" + place.at("unk_token").field + "'");
}

}  // namespace libai::tokenizers
