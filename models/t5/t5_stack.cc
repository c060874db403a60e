#include "models/t5/t5_stack.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "ops/ops.h"

namespace libai::models {

int64_t t5_relative_position_bucket(int64_t relative_position, bool bidirectional,
                                    int64_t num_buckets, int64_t max_distance) {
  int64_t bucket = 0;
  int64_t n = relative_position;
  if (bidirectional) {
    num_buckets /= 2;
    if (n > 0) bucket += num_buckets;
    n = std::abs(n);
  } else {
    n = std::max<int64_t>(-n, 0);
  }
  const int64_t max_exact = num_buckets / 2;
  if (n < max_exact) return bucket + n;
  // Hugging Face computes this in float32 (the Python scalars are cast to float), then
  // truncates: n = 2 * max_exact lands exactly on a bucket edge, so the rounding matters.
  const float log_ratio = std::log(float(n) / float(max_exact));
  const float log_range = float(std::log(double(max_distance) / double(max_exact)));
  const float scaled = log_ratio / log_range * float(num_buckets - max_exact);
  const int64_t large = max_exact + int64_t(scaled);
  return bucket + std::min(large, num_buckets - 1);
}

T5Stack::T5Stack(const LayerContext& ctx, const T5StackConfig& config, int first, int last)
    : config_(config) {
  if (last < 0) last = int(config.layers);
  TransformerLayerConfig layer = config.layer;
  layer.cross_attention = config.decoder;
  relative_bias_ = &add_module(
      "relative_bias",
      std::make_unique<Embedding>(ctx, config.num_buckets, layer.attention.heads,
                                  EmbeddingParallel::dim));  // heads split like attention
  for (int i = first; i < last; ++i)
    layers_.push_back(
        &add_module("layers." + std::to_string(i), std::make_unique<TransformerLayer>(ctx, layer)));
  if (last == int(config.layers))
    final_norm_ =
        &add_module("final_norm", std::make_unique<Norm>(ctx, layer.norm, layer.attention.hidden,
                                                         layer.norm_eps, layer.norm_bias));
  if (first == 0)
    embed_dropout_ = &add_module("embed_dropout", std::make_unique<Dropout>(config.dropout));
  if (final_norm_)
    output_dropout_ = &add_module("output_dropout", std::make_unique<Dropout>(config.dropout));
}

Tensor t5_relative_bias(const Embedding& table, const T5StackConfig& config, int64_t q_len,
                        int64_t past) {
  const int64_t k_len = past + q_len;
  std::vector<int64_t> buckets(q_len * k_len);
  for (int64_t i = 0; i < q_len; ++i)
    for (int64_t j = 0; j < k_len; ++j)
      buckets[i * k_len + j] = t5_relative_position_bucket(j - (past + i), !config.decoder,
                                                           config.num_buckets, config.max_distance);
  Tensor values = table.forward(Tensor::from_vector(buckets, {q_len, k_len}));
  return ops::unsqueeze(ops::contiguous(ops::permute(values, {2, 0, 1})), 0);
}

Tensor T5Stack::forward(const Tensor& embedded, const T5StackInputs& in,
                        std::vector<LayerCache>* caches, std::vector<Tensor>* all) const {
  LIBAI_ASSERT(!caches || int64_t(caches->size()) == num_layers(), "t5: ", caches->size(),
               " caches for ", num_layers(), " layers");
  LayerInputs inputs;
  inputs.self.causal = config_.decoder;
  inputs.self.key_padding_mask = in.keep;
  inputs.self.bias = t5_relative_bias(*relative_bias_, config_, embedded.size(1),
                                      in.past);  // [1, heads, seq, past + seq]
  if (config_.decoder) {
    inputs.cross.memory = in.memory;
    inputs.cross.key_padding_mask = in.memory_keep;
  }
  Tensor h = embed_dropout_ ? embed_dropout_->forward(embedded) : embedded;  // [batch, seq, hidden]
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (all) all->push_back(h);
    h = layers_[i]->forward(h, inputs, caches ? &(*caches)[i] : nullptr);
  }
  if (!final_norm_) return h;
  h = output_dropout_->forward(final_norm_->forward(h));
  if (all) all->push_back(h);
  return h;
}

}  // namespace libai::models
