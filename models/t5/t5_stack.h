// One T5 stack (Raffel et al. 2020): the encoder or the decoder of T5 / MT5, without the
// shared token embedding and the LM head (models/t5/t5.h owns those).
//
//   T5StackConfig c{.layer = layer, .layers = 6, .decoder = true, .num_buckets = 32,
//                   .max_distance = 128};
//   T5Stack decoder(ctx, c);
//   Tensor h = decoder.forward(shared.forward(ids), {.keep = dec_keep, .memory = enc_out,
//                                                    .memory_keep = enc_keep});
//
//   layers: pre-norm RMS ("T5LayerNorm"), no biases, attention scale 1;
//           h = h + self_attn(norm(h)) [+ cross_attn(norm(h), memory)] ; h = h + mlp(norm(h))
//   bias:   one relative position bias table ([num_buckets, heads], HF's block 0
//           relative_attention_bias) shared by every layer of the stack; bidirectional
//           buckets in the encoder, causal buckets in the decoder. Cross-attention has none.
//   output: final_norm(h)
//   dropout (training): on the embedded input, on each sub-layer's output, on attention
//           probabilities, inside the MLP after the activation, and on final_norm's output,
//           where Hugging Face has it.
#pragma once

#include <vector>

#include "models/layers/transformer_layer.h"

namespace libai::models {

struct T5StackConfig {
  TransformerLayerConfig layer;  // cross_attention set for the decoder
  int64_t layers = 0;
  bool decoder = false;
  int64_t num_buckets = 32;
  int64_t max_distance = 128;
  double dropout = 0.0;  // on the embedded input and the output (the layers' are in `layer`)
};

struct T5StackInputs {
  Tensor keep;         // [batch, kv_len] bool, 1 = a real token; undefined = all real
  Tensor memory;       // decoder: the encoder output [batch, mem_len, hidden]
  Tensor memory_keep;  // decoder: [batch, mem_len] bool; undefined = all real
  int64_t past = 0;    // decoder with caches: tokens already in the self-attention caches
};

// The whole stack, or layers [first, last) of it (a model part, Note [Model parts] in
// models/model.h): the part holding layer 0 applies the input dropout, the part holding the
// last layer the final norm and the output dropout; every part holds the bias table.
class T5Stack : public Module {
 public:
  T5Stack(const LayerContext& ctx, const T5StackConfig& config, int first = 0, int last = -1);
  // embedded [batch, seq, hidden] -> final_norm output [batch, seq, hidden] (a part without the
  // stack's last layer: its last layer's output). `caches` (one per layer held, decoder only)
  // hold the keys and values of earlier steps; `all` receives HF's hidden_states: the input,
  // each layer's output, the last one after final_norm.
  Tensor forward(const Tensor& embedded, const T5StackInputs& in,
                 std::vector<LayerCache>* caches = nullptr,
                 std::vector<Tensor>* all = nullptr) const;
  int64_t num_layers() const { return int64_t(layers_.size()); }
  bool holds_end() const { return final_norm_ != nullptr; }

 private:
  T5StackConfig config_;
  Embedding* relative_bias_ = nullptr;  // [num_buckets, heads]
  std::vector<TransformerLayer*> layers_;
  Norm* final_norm_ = nullptr;
  Dropout* embed_dropout_ = nullptr;
  Dropout* output_dropout_ = nullptr;
};

// HF's T5Attention._relative_position_bucket for one relative position (key - query), with its
// float32 arithmetic for the logarithmic buckets, so that boundary cases round the same way.
int64_t t5_relative_position_bucket(int64_t relative_position, bool bidirectional,
                                    int64_t num_buckets, int64_t max_distance);

// The stack's relative position bias for queries at positions past, ..., past + q_len - 1 over
// keys at 0, ..., past + q_len - 1: [1, heads, q_len, past + q_len], from its table
// [num_buckets, heads] (this rank's heads under tensor parallelism). A pipeline stage that
// holds later layers of a stack recomputes it from the same table.
Tensor t5_relative_bias(const Embedding& table, const T5StackConfig& config, int64_t q_len,
                        int64_t past);

}  // namespace libai::models
