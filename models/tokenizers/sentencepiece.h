// SentencePiece `.model` tokenizers (T5's spiece.model, Llama's tokenizer.model) through
// libsentencepiece. load_tokenizer() calls this for a folder holding only such a file, or for
// the file itself; see docs/TOKENIZERS.md.
//
//   auto tok = libai::tokenizers::load_sentencepiece("models/t5/spiece.model");
//   Encoding e = tok->encode("Hello </s> world");   // ... "</s>" as one id ... then eos
//   std::string text = tok->decode(e.ids, /*skip_special_tokens=*/true);
//
// The processor normalises and segments the text itself (no separate normalizer or
// pre-tokenizer), as transformers' slow sentencepiece tokenizers in legacy mode: the text is
// first split on the special tokens (the model's control pieces and unk, the special tokens of
// tokenizer_config.json / special_tokens_map.json, T5's <extra_id_N>), then each part is
// encoded on its own. eos is appended for T5-style models (spiece.model, a T5 tokenizer_class)
// and bos prepended for Llama-style ones (tokenizer.model, a Llama tokenizer_class), unless
// tokenizer_config.json says add_bos_token / add_eos_token.
#pragma once

#include <filesystem>
#include <memory>

#include "models/tokenizers/tokenizer.h"

namespace libai::tokenizers {

// Throws NotFound for a missing file and CorruptInput naming the file for one that
// libsentencepiece rejects, or for malformed JSON in the configs next to it.
std::unique_ptr<Tokenizer> load_sentencepiece(const std::filesystem::path& model_file);

}  // namespace libai::tokenizers
