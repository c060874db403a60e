// ViT's ONNX graph (models/onnx/export.h), the same computation as vit.cc:
//
//   in:  pixel_values [batch, channels, image_height, image_width] f32 (the config's size:
//        position embeddings are not interpolated)
//   out: ViTModel: last_hidden_state [batch, 1 + patches, hidden], pooler_output
//        [batch, pooler_size] when the checkpoint has a pooler
//        ViTForImageClassification: logits [batch, labels]
#include <cmath>

#include "models/onnx/blocks.h"
#include "models/onnx/export.h"
#include "models/vit/vit.h"

namespace libai::models {

void export_vit_onnx(Model& model, const onnx::ExportOptions&, onnx::ExportGraphs& graphs) {
  onnx::GraphBuilder& g = graphs.add("vit");
  using namespace onnx;
  const VitConfig c(model.config());
  const int64_t d = c.hidden / c.heads;
  const Value pixels =
      g.input("pixel_values", DType::f32, {"batch", c.channels, c.image_height, c.image_width});
  Value h;  // [batch, 1 + patches, hidden]
  {
    GraphBuilder::Scope scope(g, "embed");
    // The patch embedding is a convolution with stride = kernel = the patch.
    const Value grid =
        g.op("Conv", {pixels, weight(g, model, "patches.weight"), weight(g, model, "patches.bias")},
             {{"kernel_shape", std::vector<int64_t>{c.patch_height, c.patch_width}},
              {"strides", std::vector<int64_t>{c.patch_height, c.patch_width}}});
    const Value patches =
        g.op("Transpose", {g.op("Reshape", {grid, g.ints({0, c.hidden, -1}, "shape")})},
             {{"perm", std::vector<int64_t>{0, 2, 1}}});  // [batch, patches, hidden]
    const Value cls_shape =
        g.op("Concat", {dim_of(g, pixels, 0), g.ints({1, c.hidden}, "cls_dims")}, {{"axis", 0}});
    const Value cls = g.op("Expand", {weight(g, model, "cls_token"), cls_shape});
    h = g.op("Add", {g.op("Concat", {cls, patches}, {{"axis", 1}}),
                     weight(g, model, "position_embeddings")});
  }
  for (int64_t i = 0; i < c.layers; ++i) {  // pre-LN, no mask
    const std::string layer = "layers." + std::to_string(i);
    GraphBuilder::Scope scope(g, layer);
    const Value x = layer_norm(g, h, model, layer + ".attention_norm", c.eps);
    const Qkv qkv = self_attention_qkv(g, x, model, layer + ".attention", c.heads, c.heads, d);
    const Value o = attend(g, qkv.q, qkv.k, qkv.v, nullptr, 1.0 / std::sqrt(double(d)));
    h = g.op("Add", {h, linear(g, merge_heads(g, o, c.heads, d), model, layer + ".attention.out")});
    const Value y = layer_norm(g, h, model, layer + ".mlp_norm", c.eps);
    h = g.op("Add", {h, mlp(g, y, model, layer + ".mlp", c.activation)});
  }
  h = layer_norm(g, h, model, "final_norm", c.eps);
  GraphBuilder::Scope scope(g, "head");
  const Value first = g.op("Gather", {h, g.scalar_int(0, "first")}, {{"axis", 1}});  // [b, hidden]
  if (model.task() == Task::image_classification) {
    g.output(linear(g, first, model, "classifier"), "logits", DType::f32, {"batch", c.labels});
    return;
  }
  g.output(h, "last_hidden_state", DType::f32, {"batch", c.patches() + 1, c.hidden});
  if (model.find_parameter("pooler.weight"))
    g.output(activation(g, c.pooler_activation, linear(g, first, model, "pooler")), "pooler_output",
             DType::f32, {"batch", c.pooler_size});
}

}  // namespace libai::models
