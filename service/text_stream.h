// The text of a generated sequence as it grows, one token at a time: incremental
// detokenisation that only ever hands out complete UTF-8, and stop strings.
//
//   TextStream stream(&tokenizer, {"\n\n"});
//   for (token : ...) {
//     std::string piece = stream.push(token);   // new text safe to show ("" while a
//     if (stream.stopped()) break;              //  character or a possible stop is pending)
//   }
//   std::string rest = stream.finish();         // what was held back, once no token follows
//   stream.text();                              // everything, the stop string excluded
//
// Note [Incremental detokenisation]: decoding one token alone is wrong for byte-level BPE (a
// character may span tokens) and for SentencePiece (a piece's leading space depends on what
// precedes it). The stream decodes a short window instead: the tokens from prefix_offset (a
// few already shown tokens, as context) to the end, and counts as new only what that adds to
// the decode of the context alone. While the window's text ends in U+FFFD (the decoders'
// mark for incomplete UTF-8) nothing is new: the next token completes the character. Text
// that could still turn into a stop string (a suffix that is a prefix of one) is held back
// too, so the stop string itself is never handed out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/tokenizers/tokenizer.h"

namespace libai::service {

class TextStream {
 public:
  // tokenizer may be null (ids only: no text, and then `stop` must be empty).
  TextStream(const tokenizers::Tokenizer* tokenizer, std::vector<std::string> stop);
  // The new text after `token` that is safe to hand out.
  std::string push(int64_t token);
  // A stop string has appeared: text() ends before it.
  bool stopped() const { return stopped_; }
  // The text held back (incomplete UTF-8 decoded lossily, a partial stop string), once the
  // sequence has ended for another reason. Empty after a stop.
  std::string finish();
  // All text so far: what push() and finish() returned, concatenated.
  const std::string& text() const { return shown_; }

 private:
  std::string decode(size_t begin, size_t end) const;
  // Length of the longest suffix of text_[from, end) that is a proper prefix of a stop string.
  size_t pending_stop(size_t from) const;

  const tokenizers::Tokenizer* tokenizer_;
  std::vector<std::string> stop_;
  std::vector<int32_t> tokens_;
  size_t prefix_offset_ = 0, read_offset_ = 0;  // Note [Incremental detokenisation]
  std::string text_;   // the decoded complete text
  std::string shown_;  // the prefix of text_ handed out
  bool stopped_ = false;
};

}  // namespace libai::service
