// Internal stages of a Tokenizer and their factories from tokenizer.json sections. Each
// factory throws CorruptInput naming the file and the field path on a malformed section and
// Unsupported on an unknown "type".
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/tokenizers/tokenizer.h"

namespace libai::checkpoint {
class GgufFile;
}

namespace libai::tokenizers {

using nlohmann::json;

// Where a JSON value came from, for error messages: "<file>: field 'model.vocab'".
struct JsonPlace {
  std::string file;
  std::string field;
  JsonPlace at(const std::string& key) const {
    return {file, field.empty() ? key : field + "." + key};
  }
};

// A tokenizer.json document (loader.cc); `name` stands for the file in errors.
std::unique_ptr<Tokenizer> tokenizer_from_json(const json& root, const std::string& name,
                                               SpecialTokens special);
// GGUF files (gguf_vocab.cc): a regular file starting with "GGUF"; the tokenizer its
// tokenizer.ggml.* metadata describes; whether it has one.
bool is_gguf_path(const std::filesystem::path& path);
std::unique_ptr<Tokenizer> load_gguf_tokenizer(const std::filesystem::path& path);
bool gguf_has_tokenizer(const std::filesystem::path& path);
std::unique_ptr<Tokenizer> gguf_tokenizer(const checkpoint::GgufFile& file);

[[noreturn]] void json_error(const JsonPlace& place, const std::string& what);
const json& json_field(const json& object, const std::string& key, const JsonPlace& place);
std::string json_string(const json& object, const std::string& key, const JsonPlace& place);
bool json_bool(const json& object, const std::string& key, bool fallback, const JsonPlace& place);
// "type" of a component, or Unsupported naming the kind ("normalizer") and the file.
std::string json_type(const json& object, const JsonPlace& place);

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::u32string& text) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits one piece; `first` is true for the piece that starts the original text.
  virtual void split(const std::string& piece, bool first, std::vector<std::string>& out) const = 0;
};

struct Token {
  int32_t id;
  std::string value;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual void tokenize(const std::string& piece, std::vector<Token>& out) const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual std::optional<std::string> id_to_token(int32_t id) const = 0;
  virtual size_t vocab_size() const = 0;
};

// A model over a token <-> id vocabulary (BPE, WordPiece): the lookups every such model
// answers the same way.
class VocabModel : public Model {
 public:
  explicit VocabModel(std::vector<std::pair<std::string, int32_t>> vocab) {
    for (auto& [token, id] : vocab) {
      id_to_token_[id] = token;
      vocab_.emplace(std::move(token), id);
    }
  }
  std::optional<int32_t> token_to_id(std::string_view token) const override {
    auto it = vocab_.find(std::string(token));
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
  }
  std::optional<std::string> id_to_token(int32_t id) const override {
    auto it = id_to_token_.find(id);
    if (it == id_to_token_.end()) return std::nullopt;
    return it->second;
  }
  size_t vocab_size() const override { return vocab_.size(); }

 protected:
  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<int32_t, std::string> id_to_token_;
};

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual size_t added_count() const = 0;  // special tokens added to a single sequence
  virtual void process(Encoding& encoding) const = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual std::vector<std::string> decode_chain(std::vector<std::string> tokens) const = 0;
};

std::unique_ptr<Normalizer> make_normalizer(const json& section, const JsonPlace& place);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& section, const JsonPlace& place);
std::unique_ptr<Model> make_model(const json& section, const JsonPlace& place);
std::unique_ptr<PostProcessor> make_post_processor(const json& section, const JsonPlace& place);
std::unique_ptr<Decoder> make_decoder(const json& section, const JsonPlace& place);

std::unique_ptr<Model> make_bpe_from_json(const json& section, const JsonPlace& place);
std::unique_ptr<Model> make_wordpiece_from_json(const json& section, const JsonPlace& place);
std::unique_ptr<Model> make_unigram_from_json(const json& section, const JsonPlace& place);

// Building blocks the legacy loaders assemble directly.
std::unique_ptr<Normalizer> make_bert_normalizer(bool clean_text, bool chinese_chars,
                                                 bool strip_accents, bool lowercase);
std::unique_ptr<PreTokenizer> make_byte_level_pre_tokenizer(bool add_prefix_space);
std::unique_ptr<PreTokenizer> make_bert_pre_tokenizer();
std::unique_ptr<Model> make_bpe(std::vector<std::pair<std::string, int32_t>> vocab,
                                std::vector<std::pair<std::string, std::string>> merges,
                                std::optional<std::string> unk_token);
std::unique_ptr<Model> make_wordpiece(std::vector<std::pair<std::string, int32_t>> vocab,
                                      std::string unk_token, std::string prefix,
                                      size_t max_input_chars_per_word);
std::unique_ptr<PostProcessor> make_cls_sep_processor(Token cls, Token sep);
std::unique_ptr<Decoder> make_byte_level_decoder();
std::unique_ptr<Decoder> make_wordpiece_decoder(std::string prefix, bool cleanup);

// GPT-2's reversible byte <-> printable code point map.
char32_t byte_to_unicode(uint8_t byte);
std::optional<uint8_t> unicode_to_byte(char32_t c);

}  // namespace libai::tokenizers
