// Multi-head attention: self or cross, causal and padding masks, an additive bias (T5's
// relative positions), rotary position embeddings (Llama), grouped-query attention (fewer key
// and value heads than query heads), and a KV cache for decoding.
//
//   AttentionConfig cfg{.hidden = 768, .heads = 12};
//   Attention attn(ctx, cfg);
//   Tensor y = attn.forward(x, {.causal = true});                  // x, y: [batch, seq, hidden]
//   KVCache cache;
//   y = attn.forward(prompt, {.causal = true, .key_padding_mask = keep}, &cache);   // prefill
//   y = attn.forward(next, {.causal = true, .key_padding_mask = keep2}, &cache);    // one token
//
// Note [Fused q/k/v by head]: self-attention projects q, k and v with one GEMM whose output
// rows are ordered [head][q | k | v][head_dim], so that a tensor-parallel split of the rows
// keeps each head's q, k and v together. Cross-attention projects q from x and [head][k | v]
// from the memory. Loaders reorder checkpoints into this layout (add_heads in weights.h).
// With grouped-query attention (kv_heads < heads, each key/value head serving g = heads /
// kv_heads query heads) the rows are ordered by key/value group instead:
// [kv_head][q_0 .. q_{g-1} | k | v][head_dim] (add_grouped_qkv in weights.h), which is the
// layout above when g = 1; a tensor-parallel split of the rows then keeps whole groups on a
// rank when the tensor-parallel size divides kv_heads. A size that is a multiple of kv_heads
// (and divides heads) gives each of the tp / kv_heads ranks of a group a share of its query
// heads and a copy of its k and v: rank t's rows are [its q rows | k | v] of group t / copies
// (Note [Partly replicated parameters] in module.h), whose copies' gradients are summed over
// the group's ranks.
//
// Note [Rotary embeddings in attention]: RoPE rotates q and k by their positions after the
// projection and before keys enter the cache, so cached keys are stored rotated and a decode
// step rotates only its new tokens. The caller gives the cos and sin of its positions
// (AttentionInputs::rotary_cos / rotary_sin, [batch, 1, q_len, head_dim]) since the
// frequencies belong to the model's config (models/llama/rope.h); the rotation is Hugging
// Face's rotate_half form: x cos + [-x2, x1] sin over the two halves of head_dim.
//
// Note [Unfused attention for dropout]: dropout on the attention probabilities needs the
// probabilities, which the fused kernel never materialises. While that dropout is active
// (training, p > 0) attention runs as scores = q kᵀ * scale + bias, a masked softmax (the
// same causal and padding semantics), dropout, then probs v; otherwise the fused op. Under
// tensor parallelism the probabilities' dropout is told its heads' slice start, so each rank
// draws its block of the single-device mask.
#pragma once

#include <optional>

#include "models/layers/dropout.h"
#include "models/layers/linear.h"

namespace libai::models {

struct AttentionConfig {
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;         // key/value heads (grouped-query attention); 0: heads
  int64_t head_dim = 0;         // 0: hidden / heads
  bool bias = true;             // projection biases
  std::optional<bool> out_bias;  // the output projection's bias; default: bias (Qwen2: none)
  bool cross = false;           // keys and values come from a memory (encoder output)
  std::optional<double> scale;  // default 1 / sqrt(head_dim); T5 uses 1
  double dropout = 0.0;         // on the attention probabilities, while training
};

// The keys and values of one attention layer seen so far: [batch, kv_heads, length, head_dim]
// views of buffers that grow by doubling, so appending a token copies only that token, and
// dropping the oldest positions copies nothing (the view starts later).
class KVCache {
 public:
  // k_new, v_new: [batch, heads, n, head_dim]
  void append(const Tensor& k_new, const Tensor& v_new);
  Tensor keys() const;
  Tensor values() const;
  int64_t length() const { return length_; }
  bool empty() const { return length_ == 0; }
  // Row i of the batch becomes old row rows[i] (rows: 1-d i64).
  void select_rows(const Tensor& rows);
  // Drops the first n positions of every row (n <= length()).
  void drop_front(int64_t n);
  // Appends `other`'s rows after this cache's rows, both aligned on the right: the shorter
  // side gets zero positions in front, which the caller masks (Note [Continuous batching] in
  // service/batcher.h). An empty cache (no rows) takes `other` as it is.
  void join_rows(const KVCache& other);
  int64_t rows() const { return k_.defined() ? k_.size(0) : 0; }

 private:
  Tensor k_, v_;  // [batch, heads, capacity, head_dim]
  int64_t start_ = 0;  // the first cached position in the buffers
  int64_t length_ = 0;
};

struct AttentionInputs {
  bool causal = false;
  Tensor key_padding_mask;  // [batch, kv_len] bool/u8, 1 = attend (kv_len counts cached keys)
  Tensor bias;              // additive, broadcastable to [batch, heads, q_len, kv_len]
  Tensor memory;            // cross-attention: [batch, mem_len, hidden]
  // Rotary embeddings of the queries' positions (Note [Rotary embeddings in attention]):
  // [batch, 1, q_len, head_dim] in the activations' dtype, or undefined for none.
  Tensor rotary_cos, rotary_sin;
};

class Attention : public Module {
 public:
  Attention(const LayerContext& ctx, const AttentionConfig& config);
  // x [batch, seq, hidden] -> [batch, seq, hidden]. With a cache: self-attention appends
  // this call's keys and values; cross-attention computes them from the memory once.
  // With `residual`: residual + attention(x), the add fused into the output projection when
  // it can be (Note [Packed inference weights] in linear.h).
  Tensor forward(const Tensor& x, const AttentionInputs& in, KVCache* cache = nullptr,
                 const Tensor& residual = Tensor()) const;
  const AttentionConfig& config() const { return config_; }
  int64_t local_heads() const { return local_heads_; }  // heads on this tensor-parallel rank
  int64_t local_kv_heads() const { return local_kv_heads_; }

 private:
  // [batch, heads, q_len, d] x [batch, heads, kv_len, d or dv] -> [batch, heads, q_len, dv]
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionInputs& in) const;

  AttentionConfig config_;
  int64_t local_heads_ = 0;
  int64_t local_kv_heads_ = 0;
  int64_t first_head_ = 0;  // this rank's first head of the whole
  Dropout* probs_dropout_ = nullptr;
  Linear* qkv_ = nullptr;  // self: [(heads + 2 kv_heads) * head_dim, hidden]
  Linear* q_ = nullptr;    // cross: [heads * head_dim, hidden]
  Linear* kv_ = nullptr;   // cross: [heads * 2 * head_dim, hidden]
  Linear* out_ = nullptr;
};

}  // namespace libai::models
