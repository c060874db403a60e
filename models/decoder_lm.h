// Note [One decoder-only model]: GPT-2 and the Llama family are the same machine: token
// embeddings (plus learned positions for GPT-2), a stack of pre-norm TransformerLayers, a
// final norm and an LM head tied to the embeddings or not. They differ in what a family
// decides: how ids become the first hidden states, what each layer gets besides them (rotary
// angles for Llama), how long a sequence may be. DecoderLm owns the rest once: forward over a
// whole model or a part, the decode step of pipeline stages (Note [Decoding through parts]),
// generation through CausalLmSession, and their input checks. A family's class builds its
// modules in its constructor, fills the members below and overrides the hooks:
//
//   class Gpt2 : public DecoderLm {
//     Gpt2(...) : DecoderLm(hf, {.name = "gpt2", .vocab = .., .hidden = .., .pad_id = eos}) {
//       ... add_module(...); layers_ = ...; final_norm_ = ...; head_ = wte_;
//     }
//     Tensor embed(const Tensor& ids, const Tensor& positions) override;  // first part
//     void check_length(int64_t tokens) const override;                   // n_positions
//   };
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/causal_lm.h"
#include "models/generation/session.h"
#include "models/layers/transformer_layer.h"
#include "models/model.h"

namespace libai::models {

// Positions past, past + 1, ... in every row of [batch, n].
Tensor positions_from(int64_t past, int64_t batch, int64_t n);

// The whole model, or one part of it (Note [Model parts]):
//   first part in:  input_ids, optional attention_mask, position_ids
//   later parts in: hidden_states [batch, seq, hidden], optional attention_mask, position_ids
//   out:            hidden_states, attention_mask and position_ids (as given) on parts before
//                   the last; last_hidden_state and logits on the last (hidden_states.{i} when
//                   whole: each layer's input, then the final norm's output)
// Position ids default to 0 .. seq-1 in every row (Hugging Face's forward).
class DecoderLm : public Model, public generation::GenerativeModel {
 public:
  struct Shape {
    std::string name;  // config.json's model_type, for messages
    int64_t vocab = 0, hidden = 0;
    int64_t pad_id = 0;  // pads prompts in generation (masked out)
  };

  TensorMap forward(const TensorMap& inputs) override;
  std::unique_ptr<DecodeState> new_decode_state() const override;
  TensorMap decode_step(const TensorMap& in, DecodeState& state) override;
  std::unique_ptr<generation::DecodeSession> start(
      const std::vector<std::vector<int64_t>>& prompts) override;

  // One forward of generation over caches the caller keeps (CausalLmSession's, or the
  // service's running batch, Note [Continuous batching] in service/batcher.h): the
  // next-token logits [batch, vocab] after each row's last token. Whole model only.
  Tensor causal_step(const CausalStep& step);
  int64_t num_layers() const { return int64_t(layers_.size()); }

  bool is_encoder_decoder() const override { return false; }
  int64_t vocab_size() const override { return shape_.vocab; }
  generation::GenerativeModel* generative() override { return part_.is_whole() ? this : nullptr; }
  Task task() const override { return Task::causal_lm; }

 protected:
  DecoderLm(const HfConfig& hf, const StageSpec& part, Shape shape);

  // ids [batch, n] at positions [batch, n] -> hidden states [batch, n, hidden]; first part.
  virtual Tensor embed(const Tensor& ids, const Tensor& positions) = 0;
  // What every layer gets besides the mask (e.g. rotary angles), for h at positions.
  virtual void prepare_layers(LayerInputs& in, const Tensor& h, const Tensor& positions) {
    (void)in, (void)h, (void)positions;
  }
  // A sequence of `tokens` (past + new) is too long for this part: a clear error. Default: any
  // length.
  virtual void check_length(int64_t tokens) const { (void)tokens; }

  // Set by the family's constructor: this part's layers, the final norm (last part) and the
  // table the LM head multiplies by (last part; the embeddings when tied).
  std::vector<TransformerLayer*> layers_;
  Norm* final_norm_ = nullptr;
  const Embedding* head_ = nullptr;

 private:
  // This part's layers (and the final norm on the last part) over h at `positions`; keep
  // [batch, kv_len] or undefined. `all` collects each layer's input and the final output.
  Tensor run_layers(Tensor h, const Tensor& keep, const Tensor& positions,
                    std::vector<LayerCache>* caches, std::vector<Tensor>* all = nullptr,
                    bool final_norm = true);
  Tensor logits_of(const Tensor& h) const;  // [..., vocab]
  // The hidden_states input of a part after the first, checked.
  const Tensor& hidden_input(const TensorMap& in) const;
  template <typename... Args>
  void check(bool ok, const Args&... message) const;

  Shape shape_;
};

}  // namespace libai::models
