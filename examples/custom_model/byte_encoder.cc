#include "byte_encoder.h"

#include "models/layers/attention.h"
#include "models/layers/linear.h"
#include "models/stages/stage.h"
#include "ops/ops.h"
#include "runtime/device_copy.h"
#include "runtime/error.h"

namespace examples {

using namespace libai;
using namespace libai::models;

ByteEncoderConfig::ByteEncoderConfig(const HfConfig& c) {
  vocab = c.require_int("vocab");
  width = c.require_int("width");
  heads = c.require_int("heads");
  blocks = c.require_int("blocks");
  ffn_width = c.require_int("ffn_width");
  max_len = c.require_int("max_len");
  eps = c.get_double("ln_eps", 1e-5);
  const auto& names = c.json().contains("classes") ? c.json().at("classes") : nlohmann::json();
  for (const auto& name : names.is_array() ? names : nlohmann::json::array()) {
    LIBAI_CHECK_KIND(CorruptInput, name.is_string(), c.path(), ": \"classes\" should list label names, got ",
                     name.dump());
    classes.push_back(name.get<std::string>());
  }
  LIBAI_CHECK_KIND(CorruptInput, !classes.empty(), c.path(), ": \"classes\" should list the labels");
  LIBAI_CHECK_KIND(CorruptInput, heads > 0 && width % heads == 0, c.path(), ": width ", width,
                   " is not divisible by heads ", heads);
}

namespace {

// One pre-LN block: the library's attention (q/k/v fused by head, split by head under tensor
// parallelism) and a feed-forward written here from Linear layers, column- then row-parallel
// (Megatron's MLP split: no communication between the two products).
class Block : public Module {
 public:
  Block(const LayerContext& ctx, const ByteEncoderConfig& c) {
    attention_norm_ = &add_module("attention_norm",
                                  std::make_unique<Norm>(ctx, ops::NormKind::layer, c.width, c.eps));
    attention_ = &add_module("attention",
                             std::make_unique<Attention>(ctx, AttentionConfig{.hidden = c.width, .heads = c.heads}));
    ffn_norm_ = &add_module("ffn_norm",
                            std::make_unique<Norm>(ctx, ops::NormKind::layer, c.width, c.eps));
    ffn_in_ = &add_module("ffn_in",
                          std::make_unique<Linear>(ctx, c.width, c.ffn_width, true, Parallel::column));
    ffn_out_ = &add_module("ffn_out",
                           std::make_unique<Linear>(ctx, c.ffn_width, c.width, true, Parallel::row));
  }

  Tensor forward(const Tensor& x, const AttentionInputs& in) const {
    Tensor h = x + attention_->forward(attention_norm_->forward(x), in);
    return h + ffn_out_->forward(ffn_in_->forward(ffn_norm_->forward(h), Activation::gelu, Tensor()));
  }

 private:
  Norm *attention_norm_ = nullptr, *ffn_norm_ = nullptr;
  Attention* attention_ = nullptr;
  Linear *ffn_in_ = nullptr, *ffn_out_ = nullptr;
};

// The whole model or one part of it (Note [Model parts] in models/model.h):
//   first part in:  input_ids [batch, n] i64, optional attention_mask [batch, n] (1 = a token)
//   later parts in: hidden_states [batch, n, width], optional attention_mask
//   out:            hidden_states and attention_mask (parts before the last), or logits
//                   [batch, classes] and last_hidden_state (the last); a whole model adds every
//                   block's input and output as hidden_states.{i}
class ByteEncoder : public Model {
 public:
  ByteEncoder(const HfConfig& hf, const LayerContext& ctx, const StageSpec& part)
      : Model(hf), c_(hf) {
    part_ = part;
    if (part.is_first()) {
      tokens_ = &add_module("tokens",
                            std::make_unique<Embedding>(ctx, c_.vocab, c_.width, EmbeddingParallel::vocab));
      positions_ = &add_parameter("positions", {c_.max_len, c_.width}, ctx);
    }
    for (int i = part.first_layer; i < part.last_layer; ++i)
      blocks_.push_back(&add_module("blocks." + std::to_string(i), std::make_unique<Block>(ctx, c_)));
    if (part.is_last()) {
      final_norm_ = &add_module("final_norm",
                                std::make_unique<Norm>(ctx, ops::NormKind::layer, c_.width, c_.eps));
      classifier_ = &add_module(
          "classifier", std::make_unique<Linear>(ctx, c_.width, int64_t(c_.classes.size())));
    }
    build_weight_map();
  }

  TensorMap forward(const TensorMap& inputs) override {
    const Tensor mask = optional_input(inputs, "attention_mask");
    Tensor h;
    if (part_.is_first()) {
      const Tensor& ids = require_input(inputs, "input_ids", "byte_encoder");
      LIBAI_CHECK(ids.dim() == 2 && ids.size(1) <= c_.max_len, "byte_encoder: input_ids should be "
                  "[batch, n] with n <= max_len ", c_.max_len, ", got ", shape_str(ids.shape()));
      h = tokens_->forward(ids) + ops::narrow(*positions_, 0, 0, ids.size(1));
    } else {
      h = require_input(inputs, "hidden_states", "byte_encoder");
    }
    AttentionInputs in;
    if (mask.defined()) in.key_padding_mask = ops::ne(mask, Tensor::zeros({}, mask.dtype()));
    const bool whole = part_.is_whole();
    TensorMap out;
    if (whole) out["hidden_states.0"] = h;
    for (size_t i = 0; i < blocks_.size(); ++i) {
      h = blocks_[i]->forward(h, in);
      if (whole) out["hidden_states." + std::to_string(i + 1)] = h;
    }
    if (!part_.is_last()) {
      out = {{"hidden_states", h}};
      if (mask.defined()) out["attention_mask"] = mask;
      return out;
    }
    h = final_norm_->forward(h);
    out["last_hidden_state"] = h;
    Tensor pooled;
    if (mask.defined()) {
      const Tensor weights = ops::unsqueeze(to_dtype(mask, h.dtype()), 2);  // [batch, n, 1]
      pooled = ops::sum(h * weights, {1}) / ops::sum(weights, {1});
    } else {
      pooled = ops::mean(h, {1});
    }
    out["logits"] = classifier_->forward(pooled);
    return out;
  }

  Task task() const override { return Task::sequence_classification; }
  const WeightMap& weight_map() const override { return map_; }

 private:
  // The checkpoint's names (the PyTorch module of tools/make_custom_model_fixture.py) onto ours:
  // renames, its part-major [q | k | v] rows reordered by head, and its [in, out] kernels
  // transposed into Linear weights.
  void build_weight_map() {
    map_.add("tokens.weight", "embed.tokens.weight");
    map_.add("positions", "embed.positions");
    auto norm = [&](const std::string& ours, const std::string& theirs) {
      map_.add(ours + ".weight", theirs + ".weight");
      map_.add(ours + ".bias", theirs + ".bias");
    };
    for (int64_t i = 0; i < c_.blocks; ++i) {
      const std::string o = "blocks." + std::to_string(i) + ".",
                        t = "encoder." + std::to_string(i) + ".";
      norm(o + "attention_norm", t + "ln_1");
      map_.add_heads(o + "attention.qkv.weight", {t + "attn.c_qkv.weight"}, 3, c_.heads);
      map_.add_heads(o + "attention.qkv.bias", {t + "attn.c_qkv.bias"}, 3, c_.heads);
      map_.add_transposed(o + "attention.out.weight", t + "attn.proj.kernel");
      map_.add(o + "attention.out.bias", t + "attn.proj.bias");
      norm(o + "ffn_norm", t + "ln_2");
      map_.add_transposed(o + "ffn_in.weight", t + "ffn.fc_in.kernel");
      map_.add(o + "ffn_in.bias", t + "ffn.fc_in.bias");
      map_.add_transposed(o + "ffn_out.weight", t + "ffn.fc_out.kernel");
      map_.add(o + "ffn_out.bias", t + "ffn.fc_out.bias");
    }
    norm("final_norm", "final_ln");
    norm("classifier", "classifier");
  }

  ByteEncoderConfig c_;
  Embedding* tokens_ = nullptr;
  Tensor* positions_ = nullptr;
  std::vector<Block*> blocks_;
  Norm* final_norm_ = nullptr;
  Linear* classifier_ = nullptr;
  WeightMap map_;
};

std::unique_ptr<Model> make(const HfConfig& config, const LayerContext& ctx,
                            const std::optional<StageSpec>& part) {
  const int blocks = int(ByteEncoderConfig(config).blocks);
  if (part) check_part(config, *part, blocks);
  return std::make_unique<ByteEncoder>(config, ctx, part.value_or(StageSpec{0, blocks, blocks}));
}

}  // namespace

const Family& byte_encoder_family() {
  static const Family family{
      .model_type = "byte_encoder",
      .heads = {{"", make}, {"ByteEncoderClassifier", make}},
      .num_layers = [](const HfConfig& c) { return int(ByteEncoderConfig(c).blocks); },
      .make_stage = stages::make_forward_stage,
  };
  return family;
}

void register_byte_encoder() {
  if (find_family("byte_encoder") == nullptr) register_family(byte_encoder_family());
}

}  // namespace examples
