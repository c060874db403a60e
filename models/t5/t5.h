// T5 (Raffel et al. 2020; v1.0 and v1.1) and MT5 (Xue et al. 2021) with the language-model
// head: T5ForConditionalGeneration and MT5ForConditionalGeneration from a Hugging Face folder.
//
//   encoder: h = final_norm(layers(shared[input_ids]))               // T5Stack, t5_stack.h
//   decoder: d = final_norm(layers(shared[decoder_input_ids], h))    // causal + cross-attention
//   head:    logits = (d * d_model^-0.5 if scaled) lm_headᵀ          // lm_head = shared if tied
//
//   auto model = models::load_model("tests/data/models/t5");
//   TensorMap out = model->forward({{"input_ids", ids}, {"attention_mask", mask},
//                                   {"decoder_input_ids", dec}});
//   out.at("logits");                                  // [batch, dec_len, vocab]
//   out.at("encoder_last_hidden_state");               // [batch, seq, d_model]
//   out.at("decoder_hidden_states.0");                 // HF's output_hidden_states
//   auto* lm = model->generative();                    // encoder-decoder decoding
//
// config.json keys read: vocab_size, d_model, d_kv, d_ff, num_heads, num_layers,
// num_decoder_layers, relative_attention_num_buckets, relative_attention_max_distance,
// layer_norm_epsilon, feed_forward_proj ("relu", "gated-gelu", any "ACT" or "gated-ACT"),
// dense_act_fn and is_gated_act (when saved), tie_word_embeddings, scale_decoder_outputs,
// pad_token_id, decoder_start_token_id.
//
// Note [T5 head scaling and tying]: Hugging Face transformers 5 always ties lm_head to
// `shared` unless the checkpoint holds a different lm_head.weight, which is what checkpoints
// whose config says tie_word_embeddings = false hold (T5 v1.1, MT5); we read lm_head.weight
// exactly then (a tied config whose checkpoint still holds a different lm_head.weight, which
// transformers would untie, loads tied here). T5 scales the decoder output by d_model^-0.5
// when scale_decoder_outputs is true, which defaults to tie_word_embeddings (v1.0: true,
// v1.1: false); MT5 in transformers 5 never scales, whatever the config says.
//
// The same class is the whole model, a part of it (Note [Model parts]) and, through its decode
// step with self- and cross-attention caches, an inference pipeline stage (Note [Decoding
// through parts]).
#pragma once

#include "models/family.h"
#include "models/model.h"
#include "models/t5/t5_stack.h"

namespace libai::models {

// config.json of a T5 (mt5 = false) or MT5 model, with the defaults of each.
struct T5Config {
  std::string name;  // "t5" or "mt5", for messages
  int64_t vocab = 0, d_model = 0, d_kv = 0, d_ff = 0, heads = 0;
  int64_t encoder_layers = 0, decoder_layers = 0, num_buckets = 0, max_distance = 0;
  double eps = 1e-6;
  Activation activation = Activation::relu;
  bool gated = false;
  bool tied = true;          // lm_head is `shared` (Note [T5 head scaling and tying])
  bool scale_output = true;  // decoder output * d_model^-0.5 before the head
  int64_t pad = 0, decoder_start = 0;
  double dropout = 0.1;  // dropout_rate: every site of the stacks (models/t5/t5_stack.h)

  T5Config(const HfConfig& c, bool mt5);
  T5StackConfig stack(bool decoder) const;  // the encoder's or the decoder's shape

 private:
  void parse_feed_forward(const HfConfig& c, bool mt5);
};

// Checkpoint names -> ours: shared, {encoder,decoder}.{relative_bias,layers.{i},final_norm},
// lm_head (untied only).
WeightMap t5_weight_map(const T5Config& c);

// The layers a pipeline cuts: the encoder's, then the decoder's.
int t5_num_layers(const HfConfig& config, bool mt5);

// T5ForConditionalGeneration (mt5: MT5's), whole or one part (Note [Model parts]): a part
// holds layers of encoder_layers + decoder_layers in that order; the first part holds
// `shared`, the last the head (`shared` again when tied, else lm_head); every part holding
// layers of a stack holds that stack's relative position bias table. The messages between
// parts are documented at the class in t5.cc.
std::unique_ptr<Model> make_t5_model(const HfConfig& config, const LayerContext& ctx, bool mt5,
                                     const std::optional<StageSpec>& part = std::nullopt);

// The ONNX graphs of a loaded T5 or MT5: encoder, decoder and (with past) decoder with past
// (Family::export_onnx; models/t5/t5_onnx.cc).
void export_t5_onnx(Model& model, const onnx::ExportOptions& options, onnx::ExportGraphs& graphs);

// The families' declarations, listed in models/registry.cc.
const Family& t5_family();
const Family& mt5_family();

}  // namespace libai::models
