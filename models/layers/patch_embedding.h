// Patch embedding of vision transformers (ViT): a Conv2d whose kernel and stride are both the
// patch size, computed as unfold-to-patches followed by one GEMM.
//
//   PatchEmbedding patches(ctx, {.channels = 3, .patch_height = 16, .patch_width = 16,
//                                .hidden = 768});
//   Tensor h = patches.forward(pixels);   // [batch, 3, 224, 224] -> [batch, 196, 768]
//
// The weight keeps PyTorch's conv layout [hidden, channels, patch_height, patch_width], so a
// checkpoint's `projection.weight` loads as is; forward views it as a Linear weight
// [hidden, channels * patch_height * patch_width], whose column order (channel, row, column)
// is the order in which each patch is unfolded. Patches are numbered row by row, like
// `conv(x).flatten(2).transpose(1, 2)`.
#pragma once

#include "models/module.h"

namespace libai::models {

struct PatchEmbeddingConfig {
  int64_t channels = 3;
  int64_t patch_height = 16;
  int64_t patch_width = 16;
  int64_t hidden = 768;
  bool bias = true;
};

class PatchEmbedding : public Module {
 public:
  PatchEmbedding(const LayerContext& ctx, const PatchEmbeddingConfig& config);
  // pixels [batch, channels, height, width], height and width multiples of the patch size
  // -> [batch, (height / patch_height) * (width / patch_width), hidden]
  Tensor forward(const Tensor& pixels) const;
  const PatchEmbeddingConfig& config() const { return config_; }

 private:
  PatchEmbeddingConfig config_;
  Tensor& weight_;  // [hidden, channels, patch_height, patch_width]
  Tensor* bias_ = nullptr;
};

// pixels [batch, channels, height, width] -> [batch, patches, channels * patch_height *
// patch_width]
Tensor unfold_patches(const Tensor& pixels, int64_t patch_height, int64_t patch_width);

}  // namespace libai::models
