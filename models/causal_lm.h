// What decoder-only models (GPT-2, later Llama) are fed while they generate, and the decode
// session over them. Prompts are left-padded, position ids follow the attention mask (Hugging
// Face's rule in generate: cumsum of the mask minus one, pads at 1), and each layer keeps a KV
// cache.
//
//   class Gpt2 : public generation::GenerativeModel {
//     std::unique_ptr<DecodeSession> start(const std::vector<Tokens>& prompts) override {
//       return std::make_unique<CausalLmSession>(prompts, pad_id, layers,
//                                                [this](const CausalStep& s) {
//                                                  return logits_of_last(s);  // [batch, vocab]
//                                                });
//     }
//   };
//
// A pipeline (models/stages/) whose stages keep the caches uses the step-function form and
// receives the same tensors CausalInputs builds:
//
//   CausalLmSession session(prompts, pad_id, [&](const TensorMap& in) {
//     return run_through_stages(in).at("logits");   // in: input_ids, attention_mask, ...
//   });
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "models/generation/session.h"
#include "models/layers/transformer_layer.h"

namespace libai::models {

// The inputs of each forward call of a decoder-only model while it generates, under Hugging
// Face's names:
//   input_ids      [batch, n] i64: the prompts (left-padded with pad_id) at first, then one
//                  token per row
//   attention_mask [batch, past + n] bool: 1 = a real token, over the whole sequence so far
//   position_ids   [batch, n] i64
//   select_rows    [batch'] i64, only in the first step after select_rows(): the model first
//                  makes row i of its KV caches old row select_rows[i], then computes
//
//   CausalInputs inputs({{5, 6, 7}, {8}}, /*pad_id=*/0);
//   run(inputs.prefill());       // input_ids [[5, 6, 7], [0, 0, 8]],
//                                // position_ids [[0, 1, 2], [1, 1, 0]]
//   run(inputs.step({9, 10}));   // input_ids [[9], [10]], attention_mask [2, 4],
//                                // position_ids [[3], [1]]
//   inputs.select_rows({1, 1});  // the next step carries select_rows [1, 1]
class CausalInputs {
 public:
  // InvalidArgument for no prompts or an empty prompt.
  CausalInputs(const std::vector<std::vector<int64_t>>& prompts, int64_t pad_id);
  int64_t batch_size() const { return batch_; }
  int64_t length() const { return length_; }  // the attention mask's width: past + new tokens
  // The prompts' step (call once, first).
  std::map<std::string, Tensor> prefill() const;
  // Appends one token per row and returns that step's inputs (with any pending select_rows).
  std::map<std::string, Tensor> step(const std::vector<int64_t>& tokens);
  // Row i becomes old row rows[i] (rows may repeat or drop rows); the model's caches follow
  // through the select_rows of the next step (successive calls compose).
  void select_rows(const std::vector<int64_t>& rows);

 private:
  Tensor mask() const;  // [batch, length] bool
  int64_t batch_ = 0, length_ = 0;
  std::vector<int64_t> prompt_ids_, prompt_positions_;  // [batch, prompt length], for prefill
  std::vector<uint8_t> keep_;                           // [batch, length] row-major
  std::vector<int64_t> last_position_;                  // per row
  std::vector<int64_t> pending_rows_;                   // for the next step; empty: none
};

// One forward call of a decoding step, for a model that lets the session keep its caches.
struct CausalStep {
  Tensor ids;        // [batch, n] i64: the new tokens
  Tensor positions;  // [batch, n] i64
  Tensor keep;       // [batch, past + n] bool: 1 = a real token (the attention mask)
  std::vector<LayerCache>* caches;
};

// Returns the next-token logits [batch, vocab] after the step's last token (any float dtype).
using CausalForward = std::function<Tensor(const CausalStep&)>;
// The same for a model that keeps its own caches: `inputs` as CausalInputs builds them (the
// model applies select_rows to its caches before computing).
using CausalStepFunction = std::function<Tensor(const std::map<std::string, Tensor>& inputs)>;

class CausalLmSession : public generation::DecodeSession {
 public:
  // The session keeps one LayerCache per layer and reorders them on select_rows.
  CausalLmSession(const std::vector<std::vector<int64_t>>& prompts, int64_t pad_id,
                  int64_t num_layers, CausalForward forward);
  // `step` keeps the caches (a pipeline's stages). Both run the prompts' step here.
  CausalLmSession(const std::vector<std::vector<int64_t>>& prompts, int64_t pad_id,
                  CausalStepFunction step);
  int64_t batch_size() const override { return inputs_.batch_size(); }
  Tensor logits() override { return logits_; }
  void append(const std::vector<int64_t>& tokens) override;
  void select_rows(const std::vector<int64_t>& rows) override;

 private:
  void run(const std::map<std::string, Tensor>& inputs);
  CausalInputs inputs_;
  CausalStepFunction step_;
  Tensor logits_;  // [batch, vocab] f32
};

}  // namespace libai::models
