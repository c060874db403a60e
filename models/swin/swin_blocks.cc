#include "models/swin/swin_blocks.h"

#include <cmath>

#include "models/layers/dropout.h"
#include "models/training_mode.h"
#include "ops/ops.h"
#include "runtime/device_copy.h"

namespace libai::models::swin {

Tensor roll_left(const Tensor& x, int64_t shift) {
  Tensor out = x;
  for (int64_t dim : {1, 2}) {
    const int64_t size = out.size(dim), s = ((shift % size) + size) % size;
    if (s == 0) continue;
    out = ops::cat({ops::narrow(out, dim, s, size - s), ops::narrow(out, dim, 0, s)}, dim);
  }
  return out;
}

Tensor pad_to(const Tensor& x, int64_t height, int64_t width) {
  Tensor out = x;
  const int64_t batch = x.size(0), channels = x.size(3);
  if (out.size(1) < height)
    out = ops::cat({out, Tensor::zeros({batch, height - out.size(1), out.size(2), channels},
                                       x.dtype(), x.device())},
                   1);
  if (out.size(2) < width)
    out = ops::cat({out, Tensor::zeros({batch, height, width - out.size(2), channels}, x.dtype(),
                                       x.device())},
                   2);
  return out;
}

Tensor partition(const Tensor& x, int64_t w) {
  const int64_t batch = x.size(0), rows = x.size(1) / w, cols = x.size(2) / w, dim = x.size(3);
  return ops::reshape(
      ops::permute(ops::reshape(x, {batch, rows, w, cols, w, dim}), {0, 1, 3, 2, 4, 5}),
      {batch * rows * cols, w * w, dim});
}

Tensor unpartition(const Tensor& windows, int64_t batch, int64_t height, int64_t width,
                   int64_t w) {
  const int64_t dim = windows.size(-1);
  return ops::reshape(ops::permute(ops::reshape(windows, {batch, height / w, width / w, w, w, dim}),
                                   {0, 1, 3, 2, 4, 5}),
                      {batch, height, width, dim});
}

Tensor shift_mask(int64_t height, int64_t width, int64_t w, int64_t shift, float value,
                  const Tensor& like) {
  const int64_t rows = height / w, cols = width / w, n = w * w;
  // Three regions along each axis: [0, size - w), [size - w, size - shift), [size - shift, size).
  const auto region = [&](int64_t i, int64_t size) {
    return int64_t(i >= size - w) + int64_t(i >= size - shift);
  };
  std::vector<float> mask(size_t(rows * cols * n * n));
  for (int64_t wr = 0; wr < rows; ++wr)
    for (int64_t wc = 0; wc < cols; ++wc)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) {
          const int64_t ri = region(wr * w + i / w, height) * 3 + region(wc * w + i % w, width);
          const int64_t rj = region(wr * w + j / w, height) * 3 + region(wc * w + j % w, width);
          mask[size_t(((wr * cols + wc) * n + i) * n + j)] = ri == rj ? 0.0f : value;
        }
  return to_dtype(to_device(Tensor::from_vector(mask, {rows * cols, 1, n, n}), like.device()),
                  like.dtype());
}

Tensor relative_index(int64_t w) {
  const int64_t n = w * w;
  std::vector<int64_t> index(size_t(n * n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      index[size_t(i * n + j)] = (i / w - j / w + w - 1) * (2 * w - 1) + (i % w - j % w + w - 1);
  return Tensor::from_vector(index, {n * n});
}

namespace {

// Stochastic depth is not implemented: refused while training, a no-op otherwise.
void check_drop_path(double rate) {
  LIBAI_CHECK_KIND(Unsupported, rate == 0.0 || !training_mode().training, "swin: training with ",
                   "drop_path_rate = ", rate,
                   " is not supported yet (set drop_path_rate to 0 in config.json)");
}

// The mask of shifted windows added to [batch * windows, heads, n, n] scores, as a bias of that
// shape: bias [1, heads, n, n] + mask [windows, 1, n, n], repeated over the batch.
Tensor with_mask(const Tensor& bias, const Tensor& mask, int64_t batch) {
  const int64_t windows = mask.size(0), heads = bias.size(1), n = bias.size(2);
  return ops::reshape(ops::expand(ops::unsqueeze(bias + mask, 0), {batch, windows, heads, n, n}),
                      {batch * windows, heads, n, n});
}

class SwinBlock final : public WindowBlock {
 public:
  SwinBlock(const LayerContext& ctx, const SwinConfig& c, int64_t dim, int64_t heads,
            int64_t window, int64_t shift)
      : dim_(dim), window_(window), shift_(shift), drop_path_(c.drop_path),
        // Split by head over a tensor-parallel group, as the attention's heads are.
        table_(add_parameter("relative_position_bias_table",
                             {(2 * window - 1) * (2 * window - 1), heads}, ctx, /*split_dim=*/1)),
        index_(relative_index(window)) {
    norm1_ = &add_module("norm1", std::make_unique<Norm>(ctx, ops::NormKind::layer, dim, c.eps));
    AttentionConfig attention{.hidden = dim, .heads = heads, .bias = c.qkv_bias,
                              .out_bias = true, .dropout = c.attention_dropout};
    attention_ = &add_module("attention", std::make_unique<Attention>(ctx, attention));
    dropout_ = &add_module("dropout", std::make_unique<Dropout>(c.hidden_dropout));
    norm2_ = &add_module("norm2", std::make_unique<Norm>(ctx, ops::NormKind::layer, dim, c.eps));
    const MlpConfig mlp{.hidden = dim,
                        .intermediate = int64_t(double(dim) * c.mlp_ratio),
                        .activation = c.activation};
    mlp_ = &add_module("mlp", std::make_unique<Mlp>(ctx, mlp));
  }

  Tensor forward(const Tensor& h, int64_t height, int64_t width) const override {
    check_drop_path(drop_path_);
    const int64_t batch = h.size(0), w = window_, n = w * w;
    const int64_t padded_h = (height + w - 1) / w * w, padded_w = (width + w - 1) / w * w;
    Tensor x = ops::reshape(norm1_->forward(h), {batch, height, width, dim_});
    x = partition(roll_left(pad_to(x, padded_h, padded_w), shift_), w);
    // The table's row for every (query, key) pair: the bias [1, heads, n, n] (this rank's heads).
    Tensor table = ops::embedding(table_, to_device(index_, table_.device()));  // [n * n, heads]
    const int64_t heads = table_.size(1);
    Tensor bias = ops::unsqueeze(ops::reshape(ops::transpose(table, 0, 1), {heads, n, n}), 0);
    if (shift_ > 0) bias = with_mask(bias, shift_mask(padded_h, padded_w, w, shift_, -100.0f, h), batch);
    x = attention_->forward(x, {.bias = bias});
    x = roll_left(unpartition(x, batch, padded_h, padded_w, w), -shift_);
    if (padded_h != height || padded_w != width)
      x = ops::narrow(ops::narrow(x, 1, 0, height), 2, 0, width);
    Tensor out = h + dropout_->forward(ops::reshape(x, {batch, height * width, dim_}));
    return mlp_->forward(norm2_->forward(out), out);
  }

 private:
  int64_t dim_, window_, shift_;
  double drop_path_;
  Tensor& table_;  // [(2 window - 1)^2, heads] (this rank's heads)
  Tensor index_;   // i64 [window^4]
  Norm* norm1_ = nullptr;
  Attention* attention_ = nullptr;
  Dropout* dropout_ = nullptr;
  Norm* norm2_ = nullptr;
  Mlp* mlp_ = nullptr;
};

// Note [SwinV2 attention]
// Scores are cosines between normalised queries and keys times a per-head scale exp(min(s,
// ln 100)) (s learned), plus 16 sigmoid(cpb(offsets)): a two-layer MLP (2 -> 512, ReLU, ->
// heads, no bias) over each relative offset (dy, dx), each scaled to [-8, 8] by the window (or
// the pretrained window) and log-spaced: sign(t) log2(1 + |t|) / 3. Queries and values have
// biases (qkv_bias), keys none. Scores reach about 116 in magnitude, so the -100 of the
// shifted windows' mask alone would not always keep regions apart; transformers adds the mask
// twice, and so does this block (-200). (The test fixture's random weights give no score where
// -100 and -200 differ.) Unfused: q, k and v are three products and the scores a batched
// matmul.
class SwinV2Block final : public WindowBlock {
 public:
  SwinV2Block(const LayerContext& ctx, const SwinConfig& c, int64_t dim, int64_t heads,
              int64_t window, int64_t shift, int64_t pretrained_window)
      : dim_(dim), heads_(heads), window_(window), shift_(shift), drop_path_(c.drop_path),
        logit_scale_(add_parameter("logit_scale", {heads, 1, 1}, ctx)),
        index_(relative_index(window)) {
    q_ = &add_module("q", std::make_unique<Linear>(ctx, dim, dim, c.qkv_bias));
    k_ = &add_module("k", std::make_unique<Linear>(ctx, dim, dim, false));
    v_ = &add_module("v", std::make_unique<Linear>(ctx, dim, dim, c.qkv_bias));
    out_ = &add_module("out", std::make_unique<Linear>(ctx, dim, dim));
    cpb_hidden_ = &add_module("cpb.0", std::make_unique<Linear>(ctx, 2, 512));
    cpb_out_ = &add_module("cpb.2", std::make_unique<Linear>(ctx, 512, heads, false));
    probs_dropout_ = &add_module("probs_dropout", std::make_unique<Dropout>(c.attention_dropout));
    dropout_ = &add_module("dropout", std::make_unique<Dropout>(c.hidden_dropout));
    norm1_ = &add_module("norm1", std::make_unique<Norm>(ctx, ops::NormKind::layer, dim, c.eps));
    norm2_ = &add_module("norm2", std::make_unique<Norm>(ctx, ops::NormKind::layer, dim, c.eps));
    const MlpConfig mlp{.hidden = dim,
                        .intermediate = int64_t(double(dim) * c.mlp_ratio),
                        .activation = c.activation};
    mlp_ = &add_module("mlp", std::make_unique<Mlp>(ctx, mlp));
    // The (2w - 1)^2 offsets, log-spaced (Note [SwinV2 attention]).
    const double span = pretrained_window > 0 ? double(pretrained_window - 1)
                        : window > 1          ? double(window - 1)
                                              : 1.0;
    std::vector<float> coords;
    for (int64_t dy = -(window - 1); dy < window; ++dy)
      for (int64_t dx = -(window - 1); dx < window; ++dx)
        for (int64_t d : {dy, dx}) {
          const double t = double(d) / span * 8.0;
          coords.push_back(float((t > 0) - (t < 0)) * float(std::log2(std::abs(t) + 1.0) / 3.0));
        }
    coords_ = Tensor::from_vector(coords, {(2 * window - 1) * (2 * window - 1), 2});
  }

  Tensor forward(const Tensor& h, int64_t height, int64_t width) const override {
    check_drop_path(drop_path_);
    const int64_t batch = h.size(0), w = window_;
    const int64_t padded_h = (height + w - 1) / w * w, padded_w = (width + w - 1) / w * w;
    Tensor x = ops::reshape(h, {batch, height, width, dim_});
    x = partition(roll_left(pad_to(x, padded_h, padded_w), shift_), w);  // [b', n, dim]
    x = attend(x, batch, padded_h, padded_w);
    x = roll_left(unpartition(x, batch, padded_h, padded_w, w), -shift_);
    if (padded_h != height || padded_w != width)
      x = ops::narrow(ops::narrow(x, 1, 0, height), 2, 0, width);
    // Post-norm: h + norm1(attention), then + norm2(mlp).
    Tensor out = h + norm1_->forward(dropout_->forward(ops::reshape(x, {batch, height * width, dim_})));
    return out + norm2_->forward(dropout_->forward(mlp_->forward(out)));
  }

 private:
  // x [b', n, dim] -> [b', n, dim]: scaled cosine attention with the continuous position bias
  // (and the shifted windows' mask).
  Tensor attend(const Tensor& x, int64_t batch, int64_t height, int64_t width) const {
    const int64_t windows = x.size(0), n = x.size(1), hd = dim_ / heads_;
    const auto split = [&](const Tensor& t) {  // [b', n, dim] -> [b', heads, n, hd]
      return ops::transpose(ops::reshape(t, {windows, n, heads_, hd}), 1, 2);
    };
    const auto normalised = [](const Tensor& t) {  // t / max(|t|, 1e-12), as F.normalize
      return t * ops::rsqrt(ops::add_scalar(ops::sum(t * t, {-1}, true), 1e-24));
    };
    Tensor q = normalised(split(q_->forward(x))), k = normalised(split(k_->forward(x)));
    Tensor v = split(v_->forward(x));
    // exp(min(s, ln 100)) per head: s - relu(s - ln 100) keeps clamp's gradient (0 above).
    Tensor s = logit_scale_ - ops::relu(ops::add_scalar(logit_scale_, -std::log(100.0)));
    Tensor scores = ops::matmul(q, ops::transpose(k, 2, 3)) * ops::exp(s);  // [b', heads, n, n]
    Tensor table = cpb_out_->forward(ops::relu(cpb_hidden_->forward(
        to_dtype(to_device(coords_, logit_scale_.device()), logit_scale_.dtype()))));
    Tensor rel = ops::embedding(table, to_device(index_, table.device()));  // [n * n, heads]
    Tensor bias = ops::unsqueeze(
        ops::scale(ops::sigmoid(ops::reshape(ops::transpose(rel, 0, 1), {heads_, n, n})), 16.0), 0);
    if (shift_ > 0)
      bias = with_mask(bias, shift_mask(height, width, window_, shift_, -200.0f, x), batch);
    Tensor probs = probs_dropout_->forward(ops::softmax(scores + bias, -1));
    Tensor ctx = ops::reshape(ops::transpose(ops::matmul(probs, v), 1, 2), {windows, n, dim_});
    return out_->forward(ctx);
  }

  int64_t dim_, heads_, window_, shift_;
  double drop_path_;
  Tensor& logit_scale_;  // [heads, 1, 1]
  Tensor index_;         // i64 [window^4]
  Tensor coords_;        // [(2 window - 1)^2, 2]: the log-spaced offsets
  Linear *q_ = nullptr, *k_ = nullptr, *v_ = nullptr, *out_ = nullptr;
  Linear *cpb_hidden_ = nullptr, *cpb_out_ = nullptr;
  Dropout *probs_dropout_ = nullptr, *dropout_ = nullptr;
  Norm *norm1_ = nullptr, *norm2_ = nullptr;
  Mlp* mlp_ = nullptr;
};

}  // namespace

std::unique_ptr<WindowBlock> make_swin_block(const LayerContext& ctx, const SwinConfig& c,
                                             int64_t dim, int64_t heads, int64_t window,
                                             int64_t shift) {
  return std::make_unique<SwinBlock>(ctx, c, dim, heads, window, shift);
}

std::unique_ptr<WindowBlock> make_swinv2_block(const LayerContext& ctx, const SwinConfig& c,
                                               int64_t dim, int64_t heads, int64_t window,
                                               int64_t shift, int64_t pretrained_window) {
  return std::make_unique<SwinV2Block>(ctx, c, dim, heads, window, shift, pretrained_window);
}

PatchMerging::PatchMerging(const LayerContext& ctx, int64_t dim, double eps, bool norm_after)
    : dim_(dim), norm_after_(norm_after) {
  norm_ = &add_module(
      "norm", std::make_unique<Norm>(ctx, ops::NormKind::layer, norm_after ? 2 * dim : 4 * dim, eps));
  reduction_ = &add_module("reduction", std::make_unique<Linear>(ctx, 4 * dim, 2 * dim, false));
}

Tensor PatchMerging::forward(const Tensor& h, int64_t height, int64_t width) const {
  const int64_t batch = h.size(0);
  Tensor x = pad_to(ops::reshape(h, {batch, height, width, dim_}), height + height % 2,
                    width + width % 2);
  const auto part = [&](int64_t row, int64_t col) {
    return ops::slice(ops::slice(x, 1, row, x.size(1), 2), 2, col, x.size(2), 2);
  };
  Tensor merged = ops::cat({part(0, 0), part(1, 0), part(0, 1), part(1, 1)}, 3);
  merged = ops::reshape(merged, {batch, merged.size(1) * merged.size(2), 4 * dim_});
  if (norm_after_) return norm_->forward(reduction_->forward(merged));
  return reduction_->forward(norm_->forward(merged));
}

}  // namespace libai::models::swin
