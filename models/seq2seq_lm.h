// What encoder-decoder models (T5, MT5) are fed while they generate through a pipeline of
// stages that keep the caches, and the decode session over them: the encoder reads the
// prompts once (right-padded, as Hugging Face pads for T5), the decoder starts from
// decoder_start_token_id and is fed one token per row at a time.
//
//   Seq2SeqLmSession session(prompts, pad_id, decoder_start_id, [&](const TensorMap& in) {
//     return run_through_stages(in).at("logits");   // in: Seq2SeqInputs' tensors
//   });
//   session.append({9, 10});                         // decoder_input_ids [[9], [10]]
//
// The whole model (models/t5/t5.cc) keeps its own session, independent of this one: it is the
// reference that the stages are tested against.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "models/generation/session.h"

namespace libai::models {

// The inputs of each step of an encoder-decoder model whose stages keep the caches, under
// Hugging Face's names:
//   step 0 (prefill()):
//     input_ids          [batch, n] i64: the prompts, right-padded with pad_id
//     attention_mask     [batch, n] bool: 1 = a prompt token
//     decoder_input_ids  [batch, 1] i64: decoder_start_id in every row
//   later steps (step(tokens)):
//     decoder_input_ids  [batch, 1] i64: the tokens
//     select_rows        [batch'] i64, only in the first step after select_rows(): the model
//                        first makes row i of its caches (self- and cross-attention, and the
//                        encoder's mask) old row select_rows[i], then computes
//
//   Seq2SeqInputs inputs({{5, 6, 7}, {8}}, /*pad_id=*/0, /*decoder_start_id=*/0);
//   run(inputs.prefill());      // input_ids [[5, 6, 7], [8, 0, 0]], decoder_input_ids [[0], [0]]
//   inputs.select_rows({1, 1});
//   run(inputs.step({9, 10}));  // decoder_input_ids [[9], [10]], select_rows [1, 1]
class Seq2SeqInputs {
 public:
  // InvalidArgument for no prompts or an empty prompt.
  Seq2SeqInputs(const std::vector<std::vector<int64_t>>& prompts, int64_t pad_id,
                int64_t decoder_start_id);
  int64_t batch_size() const { return batch_; }
  int64_t decoder_length() const { return decoder_length_; }  // decoder tokens fed so far
  // The prompts' step (call once, first).
  std::map<std::string, Tensor> prefill();
  // One token per row; that step's inputs (with any pending select_rows).
  std::map<std::string, Tensor> step(const std::vector<int64_t>& tokens);
  // Row i becomes old row rows[i] (rows may repeat or drop rows); the caches follow through
  // the select_rows of the next step (successive calls compose).
  void select_rows(const std::vector<int64_t>& rows);

 private:
  int64_t batch_ = 0, prompt_length_ = 0, decoder_length_ = 0, decoder_start_id_ = 0;
  std::vector<int64_t> prompt_ids_;    // [batch, prompt_length] row-major, for prefill
  std::vector<uint8_t> prompt_keep_;   // the same, 1 = a prompt token
  std::vector<int64_t> pending_rows_;  // for the next step; empty: none
};

// Returns the next-token logits [batch, vocab] (any float dtype) for Seq2SeqInputs' tensors.
using Seq2SeqStepFunction = std::function<Tensor(const std::map<std::string, Tensor>& inputs)>;

class Seq2SeqLmSession : public generation::DecodeSession {
 public:
  // Runs the prompts' step (the encoder and the decoder's start token) here.
  Seq2SeqLmSession(const std::vector<std::vector<int64_t>>& prompts, int64_t pad_id,
                   int64_t decoder_start_id, Seq2SeqStepFunction step);
  int64_t batch_size() const override { return inputs_.batch_size(); }
  Tensor logits() override { return logits_; }
  void append(const std::vector<int64_t>& tokens) override;
  void select_rows(const std::vector<int64_t>& rows) override;

 private:
  void run(const std::map<std::string, Tensor>& inputs);
  Seq2SeqInputs inputs_;
  Seq2SeqStepFunction step_;
  Tensor logits_;  // [batch, vocab] f32
};

}  // namespace libai::models
