// ViT (Dosovitskiy et al. 2021): a pre-LN transformer encoder over image patches, and the heads
// Hugging Face ships.
//
//   embed:   h = cat(cls, patches(pixels)) + position          // [batch, 1 + patches, hidden]
//            patches: Conv2d(kernel = stride = patch) as unfold + GEMM (layers/patch_embedding.h)
//   layers:  h = h + attn(norm(h)); h = h + mlp(norm(h))        // pre-LN, no mask
//   output:  last_hidden_state = norm(h)
//   heads:   encoder (ViTModel): + pooler_output = act(dense(last[:, 0])) when the pooler exists
//            image classifier: logits = linear(last[:, 0])
//
//   auto model = models::load_model("google/vit-base-patch16-224");
//   Tensor pixels = vision::preprocess(vision::load_image("cat.png"), processor);   // [1, 3, 224,
//   224] Tensor logits = model->forward({{"pixel_values", pixels}}).at("logits");      // [1, 1000]
//
// Position embeddings are not interpolated: pixel_values must have the config's image_size.
#pragma once

#include "models/family.h"
#include "models/layers/linear.h"
#include "models/model.h"

namespace libai::models {

// config.json of a ViT model.
struct VitConfig {
  int64_t hidden = 0, layers = 0, heads = 0, intermediate = 0, channels = 0, labels = 0;
  int64_t image_height = 0, image_width = 0, patch_height = 0, patch_width = 0, pooler_size = 0;
  Activation activation = Activation::gelu, pooler_activation = Activation::tanh;
  double eps = 1e-12;
  double hidden_dropout = 0.0, attention_dropout = 0.0;

  explicit VitConfig(const HfConfig& c);
  int64_t patches() const { return (image_height / patch_height) * (image_width / patch_width); }
};

// ViTModel (classifier false) or ViTForImageClassification, whole or one part (Note [Model
// parts]): the first part holds the patch embedding, the cls token and the positions, the last
// the final norm, the pooler and the classifier.
std::unique_ptr<Model> make_vit_model(const HfConfig& config, const LayerContext& ctx,
                                      bool classifier,
                                      const std::optional<StageSpec>& part = std::nullopt);

// The ONNX graph of a loaded ViT (Family::export_onnx; models/vit/vit_onnx.cc).
void export_vit_onnx(Model& model, const onnx::ExportOptions& options, onnx::ExportGraphs& graphs);

// The family's declaration, listed in models/registry.cc (no generation; no inference
// stages yet: a ViT part does not decode).
const Family& vit_family();

}  // namespace libai::models
