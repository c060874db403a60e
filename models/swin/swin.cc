#include "models/swin/swin.h"

#include <numeric>
#include <utility>

#include "models/layers/attention.h"
#include "models/layers/mlp.h"
#include "models/layers/patch_embedding.h"
#include "models/training_mode.h"
#include "ops/ops.h"
#include "runtime/device_copy.h"

namespace libai::models {

namespace {

// image_size is an int or a [height, width] pair.
std::pair<int64_t, int64_t> size_pair(const HfConfig& c, const std::string& key, int64_t fallback) {
  if (!c.has(key)) return {fallback, fallback};
  const auto& v = c.json()[key];
  if (v.is_array()) {
    LIBAI_CHECK_KIND(
        CorruptInput, v.size() == 2 && v[0].is_number_integer() && v[1].is_number_integer(),
        c.path(), ": \"", key, "\" should be an integer or [height, width], got ", v.dump());
    return {v[0].get<int64_t>(), v[1].get<int64_t>()};
  }
  const int64_t n = c.get_int(key, fallback);
  return {n, n};
}

}  // namespace

SwinConfig::SwinConfig(const HfConfig& c) {
  std::tie(image_height, image_width) = size_pair(c, "image_size", 224);
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
  for (int64_t s = 0; s < stages(); ++s) {
    LIBAI_CHECK_KIND(CorruptInput, depths[size_t(s)] > 0 && heads[size_t(s)] > 0 &&
                                       dim(s) % heads[size_t(s)] == 0,
                     c.path(), ": stage ", s, " has width ", dim(s), ", depth ", depths[size_t(s)],
                     " and ", heads[size_t(s)], " heads (the heads must divide the width)");
    const auto [h, w] = resolution(s);
    LIBAI_CHECK_KIND(Unsupported, std::min(h, w) >= window, c.path(), ": stage ", s,
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

namespace {

enum class Head { encoder, classifier };

// x [batch, height, width, channels] rolled by `shift` along height and width: out[i] =
// x[(i + shift) mod size] (torch.roll by -shift).
Tensor roll_left(const Tensor& x, int64_t shift) {
  Tensor out = x;
  for (int64_t dim : {1, 2}) {
    const int64_t size = out.size(dim), s = ((shift % size) + size) % size;
    if (s == 0) continue;
    out = ops::cat({ops::narrow(out, dim, s, size - s), ops::narrow(out, dim, 0, s)}, dim);
  }
  return out;
}

// x [batch, height, width, channels] with zero rows and columns appended up to height x width.
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

// One Swin block (transformers' SwinLayer): window attention, shifted when `shift` > 0, with the
// relative position bias, then the MLP; pre-norm residuals.
class SwinBlock : public Module {
 public:
  SwinBlock(const LayerContext& ctx, const SwinConfig& c, int64_t dim, int64_t heads,
            int64_t window, int64_t shift)
      : dim_(dim), heads_(heads), window_(window), shift_(shift), drop_path_(c.drop_path),
        table_(add_parameter("relative_position_bias_table",
                             {(2 * window - 1) * (2 * window - 1), heads}, ctx)) {
    norm1_ = &add_module("norm1", std::make_unique<Norm>(ctx, ops::NormKind::layer, dim, c.eps));
    AttentionConfig attention{.hidden = dim, .heads = heads, .bias = c.qkv_bias,
                              .out_bias = true, .dropout = c.attention_dropout};
    attention_ = &add_module("attention", std::make_unique<Attention>(ctx, attention));
    dropout_ = &add_module("dropout", std::make_unique<Dropout>(c.hidden_dropout));
    norm2_ = &add_module("norm2", std::make_unique<Norm>(ctx, ops::NormKind::layer, dim, c.eps));
    const MlpConfig mlp{.hidden = dim,
                        .intermediate = int64_t(double(dim) * c.mlp_ratio),
                        .activation = c.activation};
    mlp_ = &add_module("mlp", std::make_unique<Mlp>(ctx, mlp));
    // The table row of each (query, key) pair of a window: their offsets along height and
    // width, each shifted to start at 0, as one index into the (2w - 1) x (2w - 1) offsets.
    const int64_t n = window * window;
    std::vector<int64_t> index(size_t(n * n));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j)
        index[size_t(i * n + j)] = (i / window - j / window + window - 1) * (2 * window - 1) +
                                   (i % window - j % window + window - 1);
    index_ = Tensor::from_vector(index, {n * n});
  }

  // h [batch, height * width, dim] -> the same shape.
  Tensor forward(const Tensor& h, int64_t height, int64_t width) const {
    LIBAI_CHECK_KIND(Unsupported, drop_path_ == 0.0 || !training_mode().training,
                     "swin: training with drop_path_rate = ", drop_path_,
                     " is not supported yet (set drop_path_rate to 0 in config.json)");
    const int64_t batch = h.size(0), w = window_, n = w * w;
    const int64_t padded_h = (height + w - 1) / w * w, padded_w = (width + w - 1) / w * w;
    const int64_t rows = padded_h / w, cols = padded_w / w;
    Tensor x = ops::reshape(norm1_->forward(h), {batch, height, width, dim_});
    x = roll_left(pad_to(x, padded_h, padded_w), shift_);
    // [batch, rows, w, cols, w, dim] -> [batch * windows, w * w, dim]
    x = ops::reshape(ops::permute(ops::reshape(x, {batch, rows, w, cols, w, dim_}),
                                  {0, 1, 3, 2, 4, 5}),
                     {batch * rows * cols, n, dim_});
    x = attention_->forward(x, {.bias = attention_bias(batch, padded_h, padded_w, h)});
    x = ops::reshape(ops::permute(ops::reshape(x, {batch, rows, cols, w, w, dim_}),
                                  {0, 1, 3, 2, 4, 5}),
                     {batch, padded_h, padded_w, dim_});
    x = roll_left(x, -shift_);
    if (padded_h != height || padded_w != width)
      x = ops::narrow(ops::narrow(x, 1, 0, height), 2, 0, width);
    Tensor out = h + dropout_->forward(ops::reshape(x, {batch, height * width, dim_}));
    return mlp_->forward(norm2_->forward(out), out);
  }

 private:
  // The relative position bias [1, heads, n, n], plus with shifted windows the mask that keeps
  // each window's regions apart (-100 between tokens that were not neighbours before the
  // roll, as transformers adds): [batch * windows, heads, n, n].
  Tensor attention_bias(int64_t batch, int64_t height, int64_t width, const Tensor& like) const {
    const int64_t w = window_, n = w * w;
    Tensor table = ops::embedding(table_, to_device(index_, table_.device()));  // [n * n, heads]
    Tensor bias = ops::unsqueeze(ops::reshape(ops::transpose(table, 0, 1), {heads_, n, n}), 0);
    if (shift_ == 0) return bias;
    const int64_t rows = height / w, cols = width / w;
    const auto region = [&](int64_t i, int64_t size) {
      return int64_t(i >= size - w) + int64_t(i >= size - shift_);
    };
    std::vector<float> mask(size_t(rows * cols * n * n));
    for (int64_t wr = 0; wr < rows; ++wr)
      for (int64_t wc = 0; wc < cols; ++wc)
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < n; ++j) {
            const int64_t ri = region(wr * w + i / w, height) * 3 + region(wc * w + i % w, width);
            const int64_t rj = region(wr * w + j / w, height) * 3 + region(wc * w + j % w, width);
            mask[size_t(((wr * cols + wc) * n + i) * n + j)] = ri == rj ? 0.0f : -100.0f;
          }
    Tensor m = to_dtype(to_device(Tensor::from_vector(mask, {rows * cols, 1, n, n}), like.device()),
                        like.dtype());
    return ops::reshape(ops::expand(ops::unsqueeze(bias + m, 0), {batch, rows * cols, heads_, n, n}),
                        {batch * rows * cols, heads_, n, n});
  }

  int64_t dim_, heads_, window_, shift_;
  double drop_path_;
  Tensor& table_;  // [(2 window - 1)^2, heads]
  Tensor index_;   // i64 [window^4]: table row per (query, key) of a window
  Norm* norm1_ = nullptr;
  Attention* attention_ = nullptr;
  Dropout* dropout_ = nullptr;
  Norm* norm2_ = nullptr;
  Mlp* mlp_ = nullptr;
};

// transformers' SwinPatchMerging: 2 x 2 neighbourhoods concatenated, normed and projected
// from 4 dim to 2 dim (no bias).
class PatchMerging : public Module {
 public:
  PatchMerging(const LayerContext& ctx, int64_t dim, double eps) : dim_(dim) {
    norm_ = &add_module("norm", std::make_unique<Norm>(ctx, ops::NormKind::layer, 4 * dim, eps));
    reduction_ = &add_module("reduction", std::make_unique<Linear>(ctx, 4 * dim, 2 * dim, false));
  }

  // h [batch, height * width, dim] -> [batch, ceil(height / 2) * ceil(width / 2), 2 dim]
  Tensor forward(const Tensor& h, int64_t height, int64_t width) const {
    const int64_t batch = h.size(0);
    Tensor x = pad_to(ops::reshape(h, {batch, height, width, dim_}), height + height % 2,
                      width + width % 2);
    const auto part = [&](int64_t row, int64_t col) {
      return ops::slice(ops::slice(x, 1, row, x.size(1), 2), 2, col, x.size(2), 2);
    };
    Tensor merged = ops::cat({part(0, 0), part(1, 0), part(0, 1), part(1, 1)}, 3);
    merged = ops::reshape(merged, {batch, merged.size(1) * merged.size(2), 4 * dim_});
    return reduction_->forward(norm_->forward(merged));
  }

 private:
  int64_t dim_;
  Norm* norm_ = nullptr;
  Linear* reduction_ = nullptr;
};

// Note [Swin parts]: a pipeline cuts Swin's blocks, counted over all stages (num_layers =
// sum(depths)). A part holds its blocks and the patch merging of every stage whose last block
// it holds, so a part after a stage's end starts at the next stage's resolution and width; the
// hidden_states between parts are [batch, the stage's patches, its width].
class Swin : public Model {
 public:
  Swin(const HfConfig& hf, const LayerContext& ctx, Head head, const StageSpec& part)
      : Model(hf), c_(hf), head_(head) {
    part_ = part;
    LIBAI_CHECK_KIND(Unsupported, !ctx.tp, hf.path(),
                     ": swin does not support tensor parallelism yet");
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
      const auto [height, width] = c_.resolution(s);
      // Note [Swin windows]: a map no larger than the window is one window, unshifted.
      const bool whole = std::min(height, width) <= c_.window;
      const int64_t window = whole ? std::min(height, width) : c_.window;
      for (int64_t b = 0; b < c_.depths[size_t(s)]; ++b, ++global) {
        if (global < part.first_layer || global >= part.last_layer) continue;
        const int64_t shift = whole || b % 2 == 0 ? 0 : c_.window / 2;
        Step step{.stage = s};
        step.block = &add_module(
            block_name(s, b),
            std::make_unique<SwinBlock>(ctx, c_, c_.dim(s), c_.heads[size_t(s)], window, shift));
        if (b + 1 == c_.depths[size_t(s)] && s + 1 < c_.stages())
          step.merge = &add_module("stages." + std::to_string(s) + ".merge",
                                   std::make_unique<PatchMerging>(ctx, c_.dim(s), c_.eps));
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
      const int64_t stage = steps_.empty() ? c_.stages() - 1 : steps_.front().stage;
      const auto [height, width] = c_.resolution(stage);
      LIBAI_CHECK(h.dim() == 3 && h.size(1) == height * width && h.size(2) == c_.dim(stage),
                  "swin ", to_string(part_), ": hidden_states should be [batch, ", height * width,
                  ", ", c_.dim(stage), "], got ", shape_str(h.shape()));
    }
    const bool whole = part_.is_whole();
    TensorMap out;
    if (whole) out["hidden_states.0"] = h;
    for (const Step& step : steps_) {
      const auto [height, width] = c_.resolution(step.stage);
      h = step.block->forward(h, height, width);
      if (step.merge) h = step.merge->forward(h, height, width);
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
    SwinBlock* block = nullptr;
    PatchMerging* merge = nullptr;
  };

  void build_weight_map() {
    map_.source_prefixes = {"", "swin."};
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
        map_.add(o + "relative_position_bias_table",
                 h + "attention.self.relative_position_bias_table");
        const std::vector<std::string> parts =
            c_.qkv_bias ? std::vector<std::string>{"weight", "bias"} : std::vector<std::string>{"weight"};
        for (const std::string& part : parts)
          map_.add_heads(o + "attention.qkv." + part,
                         {h + "attention.self.query." + part, h + "attention.self.key." + part,
                          h + "attention.self.value." + part},
                         3, c_.heads[size_t(s)]);
        both(o + "attention.out", h + "attention.output.dense");
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
    map_.ignore("relative_position_index");  // a buffer older checkpoints saved
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

}  // namespace libai::models
