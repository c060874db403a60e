// Tokenizer: added-token matching, the normalizer -> pre-tokenizer -> model pipeline,
// post-processing, truncation, padding and decoding, in Hugging Face's order.
#include "models/tokenizers/tokenizer.h"

#include <algorithm>

#include "models/tokenizers/pipeline.h"
#include "models/tokenizers/unicode.h"
#include "runtime/error.h"

namespace libai::tokenizers {
namespace {

bool is_word_char(char32_t c) {
  return c == U'_' || is_alphanumeric(c) || char_class(c) == CharClass::nonspacing_mark;
}

char32_t last_char(std::string_view s) {
  size_t i = s.size();
  while (i > 0 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i;
  return i == 0 ? 0 : utf8_decode(s.substr(i - 1))[0];
}

char32_t first_char(std::string_view s) {
  return s.empty() ? 0 : utf8_decode(s.substr(0, std::min<size_t>(4, s.size())))[0];
}

}  // namespace

struct Tokenizer::Split {
  std::string text;
  size_t offset = 0;  // byte offset of the split in the text it came from
  const AddedToken* added = nullptr;
};

Tokenizer::Tokenizer(std::unique_ptr<Model> model, std::unique_ptr<Normalizer> normalizer,
                     std::unique_ptr<PreTokenizer> pre_tokenizer,
                     std::unique_ptr<PostProcessor> post_processor,
                     std::unique_ptr<Decoder> decoder, std::vector<AddedToken> added_tokens,
                     SpecialTokens special_tokens)
    : model_(std::move(model)),
      normalizer_(std::move(normalizer)),
      pre_tokenizer_(std::move(pre_tokenizer)),
      post_processor_(std::move(post_processor)),
      decoder_(std::move(decoder)),
      added_tokens_(std::move(added_tokens)),
      special_tokens_(std::move(special_tokens)) {
  LIBAI_ASSERT(model_ != nullptr);
  for (size_t i = 0; i < added_tokens_.size(); ++i) {
    added_by_content_[added_tokens_[i].content] = i;
    added_by_id_[added_tokens_[i].id] = i;
  }
}

Tokenizer::~Tokenizer() = default;

// Leftmost-longest matching like HF's Aho-Corasick pass; a match rejected by single_word is
// still consumed (the automaton's iterator has moved past it).
std::vector<Tokenizer::Split> Tokenizer::split_added(std::string_view text, bool normalized) const {
  std::vector<Split> out;
  size_t start_offset = 0;
  auto push_text = [&](size_t begin, size_t end) {
    if (end > begin) out.push_back({std::string(text.substr(begin, end - begin)), begin, nullptr});
  };
  for (size_t i = 0; i < text.size();) {
    const AddedToken* best = nullptr;
    for (const AddedToken& t : added_tokens_) {
      if (t.normalized != normalized || t.content.empty()) continue;
      if (text.compare(i, t.content.size(), t.content) == 0 &&
          (best == nullptr || t.content.size() > best->content.size()))
        best = &t;
    }
    if (best == nullptr) {
      ++i;
      continue;
    }
    size_t start = i, stop = i + best->content.size();
    i = stop;
    if (best->single_word) {
      const bool left_ok = start == 0 || !is_word_char(last_char(text.substr(0, start)));
      const bool right_ok = stop == text.size() || !is_word_char(first_char(text.substr(stop)));
      if (!left_ok || !right_ok) continue;
    }
    if (best->lstrip) {
      while (start > start_offset) {
        const char32_t c = last_char(text.substr(0, start));
        if (!is_white_space(c)) break;
        std::string bytes;
        utf8_append(bytes, c);
        start -= bytes.size();
      }
    }
    if (best->rstrip) {
      while (stop < text.size()) {
        const char32_t c = first_char(text.substr(stop));
        if (!is_white_space(c)) break;
        std::string bytes;
        utf8_append(bytes, c);
        stop += bytes.size();
      }
      i = std::max(i, stop);
    }
    push_text(start_offset, start);
    // The token's text includes what lstrip/rstrip swallowed, as in HF.
    out.push_back({std::string(text.substr(start, stop - start)), start, best});
    start_offset = stop;
  }
  push_text(start_offset, text.size());
  return out;
}

static void append_model_tokens(const Model& model, const PreTokenizer* pre,
                                const std::string& text, bool first, Encoding& e) {
  std::vector<std::string> words;
  if (pre != nullptr)
    pre->split(text, first, words);
  else
    words.push_back(text);
  std::vector<Token> tokens;
  for (const std::string& w : words)
    if (!w.empty()) model.tokenize(w, tokens);
  for (auto& t : tokens) {
    e.ids.push_back(t.id);
    e.tokens.push_back(std::move(t.value));
  }
}

Encoding Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  EncodeOptions options;
  options.add_special_tokens = add_special_tokens;
  return encode_batch({std::string(text)}, options)[0];
}

std::vector<Encoding> Tokenizer::encode_batch(const std::vector<std::string>& texts,
                                              const EncodeOptions& options) const {
  const size_t added =
      options.add_special_tokens && post_processor_ ? post_processor_->added_count() : 0;
  if (options.truncation)
    LIBAI_CHECK(options.max_length >= added, "Tokenizer::encode_batch: max_length ",
                options.max_length, " leaves no room for the ", added, " special tokens");
  if (options.padding == Padding::max_length)
    LIBAI_CHECK(options.max_length > 0,
                "Tokenizer::encode_batch: Padding::max_length needs "
                "EncodeOptions::max_length > 0");
  std::vector<Encoding> out;
  out.reserve(texts.size());
  for (const std::string& text : texts) {
    Encoding e;
    for (const Split& raw : split_added(text, /*normalized=*/false)) {
      if (raw.added != nullptr) {
        e.ids.push_back(raw.added->id);
        e.tokens.push_back(raw.text);
        continue;
      }
      std::string normalized = raw.text;
      if (normalizer_) {
        std::u32string s = utf8_decode(raw.text);
        normalizer_->normalize(s);
        normalized = utf8_encode(s);
      }
      for (const Split& piece : split_added(normalized, /*normalized=*/true)) {
        if (piece.added != nullptr) {
          e.ids.push_back(piece.added->id);
          e.tokens.push_back(piece.text);
        } else {
          const bool first = raw.offset == 0 && piece.offset == 0;
          append_model_tokens(*model_, pre_tokenizer_.get(), piece.text, first, e);
        }
      }
    }
    if (options.truncation && e.ids.size() > options.max_length - added) {
      e.ids.resize(options.max_length - added);
      e.tokens.resize(options.max_length - added);
    }
    if (options.add_special_tokens && post_processor_) post_processor_->process(e);
    e.attention_mask.assign(e.ids.size(), 1);
    out.push_back(std::move(e));
  }
  pad(out, options);
  return out;
}

void Tokenizer::pad(std::vector<Encoding>& encodings, const EncodeOptions& options) const {
  if (options.padding == Padding::none) return;
  LIBAI_CHECK(options.padding != Padding::max_length || options.max_length > 0,
              "Tokenizer::pad: Padding::max_length needs EncodeOptions::max_length > 0");
  size_t target = options.max_length;
  if (options.padding == Padding::longest) {
    target = 0;
    for (const Encoding& e : encodings) target = std::max(target, e.ids.size());
  }
  const std::string pad_token = special_tokens_.pad.empty() ? "[PAD]" : special_tokens_.pad;
  const int32_t pad_id = options.pad_id ? *options.pad_id : special_id(pad_token).value_or(0);
  for (Encoding& e : encodings) {
    if (e.ids.size() >= target) continue;
    const size_t n = target - e.ids.size();
    const bool left = options.padding_side == Side::left;
    e.ids.insert(left ? e.ids.begin() : e.ids.end(), n, pad_id);
    e.tokens.insert(left ? e.tokens.begin() : e.tokens.end(), n, pad_token);
    e.attention_mask.insert(left ? e.attention_mask.begin() : e.attention_mask.end(), n, 0);
  }
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  for (int32_t id : ids) {
    if (auto it = added_by_id_.find(id); it != added_by_id_.end()) {
      const AddedToken& t = added_tokens_[it->second];
      if (!(skip_special_tokens && t.special)) tokens.push_back(t.content);
    } else if (auto token = model_->id_to_token(id)) {
      tokens.push_back(std::move(*token));  // unknown ids are dropped, as HF does
    }
  }
  if (decoder_) tokens = decoder_->decode_chain(std::move(tokens));
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0 && !decoder_) out += ' ';
    out += tokens[i];
  }
  return out;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto it = added_by_content_.find(std::string(token)); it != added_by_content_.end())
    return added_tokens_[it->second].id;
  return model_->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (auto it = added_by_id_.find(id); it != added_by_id_.end())
    return added_tokens_[it->second].content;
  return model_->id_to_token(id);
}

size_t Tokenizer::vocab_size() const {
  size_t n = model_->vocab_size();
  for (const AddedToken& t : added_tokens_)
    if (!model_->token_to_id(t.content)) ++n;
  return n;
}

std::optional<int32_t> Tokenizer::special_id(const std::string& token) const {
  if (token.empty()) return std::nullopt;
  return token_to_id(token);
}

}  // namespace libai::tokenizers
