#include "models/layers/attention.h"

#include <algorithm>
#include <cmath>

#include "ops/ops.h"

namespace libai::models {

namespace {

AttentionConfig resolved(AttentionConfig c) {
  LIBAI_CHECK(c.hidden > 0 && c.heads > 0, "attention: hidden (", c.hidden, ") and heads (",
              c.heads, ") must be positive");
  if (c.head_dim == 0) {
    LIBAI_CHECK(c.hidden % c.heads == 0, "attention: hidden size ", c.hidden,
                " is not divisible by the number of heads ", c.heads);
    c.head_dim = c.hidden / c.heads;
  }
  if (c.kv_heads == 0) c.kv_heads = c.heads;
  LIBAI_CHECK(c.kv_heads > 0 && c.heads % c.kv_heads == 0, "attention: ", c.heads,
              " query heads do not split into groups over ", c.kv_heads, " key/value heads");
  LIBAI_CHECK(!c.cross || c.kv_heads == c.heads,
              "attention: grouped key/value heads are not supported in cross-attention");
  return c;
}

// [batch, seq, heads * parts * d] -> `parts` views [batch, heads, seq, d] (Note [Fused q/k/v
// by head]).
std::vector<Tensor> split_heads(const Tensor& y, int64_t heads, int64_t parts, int64_t d) {
  Tensor v = ops::view(y, {y.size(0), y.size(1), heads, parts, d});
  std::vector<Tensor> out;
  for (int64_t p = 0; p < parts; ++p) out.push_back(ops::transpose(ops::select(v, 3, p), 1, 2));
  return out;
}

// Note [Fused q/k/v by head], grouped: [batch, seq, kv * (g + 2) * d] -> q [batch, kv * g,
// seq, d], k and v [batch, kv, seq, d].
std::vector<Tensor> split_grouped(const Tensor& y, int64_t kv, int64_t g, int64_t d) {
  if (g == 1) return split_heads(y, kv, 3, d);
  Tensor v = ops::view(y, {y.size(0), y.size(1), kv, g + 2, d});
  Tensor q = ops::reshape(ops::narrow(v, 3, 0, g), {y.size(0), y.size(1), kv * g, d});
  return {ops::transpose(q, 1, 2), ops::transpose(ops::select(v, 3, g), 1, 2),
          ops::transpose(ops::select(v, 3, g + 1), 1, 2)};
}

// [batch, kv, len, d] -> [batch, kv * g, len, d]: each key/value head repeated for the g query
// heads of its group (query head h uses key/value head h / g).
Tensor repeat_groups(const Tensor& t, int64_t g) {
  if (g == 1) return t;
  const Shape& s = t.shape();
  return ops::reshape(ops::expand(ops::unsqueeze(t, 2), {s[0], s[1], g, s[2], s[3]}),
                      {s[0], s[1] * g, s[2], s[3]});
}

// Note [Rotary embeddings in attention]: x [batch, heads, n, d]; cos, sin [batch, 1, n, d].
Tensor rotate(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  const int64_t half = x.size(3) / 2;
  Tensor rotated = ops::cat({ops::neg(ops::narrow(x, 3, half, half)), ops::narrow(x, 3, 0, half)}, 3);
  return ops::mul(x, cos) + ops::mul(rotated, sin);
}

}  // namespace

void KVCache::append(const Tensor& k_new, const Tensor& v_new) {
  const int64_t n = k_new.size(2);
  if (!k_.defined() || start_ + length_ + n > k_.size(2)) {
    const int64_t capacity = std::max<int64_t>(2 * (length_ + n), 16);
    Shape shape = k_new.shape();
    shape[2] = capacity;
    Tensor k = Tensor::empty(shape, k_new.dtype(), k_new.device());
    Tensor v = Tensor::empty(shape, v_new.dtype(), v_new.device());
    if (length_ > 0) {
      ops::slice(k, 2, 0, length_).copy_from(keys());
      ops::slice(v, 2, 0, length_).copy_from(values());
    }
    k_ = k;
    v_ = v;
    start_ = 0;
  }
  const int64_t end = start_ + length_;
  ops::slice(k_, 2, end, end + n).copy_from(k_new);
  ops::slice(v_, 2, end, end + n).copy_from(v_new);
  length_ += n;
}

Tensor KVCache::keys() const { return ops::slice(k_, 2, start_, start_ + length_); }
Tensor KVCache::values() const { return ops::slice(v_, 2, start_, start_ + length_); }

void KVCache::select_rows(const Tensor& rows) {
  if (!k_.defined()) return;
  if (!k_.device().is_cpu()) {
    k_ = ops::index_select(keys(), 0, rows);
    v_ = ops::index_select(values(), 0, rows);
    start_ = 0;
    return;
  }
  // Only the cached positions of each kept row move (not the buffer's spare capacity).
  const std::vector<int64_t> picked = ops::contiguous(rows).to_vector<int64_t>();
  Shape shape = k_.shape();
  shape[0] = int64_t(picked.size());
  Tensor k = Tensor::empty(shape, k_.dtype(), k_.device());
  Tensor v = Tensor::empty(shape, v_.dtype(), v_.device());
  for (size_t i = 0; i < picked.size(); ++i) {
    LIBAI_CHECK(picked[i] >= 0 && picked[i] < k_.size(0), "KVCache: row ", picked[i],
                " outside the ", k_.size(0), " cached rows");
    const int64_t r = picked[i], to = int64_t(i);
    ops::slice(ops::slice(k, 0, to, to + 1), 2, 0, length_)
        .copy_from(ops::slice(keys(), 0, r, r + 1));
    ops::slice(ops::slice(v, 0, to, to + 1), 2, 0, length_)
        .copy_from(ops::slice(values(), 0, r, r + 1));
  }
  k_ = k;
  v_ = v;
  start_ = 0;
}

namespace {

// A [rows, heads, capacity, d] buffer like `like` (capacity as append grows it).
Tensor cache_buffer(const Tensor& like, int64_t rows, int64_t length) {
  Shape shape = like.shape();
  shape[0] = rows;
  shape[2] = std::max<int64_t>(2 * length, 16);
  return Tensor::empty(shape, like.dtype(), like.device());
}

// Columns [length - from.length, length) of rows [row, row + from's rows) of `to` become
// `from`'s positions, the columns in front of them zero.
void place_right(Tensor& to, int64_t row, const Tensor& from, int64_t length) {
  const int64_t n = from.size(2), pad = length - n;
  Tensor rows = ops::slice(to, 0, row, row + from.size(0));
  if (pad > 0) {
    Tensor front = ops::slice(rows, 2, 0, pad);
    front.copy_from(Tensor::zeros(front.shape(), front.dtype(), front.device()));
  }
  ops::slice(rows, 2, pad, length).copy_from(from);
}

}  // namespace

void KVCache::drop_front(int64_t n) {
  LIBAI_CHECK(n >= 0 && n <= length_, "KVCache: cannot drop ", n, " of ", length_, " positions");
  start_ += n;  // the buffer's front is spare now; the next regrowth reclaims it
  length_ -= n;
}

void KVCache::join_rows(const KVCache& other) {
  if (other.rows() == 0) return;
  if (rows() == 0) {
    *this = other;
    return;
  }
  LIBAI_CHECK(other.k_.size(1) == k_.size(1) && other.k_.size(3) == k_.size(3) &&
                  other.k_.dtype() == k_.dtype(),
              "KVCache: cannot join caches of shapes ", shape_str(keys().shape()), " and ",
              shape_str(other.keys().shape()));
  const int64_t length = std::max(length_, other.length_), rows = this->rows() + other.rows();
  Tensor k = cache_buffer(k_, rows, length), v = cache_buffer(v_, rows, length);
  place_right(k, 0, keys(), length);
  place_right(v, 0, values(), length);
  place_right(k, this->rows(), other.keys(), length);
  place_right(v, this->rows(), other.values(), length);
  k_ = k;
  v_ = v;
  start_ = 0;
  length_ = length;
}

Attention::Attention(const LayerContext& ctx, const AttentionConfig& config)
    : config_(resolved(config)) {
  const int tp = ctx.tp_size();
  LIBAI_CHECK(config_.heads % tp == 0, "attention: tensor_parallel_size ", tp,
              " does not divide the number of heads ", config_.heads);
  // Note [Fused q/k/v by head]: each rank holds whole key/value groups, or, when there are
  // more ranks than key/value heads, a share of one group's query heads and a copy of its
  // key/value head (Note [Partly replicated parameters] in module.h).
  const bool replicated = config_.kv_heads % tp != 0;
  LIBAI_CHECK(!replicated || (!config_.cross && tp % config_.kv_heads == 0),
              "attention: tensor_parallel_size ", tp,
              " is neither a divisor nor a multiple of the number of key/value heads ",
              config_.kv_heads);
  local_heads_ = config_.heads / tp;
  local_kv_heads_ = replicated ? 1 : config_.kv_heads / tp;
  first_head_ = ctx.tp_rank() * local_heads_;
  const int64_t d = config_.head_dim, inner = config_.heads * d;
  const int64_t qkv_rows = (config_.heads + 2 * config_.kv_heads) * d;
  // Heads are split over the tensor-parallel group: the projections in are column-parallel
  // (their [head][part][d] rows split into whole heads), the projection out is row-parallel.
  const auto col = Parallel::column, row = Parallel::row;
  if (config_.cross) {
    q_ = &add_module("q", std::make_unique<Linear>(ctx, config_.hidden, inner, config_.bias, col));
    kv_ = &add_module("kv",
                      std::make_unique<Linear>(ctx, config_.hidden, 2 * inner, config_.bias, col));
  } else if (replicated) {
    // Rank t serves key/value head t / copies with query heads of that group's share
    // t % copies: rows [group start + share * local_heads * d, + local_heads * d) of the whole,
    // then the group's k and v (owned by the group's first rank).
    const int copies = tp / int(config_.kv_heads);
    const int64_t g = config_.heads / config_.kv_heads, group_rows = (g + 2) * d;
    ReplicatedRows rows;
    for (int t = 0; t < tp; ++t) {
      const int64_t start = (t / copies) * group_rows;
      rows.rows.push_back({{start + (t % copies) * local_heads_ * d, local_heads_ * d, t},
                           {start + g * d, 2 * d, t - t % copies}});
    }
    rows.shared_start = local_heads_ * d;
    rows.shared_length = 2 * d;
    rows.group = ctx.tp_subgroup(copies);
    qkv_ = &add_module("qkv",
                       std::make_unique<Linear>(ctx, config_.hidden, qkv_rows, config_.bias, rows));
  } else {
    qkv_ = &add_module("qkv",
                       std::make_unique<Linear>(ctx, config_.hidden, qkv_rows, config_.bias, col));
  }
  out_ = &add_module("out", std::make_unique<Linear>(ctx, inner, config_.hidden,
                                                     config_.out_bias.value_or(config_.bias), row));
  probs_dropout_ = &add_module("probs_dropout", std::make_unique<Dropout>(config_.dropout));
}

Tensor Attention::attend(const Tensor& q, const Tensor& k, const Tensor& v,
                         const AttentionInputs& in) const {
  if (!probs_dropout_->active()) {
    ops::AttentionOptions options;
    options.causal = in.causal;
    options.key_padding_mask = in.key_padding_mask;
    options.attn_bias = in.bias;
    options.scale = config_.scale;
    return ops::scaled_dot_product_attention(q, k, v, options);
  }
  // Note [Unfused attention for dropout].
  const double scale = config_.scale ? *config_.scale : 1.0 / std::sqrt(double(config_.head_dim));
  Tensor scores = ops::scale(ops::matmul(q, ops::transpose(k, 2, 3)), scale);  // [b, h, q, kv]
  if (in.bias.defined()) scores = scores + in.bias;
  ops::SoftmaxMask mask;
  mask.causal = in.causal;
  if (in.key_padding_mask.defined()) {  // ours: 1 = attend; softmax's: nonzero = masked out
    const Tensor& keep = in.key_padding_mask;
    LIBAI_CHECK(keep.dim() == 2 && keep.size(0) == q.size(0) && keep.size(1) == k.size(2),
                "attention: key_padding_mask of shape ", shape_str(keep.shape()),
                " does not match [batch, kv_len] = [", q.size(0), ", ", k.size(2), "]");
    mask.key_padding_mask = ops::eq(keep, Tensor::zeros({}, keep.dtype(), keep.device()));
  }
  Tensor probs = ops::softmax(scores, -1, mask);
  probs = probs_dropout_->forward(probs,
                                  {.dim = 1, .start = first_head_, .logical_size = config_.heads});
  return ops::matmul(probs, v);
}

Tensor Attention::forward(const Tensor& x, const AttentionInputs& in, KVCache* cache,
                          const Tensor& residual) const {
  LIBAI_CHECK(x.dim() == 3 && x.size(2) == config_.hidden,
              "attention: expected input [batch, seq, ", config_.hidden, "], got ",
              shape_str(x.shape()));
  const int64_t heads = local_heads_, d = config_.head_dim;
  const int64_t groups = heads / local_kv_heads_;  // this rank's query heads per key/value head
  Tensor q, k, v;  // [batch, heads, len, d] (k, v: [batch, kv_heads, len, d])
  if (!config_.cross) {
    auto parts = split_grouped(qkv_->forward(x), local_kv_heads_, groups, d);
    q = parts[0], k = parts[1], v = parts[2];
    if (in.rotary_cos.defined()) {
      LIBAI_CHECK(in.rotary_sin.defined() && in.rotary_cos.dim() == 4 &&
                      in.rotary_cos.size(2) == x.size(1) && in.rotary_cos.size(3) == d,
                  "attention: rotary cos/sin should be [batch, 1, ", x.size(1), ", ", d, "], got ",
                  shape_str(in.rotary_cos.shape()));
      q = rotate(q, in.rotary_cos, in.rotary_sin);
      k = rotate(k, in.rotary_cos, in.rotary_sin);
    }
    if (cache) {
      cache->append(k, v);
      k = cache->keys(), v = cache->values();
    }
  } else {
    q = split_heads(q_->forward(x), heads, 1, d)[0];
    if (cache && !cache->empty()) {
      k = cache->keys(), v = cache->values();
    } else {
      LIBAI_CHECK(in.memory.defined(), "cross-attention: no memory (encoder output) given");
      auto parts = split_heads(kv_->forward(in.memory), heads, 2, d);
      k = parts[0], v = parts[1];
      if (cache) cache->append(k, v);
    }
  }
  Tensor o = attend(q, repeat_groups(k, groups), repeat_groups(v, groups), in);  // [b, heads, seq, d]
  o = ops::reshape(ops::transpose(o, 1, 2), {x.size(0), x.size(1), heads * d});
  return out_->forward(o, std::nullopt, residual);
}

}  // namespace libai::models
