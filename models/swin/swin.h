// Swin Transformer (Liu et al. 2021): a hierarchy of stages over image patches, each a stack of
// blocks that attend within local windows, every second block with the windows shifted by half
// a window, and a patch merging between stages that halves the resolution and doubles the
// width. Hugging Face's SwinModel and SwinForImageClassification.
//
//   embed:  h = norm(patches(pixels))                        // [batch, (H / p) (W / p), C]
//   block:  x = windows(roll(norm1(h), -shift))              // [batch * windows, w^2, C]
//           h = h + roll(unwindows(attn(x, bias)), +shift)   // bias: relative positions (+ the
//           h = h + mlp(norm2(h))                            //   shifted windows' mask)
//   merge:  h = reduction(norm(cat(h[0::2, 0::2], h[1::2, 0::2], h[0::2, 1::2], h[1::2, 1::2])))
//   output: last_hidden_state = norm(h); pooler_output = mean over the patches;
//           logits = classifier(pooler_output)
//
//   auto model = models::load_model("microsoft/swin-tiny-patch4-window7-224");
//   Tensor logits = model->forward({{"pixel_values", pixels}}).at("logits");   // [1, 1000]
//
// SwinV2 (Liu et al. 2022), model_type "swinv2": scaled cosine attention with a continuous
// position bias (Note [SwinV2 attention] in swin_blocks.cc), post-norm residuals, and the
// merging's norm after its projection.
//
// Note [Swin windows]: a stage whose feature map is no larger than the window attends over the
// whole map in one window, unshifted (as transformers does). For Swin a map smaller than the
// window is refused: transformers 4 built those blocks' position tables for the smaller window
// and transformers 5 for the configured one, so a checkpoint's tables fit only one of them
// (SwinV2's biases come from an MLP, which fits any window). Feature
// maps that are not multiples of the window are padded with zeros after the first norm, as
// transformers does (the padding is not masked in unshifted windows there either).
#pragma once

#include "models/family.h"
#include "models/layers/linear.h"
#include "models/model.h"

namespace libai::models {

// config.json of a Swin or SwinV2 model (model_type "swin" or "swinv2").
struct SwinConfig {
  bool v2 = false;
  int64_t image_height = 0, image_width = 0, patch = 0, channels = 0, embed_dim = 0;
  int64_t window = 0, labels = 0;
  std::vector<int64_t> depths, heads;  // per stage
  std::vector<int64_t> pretrained_windows;  // SwinV2, per stage: 0 = the window itself
  double mlp_ratio = 4.0, eps = 1e-5;
  double hidden_dropout = 0.0, attention_dropout = 0.0, drop_path = 0.0;
  Activation activation = Activation::gelu;
  bool qkv_bias = true;

  explicit SwinConfig(const HfConfig& c);
  int64_t stages() const { return int64_t(depths.size()); }
  int64_t blocks() const;                       // over all stages
  int64_t dim(int64_t stage) const { return embed_dim << stage; }
  int64_t features() const { return dim(stages() - 1); }
  // The feature map entering `stage` (patches, then halved, rounding up, per merging).
  std::pair<int64_t, int64_t> resolution(int64_t stage) const;
  // The window of the stage's blocks (Note [Swin windows]) and whether it covers the whole map
  // (then no block shifts).
  std::pair<int64_t, bool> stage_window(int64_t stage) const;
};

// Swin(v2)Model (classifier false) or Swin(v2)ForImageClassification, whole or one part of its
// blocks (Note [Swin parts] in swin.cc). Swin splits over a tensor-parallel group (heads, the
// position-bias table's columns, the MLP); SwinV2 does not yet (Unsupported).
std::unique_ptr<Model> make_swin_model(const HfConfig& config, const LayerContext& ctx,
                                       bool classifier,
                                       const std::optional<StageSpec>& part = std::nullopt);

// The families' declarations, listed in models/registry.cc.
const Family& swin_family();
const Family& swinv2_family();

}  // namespace libai::models
