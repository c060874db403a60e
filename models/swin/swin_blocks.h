// The pieces of models/swin/swin.cc: Swin's and SwinV2's blocks (transformers' SwinLayer and
// Swinv2Layer) over a common windowing base, and the patch merging between stages.
#pragma once

#include "models/layers/attention.h"
#include "models/layers/mlp.h"
#include "models/swin/swin.h"

namespace libai::models::swin {

// Where a block sits: its width and heads, the feature map it sees (height x width patches),
// its window and shift (0: not shifted) and, for SwinV2, the pretrained window its position
// offsets are scaled by (0: its own window).
struct BlockShape {
  int64_t dim = 0, heads = 0, height = 0, width = 0, window = 0, shift = 0;
  int64_t pretrained_window = 0;
};

// A block over windows: h [batch, height * width, dim] -> the same shape. The base holds the
// windowing both versions share: zero padding to multiples of the window, the cyclic shift,
// the partition into windows and back, and the shifted windows' mask, made once.
class WindowBlock : public Module {
 public:
  // mask_value: the score added between tokens of different regions of a shifted window.
  WindowBlock(const BlockShape& shape, float mask_value);
  virtual Tensor forward(const Tensor& h) const = 0;

 protected:
  // x [batch, height * width, dim] -> [batch * windows, window^2, dim], padded and shifted.
  Tensor to_windows(const Tensor& x) const;
  // The inverse: [batch * windows, window^2, dim] -> [batch, height * width, dim].
  Tensor from_windows(const Tensor& windows, int64_t batch) const;
  // bias [1, heads, n, n] as the attention's bias: with shifted windows plus the mask,
  // [batch * windows, heads, n, n].
  Tensor with_mask(const Tensor& bias, int64_t batch) const;

  BlockShape shape_;
  int64_t padded_height_, padded_width_;
  Tensor mask_;  // f32 [windows, 1, n, n] on the CPU; undefined when not shifted
};

// Swin: pre-norm, attention with a learned table of relative position biases.
std::unique_ptr<WindowBlock> make_swin_block(const LayerContext& ctx, const SwinConfig& c,
                                             const BlockShape& shape);
// SwinV2: scaled cosine attention, biases from a small MLP over log-spaced offsets
// (continuous position bias), post-norm residuals.
std::unique_ptr<WindowBlock> make_swinv2_block(const LayerContext& ctx, const SwinConfig& c,
                                               const BlockShape& shape);

// 2 x 2 neighbourhoods of a height x width map concatenated (4 dim) and projected to 2 dim
// without bias; the norm before the projection (Swin, over 4 dim) or after it (SwinV2, over
// 2 dim).
class PatchMerging : public Module {
 public:
  PatchMerging(const LayerContext& ctx, int64_t dim, double eps, bool norm_after, int64_t height,
               int64_t width);
  // h [batch, height * width, dim] -> [batch, ceil(height / 2) * ceil(width / 2), 2 dim]
  Tensor forward(const Tensor& h) const;

 private:
  int64_t dim_, height_, width_;
  bool norm_after_;
  Norm* norm_ = nullptr;
  Linear* reduction_ = nullptr;
};

}  // namespace libai::models::swin
