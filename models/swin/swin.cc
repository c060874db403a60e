#include "models/swin/swin.h"

#include <numeric>
#include <utility>

#include "models/layers/patch_embedding.h"
#include "models/swin/swin_blocks.h"
#include "ops/ops.h"
#include "runtime/device_copy.h"

namespace libai::models {

SwinConfig::SwinConfig(const HfConfig& c) {
  v2 = c.model_type() == "swinv2";
  std::tie(image_height, image_width) = c.get_size_pair("image_size", 224);
  patch = c.get_int("patch_size", 4);
  channels = c.get_int("num_channels", 3);
  embed_dim = c.get_int("embed_dim", 96);
  window = c.get_int("window_size", 7);
  depths = c.has("depths") ? c.get_int_list("depths") : std::vector<int64_t>{2, 2, 6, 2};
  heads = c.has("num_heads") ? c.get_int_list("num_heads") : std::vector<int64_t>{3, 6, 12, 24};
  mlp_ratio = c.get_double("mlp_ratio", 4.0);
  eps = c.get_double("layer_norm_eps", 1e-5);
  hidden_dropout = c.get_double("hidden_dropout_prob", 0.0);
  attention_dropout = c.get_double("attention_probs_dropout_prob", 0.0);
  drop_path = c.get_double("drop_path_rate", 0.1);
  activation = parse_activation(c.get_string("hidden_act", "gelu"), c.path() + ": hidden_act");
  qkv_bias = c.get_bool("qkv_bias", true);
  pretrained_windows = c.has("pretrained_window_sizes") ? c.get_int_list("pretrained_window_sizes")
                                                        : std::vector<int64_t>(depths.size(), 0);
  labels = int64_t(c.labels().size());
  if (labels == 0) labels = c.get_int("num_labels", 2);
  LIBAI_CHECK_KIND(Unsupported, !c.get_bool("use_absolute_embeddings", false), c.path(),
                   ": use_absolute_embeddings = true is not supported");
  LIBAI_CHECK_KIND(CorruptInput, !depths.empty() && depths.size() == heads.size(), c.path(),
                   ": \"depths\" and \"num_heads\" should be lists of the same nonzero length");
  LIBAI_CHECK_KIND(CorruptInput,
                   patch > 0 && image_height % patch == 0 && image_width % patch == 0, c.path(),
                   ": image_size ", image_height, "x", image_width,
                   " is not a multiple of patch_size ", patch);
  LIBAI_CHECK_KIND(CorruptInput, window > 0, c.path(), ": window_size should be positive");
  // transformers' default lists four entries whatever the number of stages; extra ones are unused.
  LIBAI_CHECK_KIND(CorruptInput, !v2 || pretrained_windows.size() >= depths.size(), c.path(),
                   ": \"pretrained_window_sizes\" should have an entry for each stage");
  for (int64_t s = 0; s < stages(); ++s) {
    LIBAI_CHECK_KIND(CorruptInput, depths[size_t(s)] > 0 && heads[size_t(s)] > 0 &&
                                       dim(s) % heads[size_t(s)] == 0,
                     c.path(), ": stage ", s, " has width ", dim(s), ", depth ", depths[size_t(s)],
                     " and ", heads[size_t(s)], " heads (the heads must divide the width)");
    const auto [h, w] = resolution(s);
    LIBAI_CHECK_KIND(Unsupported, v2 || std::min(h, w) >= window, c.path(), ": stage ", s,
                     "'s feature map is ", h, "x", w, ", smaller than window_size ", window,
                     " (Note [Swin windows] in models/swin/swin.h)");
  }
}

int64_t SwinConfig::blocks() const {
  return std::accumulate(depths.begin(), depths.end(), int64_t(0));
}

std::pair<int64_t, int64_t> SwinConfig::resolution(int64_t stage) const {
  int64_t h = image_height / patch, w = image_width / patch;
  for (int64_t s = 0; s < stage; ++s) h = (h + 1) / 2, w = (w + 1) / 2;
  return {h, w};
}

std::pair<int64_t, bool> SwinConfig::stage_window(int64_t stage) const {
  const auto [h, w] = resolution(stage);
  const int64_t side = std::min(h, w);
  return side <= window ? std::pair{side, true} : std::pair{window, false};
}

namespace {

enum class Head { encoder, classifier };

// Note [Swin parts]: a pipeline cuts Swin's blocks, counted over all stages (num_layers =
// sum(depths)). A part holds its blocks and the patch merging of every stage whose last block
// it holds, so a part after a stage's end starts at the next stage's resolution and width; the
// hidden_states between parts are [batch, the stage's patches, its width].
class Swin : public Model {
 public:
  Swin(const HfConfig& hf, const LayerContext& ctx, Head head, const StageSpec& part)
      : Model(hf), c_(hf), head_(head) {
    part_ = part;
    LIBAI_CHECK_KIND(Unsupported, !c_.v2 || ctx.tp_size() <= 1, hf.path(),
                     ": swinv2 does not support tensor parallelism yet");
    if (part.is_first()) {
      const PatchEmbeddingConfig patch{.channels = c_.channels,
                                       .patch_height = c_.patch,
                                       .patch_width = c_.patch,
                                       .hidden = c_.embed_dim};
      patches_ = &add_module("patches", std::make_unique<PatchEmbedding>(ctx, patch));
      embed_norm_ = &add_module(
          "embed_norm", std::make_unique<Norm>(ctx, ops::NormKind::layer, c_.embed_dim, c_.eps));
      embed_dropout_ = &add_module("embed_dropout", std::make_unique<Dropout>(c_.hidden_dropout));
    }
    int64_t global = 0;  // the block's index over all stages
    for (int64_t s = 0; s < c_.stages(); ++s) {
      // Note [Swin windows]: a map no larger than the window is one window, unshifted.
      const auto [window, whole] = c_.stage_window(s);
      const auto [height, width] = c_.resolution(s);
      swin::BlockShape shape{.dim = c_.dim(s), .heads = c_.heads[size_t(s)], .height = height,
                             .width = width, .window = window,
                             .pretrained_window = c_.v2 ? c_.pretrained_windows[size_t(s)] : 0};
      for (int64_t b = 0; b < c_.depths[size_t(s)]; ++b, ++global) {
        if (global < part.first_layer || global >= part.last_layer) continue;
        shape.shift = whole || b % 2 == 0 ? 0 : c_.window / 2;
        Step step{.stage = s};
        step.block = &add_module(block_name(s, b), c_.v2 ? swin::make_swinv2_block(ctx, c_, shape)
                                                         : swin::make_swin_block(ctx, c_, shape));
        if (b + 1 == c_.depths[size_t(s)] && s + 1 < c_.stages())
          step.merge = &add_module("stages." + std::to_string(s) + ".merge",
                                   std::make_unique<swin::PatchMerging>(ctx, shape.dim, c_.eps,
                                                                        c_.v2, height, width));
        steps_.push_back(step);
      }
    }
    if (part.is_last()) {
      final_norm_ = &add_module(
          "final_norm", std::make_unique<Norm>(ctx, ops::NormKind::layer, c_.features(), c_.eps));
      if (head == Head::classifier) {
        LIBAI_CHECK_KIND(Unsupported, c_.labels > 0, hf.path(),
                         ": num_labels = 0 is not supported");
        classifier_ =
            &add_module("classifier", std::make_unique<Linear>(ctx, c_.features(), c_.labels));
      }
    }
    build_weight_map();
  }

  // The whole model, or one part (Note [Swin parts]):
  //   first part in:  pixel_values [batch, channels, height, width]
  //   later parts in: hidden_states [batch, patches, width] of the part's first stage
  //   out:            hidden_states (parts before the last), or last_hidden_state,
  //                   pooler_output and, for the classifier, logits (the last); the whole
  //                   model adds hidden_states.0 (the embedded patches) and hidden_states.<s + 1>
  //                   (after stage s and its merging), as transformers' hidden_states
  TensorMap forward(const TensorMap& inputs) override {
    Tensor h;
    if (part_.is_first()) {
      Tensor pixels = pixel_values(require_input(inputs, "pixel_values", "swin"));
      h = embed_dropout_->forward(embed_norm_->forward(patches_->forward(pixels)));
    } else {
      h = require_input(inputs, "hidden_states", "swin");
      const int64_t stage = steps_.front().stage;  // a part holds at least one block
      const auto [height, width] = c_.resolution(stage);
      LIBAI_CHECK(h.dim() == 3 && h.size(1) == height * width && h.size(2) == c_.dim(stage),
                  "swin ", to_string(part_), ": hidden_states should be [batch, ", height * width,
                  ", ", c_.dim(stage), "], got ", shape_str(h.shape()));
    }
    const bool whole = part_.is_whole();
    TensorMap out;
    if (whole) out["hidden_states.0"] = h;
    for (const Step& step : steps_) {
      h = step.block->forward(h);
      if (step.merge) h = step.merge->forward(h);
      if (whole && (step.merge || &step == &steps_.back()))
        out["hidden_states." + std::to_string(step.stage + 1)] = h;
    }
    if (!part_.is_last()) return {{"hidden_states", h}};
    h = final_norm_->forward(h);
    out["last_hidden_state"] = h;
    Tensor pooled = ops::mean(h, {1});  // [batch, features]
    out["pooler_output"] = pooled;
    if (classifier_) out["logits"] = classifier_->forward(pooled);
    return out;
  }

  Task task() const override {
    return head_ == Head::classifier ? Task::image_classification : Task::encoder;
  }
  const WeightMap& weight_map() const override { return map_; }

 private:
  static std::string block_name(int64_t stage, int64_t block) {
    return "stages." + std::to_string(stage) + ".blocks." + std::to_string(block);
  }

  Tensor pixel_values(const Tensor& pixels) const {
    LIBAI_CHECK(pixels.dim() == 4 && pixels.size(1) == c_.channels,
                "swin: pixel_values should be [batch, ", c_.channels, ", height, width], got ",
                shape_str(pixels.shape()));
    LIBAI_CHECK(pixels.size(2) == c_.image_height && pixels.size(3) == c_.image_width,
                "swin: pixel_values of ", pixels.size(2), "x", pixels.size(3),
                " do not match the model's image_size ", c_.image_height, "x", c_.image_width,
                ": resize the image to ", c_.image_height, "x", c_.image_width);
    const Tensor& like = *patches_->find_parameter("weight");  // the first part has them
    return to_dtype(to_device(pixels, like.device()), like.dtype());
  }

  // One block of the part, and the patch merging after it when it ends its stage.
  struct Step {
    int64_t stage = 0;
    swin::WindowBlock* block = nullptr;
    swin::PatchMerging* merge = nullptr;
  };

  void build_weight_map() {
    map_.source_prefixes = {"", c_.v2 ? "swinv2." : "swin."};
    auto both = [&](const std::string& ours, const std::string& hf) {
      map_.add(ours + ".weight", hf + ".weight");
      map_.add(ours + ".bias", hf + ".bias");
    };
    both("patches", "embeddings.patch_embeddings.projection");
    both("embed_norm", "embeddings.norm");
    for (int64_t s = 0; s < c_.stages(); ++s) {
      const std::string stage = "encoder.layers." + std::to_string(s) + ".";
      for (int64_t b = 0; b < c_.depths[size_t(s)]; ++b) {
        const std::string o = block_name(s, b) + ".", h = stage + "blocks." + std::to_string(b) + ".";
        both(o + "norm1", h + "layernorm_before");
        const std::vector<std::string> parts =
            c_.qkv_bias ? std::vector<std::string>{"weight", "bias"} : std::vector<std::string>{"weight"};
        const std::string self = h + "attention.self.";
        if (c_.v2) {
          map_.add(o + "logit_scale", self + "logit_scale");
          both(o + "cpb.0", self + "continuous_position_bias_mlp.0");
          map_.add(o + "cpb.2.weight", self + "continuous_position_bias_mlp.2.weight");
          for (const std::string& part : parts) {
            map_.add(o + "q." + part, self + "query." + part);
            map_.add(o + "v." + part, self + "value." + part);
          }
          map_.add(o + "k.weight", self + "key.weight");
          both(o + "out", h + "attention.output.dense");
        } else {
          map_.add(o + "relative_position_bias_table", self + "relative_position_bias_table");
          for (const std::string& part : parts)
            map_.add_heads(o + "attention.qkv." + part,
                           {self + "query." + part, self + "key." + part, self + "value." + part},
                           3, c_.heads[size_t(s)]);
          both(o + "attention.out", h + "attention.output.dense");
        }
        both(o + "norm2", h + "layernorm_after");
        both(o + "mlp.up", h + "intermediate.dense");
        both(o + "mlp.down", h + "output.dense");
      }
      if (s + 1 < c_.stages()) {
        const std::string o = "stages." + std::to_string(s) + ".merge.";
        both(o + "norm", stage + "downsample.norm");
        map_.add(o + "reduction.weight", stage + "downsample.reduction.weight");
      }
    }
    both("final_norm", "layernorm");
    if (classifier_) both("classifier", "classifier");
    map_.ignore("relative_position_index");  // buffers older checkpoints saved
    map_.ignore("relative_coords_table");
    map_.ignore("embeddings.mask_token");     // SwinForMaskedImageModeling's
  }

  SwinConfig c_;
  Head head_;
  PatchEmbedding* patches_ = nullptr;
  Norm* embed_norm_ = nullptr;
  Dropout* embed_dropout_ = nullptr;
  std::vector<Step> steps_;  // the part's blocks, in order
  Norm* final_norm_ = nullptr;
  Linear* classifier_ = nullptr;
  WeightMap map_;
};

template <bool classifier>
std::unique_ptr<Model> make(const HfConfig& config, const LayerContext& ctx,
                            const std::optional<StageSpec>& part) {
  return make_swin_model(config, ctx, classifier, part);
}

int num_layers(const HfConfig& config) { return int(SwinConfig(config).blocks()); }

}  // namespace

std::unique_ptr<Model> make_swin_model(const HfConfig& config, const LayerContext& ctx,
                                       bool classifier, const std::optional<StageSpec>& part) {
  const int blocks = int(SwinConfig(config).blocks());
  if (part) check_part(config, *part, blocks);
  return std::make_unique<Swin>(config, ctx, classifier ? Head::classifier : Head::encoder,
                                part.value_or(StageSpec{0, blocks, blocks}));
}

const Family& swin_family() {
  static const Family family{
      .model_type = "swin",
      .heads = {{"", make<false>},
                {"SwinModel", make<false>},
                {"SwinForImageClassification", make<true>}},
      .num_layers = num_layers,
  };
  return family;
}

const Family& swinv2_family() {
  static const Family family{
      .model_type = "swinv2",
      .heads = {{"", make<false>},
                {"Swinv2Model", make<false>},
                {"Swinv2ForImageClassification", make<true>}},
      .num_layers = num_layers,
  };
  return family;
}

}  // namespace libai::models
