// Tokenizers with exact Hugging Face parity: byte-level BPE (GPT-2, RoBERTa), WordPiece (BERT)
// and Unigram (T5-style, Metaspace), loaded from `tokenizer.json` or the legacy `vocab.txt` /
// `vocab.json` + `merges.txt` files; SentencePiece `.model` files through libsentencepiece
// (sentencepiece.h). See docs/TOKENIZERS.md.
//
//   auto tok = libai::tokenizers::load_tokenizer("models/minilm");   // a folder or a file
//   Encoding e = tok->encode("Hello, world!");        // ids [101, 7592, 1010, 2088, 999, 102]
//   std::string text = tok->decode(e.ids, /*skip_special_tokens=*/true);   // "hello, world!"
//   auto batch = tok->encode_batch({"a", "b c"}, {.padding = Padding::longest});
//
// Like the Hugging Face pipeline: added tokens are matched first (longest leftmost, honouring
// single_word / lstrip / rstrip / normalized), the rest goes normalizer -> pre-tokenizer ->
// model, then the post-processor adds the special tokens. The padding and truncation stored in
// a tokenizer.json are not applied by encode (as transformers resets them per call): pass
// EncodeOptions instead.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace libai::tokenizers {

struct Encoding {
  std::vector<int32_t> ids;
  std::vector<std::string> tokens;
  std::vector<int32_t> attention_mask;  // 1 for real tokens, 0 for padding
};

enum class Padding { none, longest, max_length };
enum class Side { left, right };

struct EncodeOptions {
  Padding padding = Padding::none;
  size_t max_length = 0;    // for Padding::max_length and truncation
  bool truncation = false;  // cut to max_length, special tokens included (right side)
  Side padding_side = Side::right;
  std::optional<int32_t> pad_id;  // default: the pad token's id, else 0
  bool add_special_tokens = true;
};

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool single_word = false;  // match only as a whole word
  bool lstrip = false;       // swallow whitespace on the left
  bool rstrip = false;       // swallow whitespace on the right
  bool normalized = false;   // matched in the normalized text rather than the raw text
};

// Named special tokens, where the files name them (empty if not).
struct SpecialTokens {
  std::string bos, eos, pad, unk, cls, sep, mask;
};

// The internal stages (pipeline.h).
class Normalizer;
class PreTokenizer;
class Model;
class PostProcessor;
class Decoder;

class Tokenizer {
 public:
  Tokenizer(std::unique_ptr<Model> model, std::unique_ptr<Normalizer> normalizer,
            std::unique_ptr<PreTokenizer> pre_tokenizer,
            std::unique_ptr<PostProcessor> post_processor, std::unique_ptr<Decoder> decoder,
            std::vector<AddedToken> added_tokens, SpecialTokens special_tokens);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  Encoding encode(std::string_view text, bool add_special_tokens = true) const;
  std::vector<Encoding> encode_batch(const std::vector<std::string>& texts,
                                     const EncodeOptions& options = {}) const;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;
  // The padding of encode_batch (options.padding, max_length, padding_side, pad_id) applied to
  // encodings made without it: a caller that regroups encodings pads each group alone.
  void pad(std::vector<Encoding>& encodings, const EncodeOptions& options) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  // The model's vocabulary plus the added tokens outside it (HF's with_added_tokens=True).
  size_t vocab_size() const;
  const SpecialTokens& special_tokens() const { return special_tokens_; }
  const std::vector<AddedToken>& added_tokens() const { return added_tokens_; }
  // The id of a named special token ("[PAD]" ...), if the tokenizer knows it.
  std::optional<int32_t> special_id(const std::string& token) const;

 private:
  struct Split;
  std::vector<Split> split_added(std::string_view text, bool normalized) const;

  std::unique_ptr<Model> model_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
  std::vector<AddedToken> added_tokens_;
  std::unordered_map<std::string, size_t> added_by_content_;
  std::unordered_map<int32_t, size_t> added_by_id_;
  SpecialTokens special_tokens_;
};

// Loads a tokenizer from a folder (tokenizer.json, else vocab.json + merges.txt, else
// vocab.txt, else spiece.model / tokenizer.model) or from one of those files. Throws NotFound
// for a missing file, CorruptInput for malformed JSON or a missing/mistyped field (naming the
// file and the field) or a corrupt .model file, Unsupported for a component type it does not
// implement.
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& path);
// Whether `folder` holds one of the files load_tokenizer(folder) reads. A model folder may have
// none: generation from token ids needs no tokenizer (transformers works the same way).
bool has_tokenizer(const std::filesystem::path& folder);
// Writes the tokenizer a GGUF file's metadata describes as tokenizer.json and
// special_tokens_map.json into `folder` (nothing when the file has none; convert uses it).
void write_gguf_tokenizer(const std::filesystem::path& gguf, const std::filesystem::path& folder);
// The NotFound load_tokenizer(folder) throws for a folder without tokenizer files.
[[noreturn]] void throw_no_tokenizer(const std::filesystem::path& folder);

}  // namespace libai::tokenizers
