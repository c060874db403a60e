#include "models/vit/vit.h"

#include <utility>

#include "models/layers/patch_embedding.h"
#include "models/layers/transformer_layer.h"
#include "ops/ops.h"
#include "runtime/device_copy.h"

namespace libai::models {

namespace {

enum class Head { encoder, classifier };

}  // namespace

VitConfig::VitConfig(const HfConfig& c) {
  hidden = c.get_int("hidden_size", 768);
  layers = c.get_int("num_hidden_layers", 12);
  heads = c.get_int("num_attention_heads", 12);
  intermediate = c.get_int("intermediate_size", 3072);
  channels = c.get_int("num_channels", 3);
  std::tie(image_height, image_width) = c.get_size_pair("image_size", 224);
  std::tie(patch_height, patch_width) = c.get_size_pair("patch_size", 16);
  pooler_size = c.get_int("pooler_output_size", hidden);
  activation = parse_activation(c.get_string("hidden_act", "gelu"), c.path() + ": hidden_act");
  pooler_activation =
      parse_activation(c.get_string("pooler_act", "tanh"), c.path() + ": pooler_act");
  eps = c.get_double("layer_norm_eps", 1e-12);
  hidden_dropout = c.get_double("hidden_dropout_prob", 0.0);
  attention_dropout = c.get_double("attention_probs_dropout_prob", 0.0);
  labels = int64_t(c.labels().size());
  if (labels == 0) labels = c.get_int("num_labels", 2);
  LIBAI_CHECK_KIND(Unsupported, c.get_bool("qkv_bias", true), c.path(),
                   ": qkv_bias = false is not supported");
  LIBAI_CHECK_KIND(CorruptInput, heads > 0 && hidden % heads == 0, c.path(), ": hidden_size ",
                   hidden, " is not divisible by num_attention_heads ", heads);
  LIBAI_CHECK_KIND(CorruptInput,
                   patch_height > 0 && patch_width > 0 && image_height % patch_height == 0 &&
                       image_width % patch_width == 0,
                   c.path(), ": image_size ", image_height, "x", image_width,
                   " is not a multiple of patch_size ", patch_height, "x", patch_width);
}

namespace {

bool checkpoint_has_pooler(const HfConfig& c) {
  const std::filesystem::path file = c.path();  // "<config>" for a config made in memory
  if (!std::filesystem::is_regular_file(file)) return true;
  try {
    auto source = WeightSource::open(file.has_parent_path() ? file.parent_path() : ".");
    return source.contains("pooler.dense.weight") || source.contains("vit.pooler.dense.weight");
  } catch (const Error&) {
    return true;  // no readable checkpoint there: load_model reports its own errors
  }
}

class Vit : public Model {
 public:
  Vit(const HfConfig& hf, const LayerContext& ctx, Head head, const StageSpec& part)
      : Model(hf), c_(hf), head_(head) {
    part_ = part;
    if (part.is_first()) {
      cls_ = &add_parameter("cls_token", {1, 1, c_.hidden}, ctx);
      positions_ = &add_parameter("position_embeddings", {1, c_.patches() + 1, c_.hidden}, ctx);
      const PatchEmbeddingConfig patch{.channels = c_.channels,
                                       .patch_height = c_.patch_height,
                                       .patch_width = c_.patch_width,
                                       .hidden = c_.hidden};
      patches_ = &add_module("patches", std::make_unique<PatchEmbedding>(ctx, patch));
      embed_dropout_ = &add_module("embed_dropout", std::make_unique<Dropout>(c_.hidden_dropout));
    }
    TransformerLayerConfig layer;
    layer.attention.hidden = c_.hidden;
    layer.attention.heads = c_.heads;
    layer.mlp = {.hidden = c_.hidden, .intermediate = c_.intermediate, .activation = c_.activation};
    layer.pre_norm = true;
    layer.norm_eps = c_.eps;
    layer.attention.dropout = c_.attention_dropout;
    layer.dropout = c_.hidden_dropout;
    for (int i = part.first_layer; i < part.last_layer; ++i)
      layers_.push_back(&add_module("layers." + std::to_string(i),
                                    std::make_unique<TransformerLayer>(ctx, layer)));
    if (part.is_last()) {
      final_norm_ = &add_module(
          "final_norm", std::make_unique<Norm>(ctx, ops::NormKind::layer, c_.hidden, c_.eps));
      if (head == Head::encoder && checkpoint_has_pooler(hf))
        pooler_ = &add_module("pooler", std::make_unique<Linear>(ctx, c_.hidden, c_.pooler_size));
      if (head == Head::classifier) {
        LIBAI_CHECK_KIND(Unsupported, c_.labels > 0, hf.path(),
                         ": num_labels = 0 is not supported");
        classifier_ =
            &add_module("classifier", std::make_unique<Linear>(ctx, c_.hidden, c_.labels));
      }
    }
    build_weight_map();
  }

  // The whole model, or one part (Note [Model parts]):
  //   first part in:  pixel_values [batch, channels, height, width]
  //   later parts in: hidden_states [batch, 1 + patches, hidden]
  //   out:            hidden_states (parts before the last), or last_hidden_state,
  //                   pooler_output and logits as the head has them (the last)
  TensorMap forward(const TensorMap& inputs) override {
    Tensor h;  // [batch, 1 + patches, hidden]
    if (part_.is_first()) {
      Tensor pixels = pixel_values(require_input(inputs, "pixel_values", "vit"));
      const int64_t batch = pixels.size(0);
      Tensor cls = ops::expand(*cls_, {batch, 1, c_.hidden});
      h = embed_dropout_->forward(ops::cat({cls, patches_->forward(pixels)}, 1) + *positions_);
    } else {
      h = require_input(inputs, "hidden_states", "vit");
      LIBAI_CHECK(h.dim() == 3 && h.size(1) == c_.patches() + 1 && h.size(2) == c_.hidden, "vit ",
                  to_string(part_), ": hidden_states should be [batch, ", c_.patches() + 1, ", ",
                  c_.hidden, "], got ", shape_str(h.shape()));
    }
    const bool whole = part_.is_whole();
    TensorMap out;
    if (whole) out["hidden_states.0"] = h;
    LayerInputs in;
    for (size_t i = 0; i < layers_.size(); ++i) {
      h = layers_[i]->forward(h, in);
      if (whole) out["hidden_states." + std::to_string(i + 1)] = h;
    }
    if (!part_.is_last()) return {{"hidden_states", h}};
    h = final_norm_->forward(h);
    out["last_hidden_state"] = h;
    Tensor first = ops::select(h, 1, 0);  // [batch, hidden]
    if (pooler_)
      out["pooler_output"] = apply_activation(c_.pooler_activation, pooler_->forward(first));
    if (classifier_) out["logits"] = classifier_->forward(first);  // [batch, labels]
    return out;
  }

  Task task() const override {
    return head_ == Head::classifier ? Task::image_classification : Task::encoder;
  }
  const WeightMap& weight_map() const override { return map_; }

 private:
  // Checks the shape and brings the pixels to the parameters' dtype and device.
  Tensor pixel_values(const Tensor& pixels) const {
    LIBAI_CHECK(pixels.dim() == 4 && pixels.size(1) == c_.channels,
                "vit: pixel_values should be [batch, ", c_.channels, ", height, width], got ",
                shape_str(pixels.shape()));
    LIBAI_CHECK(pixels.size(2) == c_.image_height && pixels.size(3) == c_.image_width,
                "vit: pixel_values of ", pixels.size(2), "x", pixels.size(3),
                " do not match the model's image_size ", c_.image_height, "x", c_.image_width,
                " (position embeddings are not interpolated): resize the image to ",
                c_.image_height, "x", c_.image_width);
    return to_dtype(to_device(pixels, cls_->device()), cls_->dtype());  // cls_: the first part's
  }

  void build_weight_map() {
    map_.source_prefixes = {"", "vit."};
    auto both = [&](const std::string& ours, const std::string& hf) {
      map_.add(ours + ".weight", hf + ".weight");
      map_.add(ours + ".bias", hf + ".bias");
    };
    map_.add("cls_token", "embeddings.cls_token");
    map_.add("position_embeddings", "embeddings.position_embeddings");
    both("patches", "embeddings.patch_embeddings.projection");
    for (int64_t i = 0; i < c_.layers; ++i) {
      const std::string o = "layers." + std::to_string(i) + ".",
                        h = "encoder.layer." + std::to_string(i) + ".";
      both(o + "attention_norm", h + "layernorm_before");
      for (const std::string part : {"weight", "bias"})
        map_.add_heads(
            o + "attention.qkv." + part,
            {h + "attention.attention.query." + part, h + "attention.attention.key." + part,
             h + "attention.attention.value." + part},
            3, c_.heads);
      both(o + "attention.out", h + "attention.output.dense");
      both(o + "mlp_norm", h + "layernorm_after");
      both(o + "mlp.up", h + "intermediate.dense");
      both(o + "mlp.down", h + "output.dense");
    }
    both("final_norm", "layernorm");
    if (pooler_) both("pooler", "pooler.dense");
    if (classifier_) both("classifier", "classifier");
    map_.ignore("embeddings.mask_token");  // ViTForMaskedImageModeling's
    map_.ignore("pooler.dense.weight");    // a ViTModel checkpoint loaded as a classifier
    map_.ignore("pooler.dense.bias");
  }

  VitConfig c_;
  Head head_;
  Tensor* cls_ = nullptr;        // [1, 1, hidden]
  Tensor* positions_ = nullptr;  // [1, 1 + patches, hidden]
  PatchEmbedding* patches_ = nullptr;
  Dropout* embed_dropout_ = nullptr;
  std::vector<TransformerLayer*> layers_;
  Norm* final_norm_ = nullptr;
  Linear* pooler_ = nullptr;
  Linear* classifier_ = nullptr;
  WeightMap map_;
};

}  // namespace

std::unique_ptr<Model> make_vit_model(const HfConfig& config, const LayerContext& ctx,
                                      bool classifier, const std::optional<StageSpec>& part) {
  const int layers = int(VitConfig(config).layers);
  if (part) check_part(config, *part, layers);
  return std::make_unique<Vit>(config, ctx, classifier ? Head::classifier : Head::encoder,
                               part.value_or(StageSpec{0, layers, layers}));
}

namespace {

template <bool classifier>
std::unique_ptr<Model> make(const HfConfig& config, const LayerContext& ctx,
                            const std::optional<StageSpec>& part) {
  return make_vit_model(config, ctx, classifier, part);
}

int num_layers(const HfConfig& config) { return int(VitConfig(config).layers); }

std::vector<LayerCost> layer_costs(const HfConfig& config, double tokens, double context,
                                   double bytes) {
  const VitConfig c(config);
  const LayerShape s{.hidden = double(c.hidden),
                     .inner = double(c.hidden),
                     .heads = double(c.heads),
                     .ff = double(c.intermediate)};
  return std::vector<LayerCost>(size_t(c.layers),
                                transformer_layer_cost(s, tokens, context, bytes));
}

// The patch projection, the class token and the positions.
LayerCost embedding_cost(const HfConfig& config, double tokens, double bytes) {
  const VitConfig c(config);
  const double h = double(c.hidden), patch = double(c.channels * c.patch_height * c.patch_width);
  LayerCost cost;
  cost.weight_bytes = bytes * ((patch + 1) * h + h + double(c.patches() + 1) * h);
  cost.flops = 2 * tokens * patch * h + 2 * tokens * h;
  cost.activation_bytes_per_token = bytes * (patch + h);
  cost.output_bytes_per_token = bytes * h;
  return cost;
}

// The final norm over every position, then the classifier (or the pooler, when the checkpoint
// has one) on each image's class token.
LayerCost head_cost(const HfConfig& config, double tokens, double bytes) {
  const VitConfig c(config);
  const double h = double(c.hidden);
  const bool classifier = config.architecture() == "ViTForImageClassification";
  const double out = classifier                      ? double(c.labels)
                     : checkpoint_has_pooler(config) ? double(c.pooler_size)
                                                     : 0;
  const double images = tokens / double(c.patches() + 1);
  LayerCost cost;
  cost.weight_bytes = bytes * (2 * h + (h + 1) * out);
  cost.flops = 5 * tokens * h + 2 * images * h * out;
  cost.activation_bytes_per_token = bytes * 2 * h;
  cost.output_bytes_per_token = classifier ? 4 * out : bytes * h;
  return cost;
}

// l x (4 h^2 + 2 h ff) + channels x patch area x h (the patch projection), over the patches
// and the class token.
FlopsShape flops(const HfConfig& config) {
  const VitConfig c(config);
  const double h = double(c.hidden);
  const double patch = double(c.channels * c.patch_height * c.patch_width) * h;
  return {
      .matrix_parameters = double(c.layers) * (4 * h * h + 2 * h * double(c.intermediate)) + patch,
      .attention_blocks = c.layers,
      .attention_width = c.hidden,
      .tokens = c.patches() + 1};
}

}  // namespace

const Family& vit_family() {
  static const Family family{
      .model_type = "vit",
      .heads = {{"", make<false>},
                {"ViTModel", make<false>},
                {"ViTForImageClassification", make<true>}},
      .num_layers = num_layers,
      .costs = {.layers = layer_costs, .embedding = embedding_cost, .head = head_cost},
      .flops = flops,
      .export_onnx = export_vit_onnx,
  };
  return family;
}

}  // namespace libai::models
