// The pieces of models/swin/swin.cc: window partitioning, the shifted windows' mask, Swin's and
// SwinV2's blocks (transformers' SwinLayer and Swinv2Layer) and the patch merging between
// stages. Shapes: h [batch, height * width, dim] in and out of a block; windows
// [batch * windows, window^2, dim].
#pragma once

#include "models/layers/attention.h"
#include "models/layers/mlp.h"
#include "models/swin/swin.h"

namespace libai::models::swin {

// x [batch, height, width, channels]: out[i] = x[(i + shift) mod size] along height and width
// (torch.roll by -shift).
Tensor roll_left(const Tensor& x, int64_t shift);
// x [batch, h, w, channels] with zero rows and columns appended up to height x width.
Tensor pad_to(const Tensor& x, int64_t height, int64_t width);
// [batch, height, width, dim] -> [batch * (height / w) * (width / w), w * w, dim], and back.
Tensor partition(const Tensor& x, int64_t w);
Tensor unpartition(const Tensor& windows, int64_t batch, int64_t height, int64_t width, int64_t w);
// The shifted windows' mask over a height x width map (multiples of w): [windows, 1, n, n]
// with n = w * w, `value` between tokens of different regions before the roll, else 0
// (transformers' get_attn_mask, which uses -100).
Tensor shift_mask(int64_t height, int64_t width, int64_t w, int64_t shift, float value,
                  const Tensor& like);
// The row of the (2w - 1) x (2w - 1) relative offsets of each (query, key) pair of a window:
// i64 [w^4].
Tensor relative_index(int64_t w);

// A block over windows of `window` tokens a side, shifted by `shift` (0: not shifted).
class WindowBlock : public Module {
 public:
  virtual Tensor forward(const Tensor& h, int64_t height, int64_t width) const = 0;
};

// Swin: pre-norm, attention with a learned table of relative position biases.
std::unique_ptr<WindowBlock> make_swin_block(const LayerContext& ctx, const SwinConfig& c,
                                             int64_t dim, int64_t heads, int64_t window,
                                             int64_t shift);
// SwinV2: scaled cosine attention, biases from a small MLP over log-spaced offsets
// (continuous position bias), post-norm residuals.
std::unique_ptr<WindowBlock> make_swinv2_block(const LayerContext& ctx, const SwinConfig& c,
                                               int64_t dim, int64_t heads, int64_t window,
                                               int64_t shift, int64_t pretrained_window);

// 2 x 2 neighbourhoods concatenated (4 dim) and projected to 2 dim without bias; the norm
// before the projection (Swin, over 4 dim) or after it (SwinV2, over 2 dim).
class PatchMerging : public Module {
 public:
  PatchMerging(const LayerContext& ctx, int64_t dim, double eps, bool norm_after);
  // h [batch, height * width, dim] -> [batch, ceil(height / 2) * ceil(width / 2), 2 dim]
  Tensor forward(const Tensor& h, int64_t height, int64_t width) const;

 private:
  int64_t dim_;
  bool norm_after_;
  Norm* norm_ = nullptr;
  Linear* reduction_ = nullptr;
};

}  // namespace libai::models::swin
