// What generation needs from a model: a batch of sequences that the model extends one token
// per row at a time, keeping its own KV cache. Decoder-only models (GPT-2) and
// encoder-decoder models (T5: the encoder runs once in start(), the decoder is fed
// decoder_start_token_id first) both implement it, so the search algorithms in generate.h
// never see a tensor of the model.
//
//   auto session = model.start({{464, 2068, 7586}, {40, 1101}});   // prompts, any lengths
//   Tensor logits = session->logits();        // [2, vocab] f32: the next token of each row
//   session->append({11, 318});               // one token per row
//   session->select_rows({0, 0, 1, 1});       // beam search: reorder / repeat rows
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/tensor.h"

namespace libai::models::generation {

class DecodeSession {
 public:
  virtual ~DecodeSession() = default;
  virtual int64_t batch_size() const = 0;
  // Next-token logits of every row: [batch, vocab], f32, on the CPU.
  virtual Tensor logits() = 0;
  // Feeds one token per row (tokens.size() == batch_size()).
  virtual void append(const std::vector<int64_t>& tokens) = 0;
  // Row i of the new batch is old row rows[i] (rows may repeat or drop rows).
  virtual void select_rows(const std::vector<int64_t>& rows) = 0;
};

class GenerativeModel {
 public:
  virtual ~GenerativeModel() = default;
  // Starts decoding after each prompt. Decoder-only: the prompts are the decoder's context
  // (left-padded internally). Encoder-decoder: the prompts are the encoder's input and the
  // decoder starts from decoder_start_token_id().
  virtual std::unique_ptr<DecodeSession> start(const std::vector<std::vector<int64_t>>& prompts) = 0;
  virtual bool is_encoder_decoder() const = 0;
  virtual int64_t decoder_start_token_id() const { return -1; }
  virtual int64_t vocab_size() const = 0;
};

}  // namespace libai::models::generation
