// The decode session shared by decoder-only models (GPT-2, later Llama): prompts are left-
// padded, position ids follow the attention mask (Hugging Face's rule in generate: cumsum of
// the mask minus one, pads at 1), and each layer keeps a KV cache.
//
//   class Gpt2 : public generation::GenerativeModel {
//     std::unique_ptr<DecodeSession> start(const std::vector<std::vector<int64_t>>& prompts) override {
//       return std::make_unique<CausalLmSession>(prompts, pad_id, layers, [this](const CausalStep& s) {
//         return logits_of_last(s);   // [batch, vocab]
//       });
//     }
//   };
#pragma once

#include <functional>
#include <vector>

#include "models/generation/session.h"
#include "models/layers/transformer_layer.h"

namespace libai::models {

// One forward call of a decoding step.
struct CausalStep {
  Tensor ids;        // [batch, n] i64: the new tokens
  Tensor positions;  // [batch, n] i64
  Tensor keep;       // [batch, past + n] bool: 1 = a real token (the attention mask)
  std::vector<LayerCache>* caches;
};

// Returns the next-token logits [batch, vocab] after the step's last token (any float dtype).
using CausalForward = std::function<Tensor(const CausalStep&)>;

class CausalLmSession : public generation::DecodeSession {
 public:
  CausalLmSession(const std::vector<std::vector<int64_t>>& prompts, int64_t pad_id,
                  int64_t num_layers, CausalForward forward);
  int64_t batch_size() const override { return batch_; }
  Tensor logits() override { return logits_; }
  void append(const std::vector<int64_t>& tokens) override;
  void select_rows(const std::vector<int64_t>& rows) override;

 private:
  void run(const Tensor& ids, const Tensor& positions);
  int64_t batch_;
  CausalForward forward_;
  std::vector<LayerCache> caches_;
  std::vector<uint8_t> keep_;          // [batch, length] row-major
  std::vector<int64_t> last_position_;  // per row
  int64_t length_ = 0;
  Tensor logits_;  // [batch, vocab] f32
};

}  // namespace libai::models
