#include "models/layers/patch_embedding.h"

#include "models/layers/linear.h"

#include "ops/ops.h"

namespace libai::models {

PatchEmbedding::PatchEmbedding(const LayerContext& ctx, const PatchEmbeddingConfig& config)
    : config_(config),
      weight_(add_parameter(
          "weight", {config.hidden, config.channels, config.patch_height, config.patch_width},
          ctx)) {
  if (config.bias) bias_ = &add_parameter("bias", {config.hidden}, ctx);
}

Tensor unfold_patches(const Tensor& pixels, int64_t patch_height, int64_t patch_width) {
  LIBAI_CHECK(pixels.dim() == 4,
              "unfold_patches: pixels should be [batch, channels, height, width], got ",
              shape_str(pixels.shape()));
  const int64_t batch = pixels.size(0), channels = pixels.size(1), height = pixels.size(2),
                width = pixels.size(3);
  LIBAI_CHECK(height % patch_height == 0 && width % patch_width == 0, "unfold_patches: image of ",
              height, "x", width, " does not divide into patches of ", patch_height, "x",
              patch_width);
  const int64_t rows = height / patch_height, cols = width / patch_width;
  // [batch, channels, rows, patch_height, cols, patch_width]
  Tensor x = ops::reshape(pixels, {batch, channels, rows, patch_height, cols, patch_width});
  // [batch, rows, cols, channels, patch_height, patch_width]: one copy gathers each patch
  x = ops::contiguous(ops::permute(x, {0, 2, 4, 1, 3, 5}));
  return ops::reshape(x, {batch, rows * cols, channels * patch_height * patch_width});
}

Tensor PatchEmbedding::forward(const Tensor& pixels) const {
  const auto& c = config_;
  LIBAI_CHECK(pixels.dim() == 4 && pixels.size(1) == c.channels,
              "patch embedding: pixels should be [batch, ", c.channels,
              ", height, width] (num_channels = ", c.channels, "), got ",
              shape_str(pixels.shape()));
  Tensor patches = unfold_patches(pixels, c.patch_height, c.patch_width);
  Tensor weight = ops::view(weight_, {c.hidden, c.channels * c.patch_height * c.patch_width});
  // A convolution in torch, which autocast casts like a Linear.
  return autocast_linear(patches, weight, bias_ ? *bias_ : Tensor());  // [batch, patches, hidden]
}

}  // namespace libai::models
