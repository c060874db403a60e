#include "models/gpt2/gpt2.h"

#include "models/decoder_lm.h"
#include "models/layers/transformer_layer.h"
#include "ops/ops.h"

namespace libai::models {

Gpt2Config::Gpt2Config(const HfConfig& c) {
  vocab = c.require_int("vocab_size");
  positions = c.get_int("n_positions", 1024);
  hidden = c.get_int("n_embd", 768);
  layers = c.get_int("n_layer", 12);
  heads = c.get_int("n_head", 12);
  inner = c.get_int("n_inner", 4 * hidden);
  activation = parse_activation(c.get_string("activation_function", "gelu_new"),
                                c.path() + ": activation_function");
  eps = c.get_double("layer_norm_epsilon", 1e-5);
  auto eos_ids = c.get_int_list("eos_token_id");
  eos = eos_ids.empty() ? -1 : eos_ids[0];
  embd_pdrop = c.get_double("embd_pdrop", 0.1);
  attn_pdrop = c.get_double("attn_pdrop", 0.1);
  resid_pdrop = c.get_double("resid_pdrop", 0.1);
  LIBAI_CHECK_KIND(Unsupported, !c.get_bool("scale_attn_by_inverse_layer_idx", false), c.path(),
                   ": scale_attn_by_inverse_layer_idx is not supported");
  LIBAI_CHECK_KIND(Unsupported, c.get_bool("scale_attn_weights", true), c.path(),
                   ": scale_attn_weights = false is not supported");
  LIBAI_CHECK_KIND(CorruptInput, hidden % heads == 0, c.path(), ": n_embd ", hidden,
                   " is not divisible by n_head ", heads);
}

TransformerLayerConfig Gpt2Config::layer() const {
  TransformerLayerConfig layer;
  layer.attention = {.hidden = hidden, .heads = heads, .dropout = attn_pdrop};
  layer.mlp = {.hidden = hidden, .intermediate = inner, .activation = activation};
  layer.pre_norm = true;
  layer.norm_eps = eps;
  layer.dropout = resid_pdrop;
  return layer;
}

WeightMap gpt2_weight_map(const Gpt2Config& c) {
  WeightMap map;
  map.source_prefixes = {"transformer.", ""};
  map.add("embed.weight", "wte.weight");
  map.add("positions.weight", "wpe.weight");
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string ours = "layers." + std::to_string(i) + ".",
                      hf = "h." + std::to_string(i) + ".";
    map.add(ours + "attention_norm.weight", hf + "ln_1.weight");
    map.add(ours + "attention_norm.bias", hf + "ln_1.bias");
    map.add_heads(ours + "attention.qkv.weight", {hf + "attn.c_attn.weight"}, 3, c.heads, true);
    map.add_heads(ours + "attention.qkv.bias", {hf + "attn.c_attn.bias"}, 3, c.heads);
    map.add_transposed(ours + "attention.out.weight", hf + "attn.c_proj.weight");
    map.add(ours + "attention.out.bias", hf + "attn.c_proj.bias");
    map.add(ours + "mlp_norm.weight", hf + "ln_2.weight");
    map.add(ours + "mlp_norm.bias", hf + "ln_2.bias");
    map.add_transposed(ours + "mlp.up.weight", hf + "mlp.c_fc.weight");
    map.add(ours + "mlp.up.bias", hf + "mlp.c_fc.bias");
    map.add_transposed(ours + "mlp.down.weight", hf + "mlp.c_proj.weight");
    map.add(ours + "mlp.down.bias", hf + "mlp.c_proj.bias");
  }
  map.add("final_norm.weight", "ln_f.weight");
  map.add("final_norm.bias", "ln_f.bias");
  map.ignore("attn.bias");
  map.ignore("attn.masked_bias");
  map.ignore("lm_head.weight");  // tied to wte
  return map;
}

namespace {

// The whole model, or one part of it (Note [Model parts], Note [One decoder-only model]):
// token and learned position embeddings, pre-norm layers, a head tied to the token embeddings.
class Gpt2 : public DecoderLm {
 public:
  Gpt2(const HfConfig& hf, const LayerContext& ctx, const StageSpec& part)
      : DecoderLm(hf, part, shape_of(Gpt2Config(hf))), c_(hf), map_(gpt2_weight_map(c_)) {
    if (part.is_first() || part.is_last())  // the head is tied to the token embedding
      wte_ = &add_module(
          "embed", std::make_unique<Embedding>(ctx, c_.vocab, c_.hidden, EmbeddingParallel::vocab));
    if (part.is_first()) {
      wpe_ = &add_module("positions", std::make_unique<Embedding>(ctx, c_.positions, c_.hidden));
      embed_dropout_ = &add_module("embed_dropout", std::make_unique<Dropout>(c_.embd_pdrop));
    }
    for (int i = part.first_layer; i < part.last_layer; ++i)
      layers_.push_back(&add_module("layers." + std::to_string(i),
                                    std::make_unique<TransformerLayer>(ctx, c_.layer())));
    if (part.is_last()) {
      final_norm_ = &add_module(
          "final_norm", std::make_unique<Norm>(ctx, ops::NormKind::layer, c_.hidden, c_.eps));
      wte_->serve_as_output();
      head_ = wte_;
    }
  }

  const WeightMap& weight_map() const override { return map_; }

 private:
  static Shape shape_of(const Gpt2Config& c) {
    return {.name = "gpt2", .vocab = c.vocab, .hidden = c.hidden, .pad_id = c.eos < 0 ? 0 : c.eos};
  }

  Tensor embed(const Tensor& ids, const Tensor& positions) override {
    return embed_dropout_->forward(wte_->forward(ids) + wpe_->forward(positions));
  }

  // The limit is the position table's, which only the first part has.
  void check_length(int64_t tokens) const override {
    LIBAI_CHECK(!part_.is_first() || tokens <= c_.positions, "gpt2: sequence of ", tokens,
                " tokens exceeds n_positions ", c_.positions);
  }

  Gpt2Config c_;
  Embedding* wte_ = nullptr;          // first and last parts
  Embedding* wpe_ = nullptr;          // first part
  Dropout* embed_dropout_ = nullptr;  // first part
  WeightMap map_;
};

}  // namespace

std::unique_ptr<Model> make_gpt2_lm(const HfConfig& config, const LayerContext& ctx,
                                    const std::optional<StageSpec>& part) {
  const int layers = int(Gpt2Config(config).layers);
  if (part) check_part(config, *part, layers);
  return std::make_unique<Gpt2>(config, ctx, part.value_or(StageSpec{0, layers, layers}));
}

}  // namespace libai::models
