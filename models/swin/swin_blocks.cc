#include "models/swin/swin_blocks.h"

#include <cmath>

#include "models/layers/dropout.h"
#include "models/training_mode.h"
#include "ops/ops.h"
#include "runtime/device_copy.h"

namespace libai::models::swin {

namespace {

// x [batch, height, width, channels]: out[i] = x[(i + shift) mod size] along height and width
// (torch.roll by -shift).
Tensor roll_left(const Tensor& x, int64_t shift) {
  Tensor out = x;
  for (int64_t dim : {1, 2}) {
    const int64_t size = out.size(dim), s = ((shift % size) + size) % size;
    if (s == 0) continue;
    out = ops::cat({ops::narrow(out, dim, s, size - s), ops::narrow(out, dim, 0, s)}, dim);
  }
  return out;
}

// x [batch, h, w, channels] with zero rows and columns appended up to height x width.
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

// [batch, height, width, dim] -> [batch * (height / w) * (width / w), w * w, dim], and back.
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

// The shifted windows' mask over a height x width map (multiples of w): f32 [windows, 1, n, n]
// with n = w * w, `value` between tokens of regions that were not neighbours before the roll,
// else 0 (transformers' get_attn_mask, which uses -100).
Tensor shift_mask(int64_t height, int64_t width, int64_t w, int64_t shift, float value) {
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
  return Tensor::from_vector(mask, {rows * cols, 1, n, n});
}

// The row of the (2w - 1) x (2w - 1) relative offsets of each (query, key) pair of a window:
// i64 [w^4].
Tensor relative_index(int64_t w) {
  const int64_t n = w * w;
  std::vector<int64_t> index(size_t(n * n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      index[size_t(i * n + j)] = (i / w - j / w + w - 1) * (2 * w - 1) + (i % w - j % w + w - 1);
  return Tensor::from_vector(index, {n * n});
}

// Stochastic depth is not implemented: refused while training, a no-op otherwise.
void check_drop_path(double rate) {
  LIBAI_CHECK_KIND(Unsupported, rate == 0.0 || !training_mode().training, "swin: training with ",
                   "drop_path_rate = ", rate,
                   " is not supported yet (set drop_path_rate to 0 in config.json)");
}

}  // namespace

WindowBlock::WindowBlock(const BlockShape& shape, float mask_value)
    : shape_(shape),
      padded_height_((shape.height + shape.window - 1) / shape.window * shape.window),
      padded_width_((shape.width + shape.window - 1) / shape.window * shape.window) {
  if (shape.shift > 0)
    mask_ = shift_mask(padded_height_, padded_width_, shape.window, shape.shift, mask_value);
}

Tensor WindowBlock::to_windows(const Tensor& x) const {
  const Tensor grid = ops::reshape(x, {x.size(0), shape_.height, shape_.width, shape_.dim});
  return partition(roll_left(pad_to(grid, padded_height_, padded_width_), shape_.shift),
                   shape_.window);
}

Tensor WindowBlock::from_windows(const Tensor& windows, int64_t batch) const {
  Tensor x = roll_left(unpartition(windows, batch, padded_height_, padded_width_, shape_.window),
                       -shape_.shift);
  if (padded_height_ != shape_.height || padded_width_ != shape_.width)
    x = ops::narrow(ops::narrow(x, 1, 0, shape_.height), 2, 0, shape_.width);
  return ops::reshape(x, {batch, shape_.height * shape_.width, shape_.dim});
}

Tensor WindowBlock::with_mask(const Tensor& bias, int64_t batch) const {
  if (!mask_.defined()) return bias;
  const Tensor mask = to_dtype(to_device(mask_, bias.device()), bias.dtype());
  const int64_t windows = mask.size(0), heads = bias.size(1), n = bias.size(2);
  return ops::reshape(ops::expand(ops::unsqueeze(bias + mask, 0), {batch, windows, heads, n, n}),
                      {batch * windows, heads, n, n});
}

namespace {

class SwinBlock final : public WindowBlock {
 public:
  SwinBlock(const LayerContext& ctx, const SwinConfig& c, const BlockShape& shape)
      : WindowBlock(shape, -100.0f), drop_path_(c.drop_path),
        // Split by head over a tensor-parallel group, as the attention's heads are.
        table_(add_parameter("relative_position_bias_table",
                             {(2 * shape.window - 1) * (2 * shape.window - 1), shape.heads}, ctx,
                             /*split_dim=*/1)),
        index_(relative_index(shape.window)) {
    const int64_t dim = shape.dim;
    norm1_ = &add_module("norm1", std::make_unique<Norm>(ctx, ops::NormKind::layer, dim, c.eps));
    AttentionConfig attention{.hidden = dim, .heads = shape.heads, .bias = c.qkv_bias,
                              .out_bias = true, .dropout = c.attention_dropout};
    attention_ = &add_module("attention", std::make_unique<Attention>(ctx, attention));
    dropout_ = &add_module("dropout", std::make_unique<Dropout>(c.hidden_dropout));
    norm2_ = &add_module("norm2", std::make_unique<Norm>(ctx, ops::NormKind::layer, dim, c.eps));
    const MlpConfig mlp{.hidden = dim,
                        .intermediate = int64_t(double(dim) * c.mlp_ratio),
                        .activation = c.activation};
    mlp_ = &add_module("mlp", std::make_unique<Mlp>(ctx, mlp));
  }

  Tensor forward(const Tensor& h) const override {
    check_drop_path(drop_path_);
    const int64_t batch = h.size(0), n = shape_.window * shape_.window;
    // The table's row for every (query, key) pair: the bias [1, heads, n, n] (this rank's heads).
    Tensor table = ops::embedding(table_, to_device(index_, table_.device()));  // [n * n, heads]
    Tensor bias =
        ops::unsqueeze(ops::reshape(ops::transpose(table, 0, 1), {table_.size(1), n, n}), 0);
    Tensor x = attention_->forward(to_windows(norm1_->forward(h)), {.bias = with_mask(bias, batch)});
    Tensor out = h + dropout_->forward(from_windows(x, batch));
    return mlp_->forward(norm2_->forward(out), out);
  }

 private:
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
  SwinV2Block(const LayerContext& ctx, const SwinConfig& c, const BlockShape& shape)
      : WindowBlock(shape, -200.0f), drop_path_(c.drop_path),
        logit_scale_(add_parameter("logit_scale", {shape.heads, 1, 1}, ctx)),
        index_(relative_index(shape.window)) {
    const int64_t dim = shape.dim, heads = shape.heads, window = shape.window;
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
    const double span = shape.pretrained_window > 0 ? double(shape.pretrained_window - 1)
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

  Tensor forward(const Tensor& h) const override {
    check_drop_path(drop_path_);
    const int64_t batch = h.size(0);
    Tensor x = from_windows(attend(to_windows(h), batch), batch);
    // Post-norm: h + norm1(attention), then + norm2(mlp).
    Tensor out = h + norm1_->forward(dropout_->forward(x));
    return out + norm2_->forward(dropout_->forward(mlp_->forward(out)));
  }

 private:
  // x [b', n, dim] -> [b', n, dim]: scaled cosine attention with the continuous position bias
  // (and the shifted windows' mask).
  Tensor attend(const Tensor& x, int64_t batch) const {
    const int64_t windows = x.size(0), n = x.size(1), heads = shape_.heads, dim = shape_.dim;
    const int64_t hd = dim / heads;
    const auto split = [&](const Tensor& t) {  // [b', n, dim] -> [b', heads, n, hd]
      return ops::transpose(ops::reshape(t, {windows, n, heads, hd}), 1, 2);
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
        ops::scale(ops::sigmoid(ops::reshape(ops::transpose(rel, 0, 1), {heads, n, n})), 16.0), 0);
    Tensor probs = probs_dropout_->forward(ops::softmax(scores + with_mask(bias, batch), -1));
    Tensor ctx = ops::reshape(ops::transpose(ops::matmul(probs, v), 1, 2), {windows, n, dim});
    return out_->forward(ctx);
  }

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
                                             const BlockShape& shape) {
  return std::make_unique<SwinBlock>(ctx, c, shape);
}

std::unique_ptr<WindowBlock> make_swinv2_block(const LayerContext& ctx, const SwinConfig& c,
                                               const BlockShape& shape) {
  return std::make_unique<SwinV2Block>(ctx, c, shape);
}

PatchMerging::PatchMerging(const LayerContext& ctx, int64_t dim, double eps, bool norm_after,
                           int64_t height, int64_t width)
    : dim_(dim), height_(height), width_(width), norm_after_(norm_after) {
  norm_ = &add_module(
      "norm", std::make_unique<Norm>(ctx, ops::NormKind::layer, norm_after ? 2 * dim : 4 * dim, eps));
  reduction_ = &add_module("reduction", std::make_unique<Linear>(ctx, 4 * dim, 2 * dim, false));
}

Tensor PatchMerging::forward(const Tensor& h) const {
  const int64_t batch = h.size(0);
  Tensor x = pad_to(ops::reshape(h, {batch, height_, width_, dim_}), height_ + height_ % 2,
                    width_ + width_ % 2);
  const auto part = [&](int64_t row, int64_t col) {
    return ops::slice(ops::slice(x, 1, row, x.size(1), 2), 2, col, x.size(2), 2);
  };
  Tensor merged = ops::cat({part(0, 0), part(1, 0), part(0, 1), part(1, 1)}, 3);
  merged = ops::reshape(merged, {batch, merged.size(1) * merged.size(2), 4 * dim_});
  if (norm_after_) return norm_->forward(reduction_->forward(merged));
  return reduction_->forward(norm_->forward(merged));
}

}  // namespace libai::models::swin
