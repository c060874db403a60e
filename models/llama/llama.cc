#include "models/llama/llama.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "models/decoder_lm.h"
#include "ops/ops.h"

namespace libai::models {

// ---------------------------------------------------------------------------------------------
// Rotary embeddings

RopeConfig RopeConfig::from(const HfConfig& c, int64_t head_dim) {
  // transformers 5 writes rope_parameters (rope_theta inside); earlier versions, and most Hub
  // checkpoints, rope_theta beside a rope_scaling that is null for the default rotation.
  const auto& json = c.json();
  nlohmann::json params = nlohmann::json::object();
  std::string where = c.path() + ": rope_scaling";
  if (json.contains("rope_parameters") && !json["rope_parameters"].is_null()) {
    params = json["rope_parameters"];
    where = c.path() + ": rope_parameters";
  } else if (json.contains("rope_scaling") && !json["rope_scaling"].is_null()) {
    params = json["rope_scaling"];
  }
  LIBAI_CHECK_KIND(CorruptInput, params.is_object(), where, " should be an object");
  const HfConfig p = HfConfig::from_json(params, where);
  RopeConfig r;
  r.theta = p.get_double("rope_theta", c.get_double("rope_theta", 10000.0));
  const std::string type = p.get_string("rope_type", p.get_string("type", "default"));
  LIBAI_CHECK_KIND(Unsupported, p.get_double("partial_rotary_factor", 1.0) == 1.0, where,
                   ": partial_rotary_factor is not supported");
  r.dim = head_dim;
  LIBAI_CHECK_KIND(CorruptInput, r.dim > 0 && r.dim % 2 == 0, c.path(), ": head_dim ", r.dim,
                   " should be even for rotary embeddings");
  if (type == "default") {
    r.type = Type::default_;
  } else if (type == "linear") {
    r.type = Type::linear;
    r.factor = p.get_double("factor", 0.0);
  } else if (type == "dynamic") {
    r.type = Type::dynamic;
    r.factor = p.get_double("factor", 0.0);
    r.max_positions = c.get_int("max_position_embeddings", 2048);
  } else if (type == "llama3") {
    r.type = Type::llama3;
    r.factor = p.get_double("factor", 0.0);
    r.low_freq_factor = p.get_double("low_freq_factor", 1.0);
    r.high_freq_factor = p.get_double("high_freq_factor", 4.0);
    r.original_max_positions = p.require_int("original_max_position_embeddings");
    LIBAI_CHECK_KIND(CorruptInput, r.high_freq_factor > r.low_freq_factor, where,
                     ": high_freq_factor should exceed low_freq_factor");
  } else {
    throw Unsupported(str_cat(where, ": rope type \"", type,
                        "\" is not supported (supported: default, linear, dynamic, llama3)"));
  }
  LIBAI_CHECK_KIND(CorruptInput, r.type == Type::default_ || r.factor >= 1.0, where,
                   ": factor should be at least 1, got ", r.factor);
  return r;
}

// Hugging Face computes these in float32 (modeling_rope_utils.py); so do we, so that the
// angles agree to the last bit or two.
std::vector<float> RopeConfig::inverse_frequencies(int64_t seq_len) const {
  float base = float(theta);
  if (type == Type::dynamic && seq_len > max_positions)  // NTK-aware: the base grows
    base =
        base * std::pow(float(factor) * float(seq_len) / float(max_positions) - float(factor - 1),
                        float(dim) / float(dim - 2));
  std::vector<float> inv(size_t(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i)
    inv[size_t(i)] = 1.0f / std::pow(base, float(2 * i) / float(dim));
  if (type == Type::linear)
    for (float& f : inv) f /= float(factor);
  if (type == Type::llama3) {
    // Wavelengths beyond the original context are stretched by `factor`, those shorter than
    // original / high_freq_factor kept, and the ones between interpolated.
    const double low_wavelen = double(original_max_positions) / low_freq_factor;
    const double high_wavelen = double(original_max_positions) / high_freq_factor;
    for (float& f : inv) {
      const float wavelen = float(2 * std::numbers::pi) / f;
      if (wavelen > low_wavelen) {
        f = f / float(factor);
      } else if (!(wavelen < high_wavelen)) {
        const float smooth = (float(original_max_positions) / wavelen - float(low_freq_factor)) /
                             float(high_freq_factor - low_freq_factor);
        f = (1 - smooth) * f / float(factor) + smooth * f;
      }
    }
  }
  return inv;
}

std::pair<Tensor, Tensor> RopeConfig::cos_sin(const Tensor& positions) const {
  LIBAI_CHECK(positions.dim() == 2, "rotary embeddings: position_ids should be [batch, seq], got ",
              shape_str(positions.shape()));
  const auto pos = positions.to_vector<int64_t>();
  int64_t longest = 0;
  for (int64_t p : pos) longest = std::max(longest, p + 1);
  const auto inv = inverse_frequencies(longest);
  const int64_t batch = positions.size(0), n = positions.size(1), half = dim / 2;
  std::vector<float> c(size_t(batch * n * dim)), s(c.size());
  for (int64_t t = 0; t < batch * n; ++t)
    for (int64_t j = 0; j < dim; ++j) {
      const float angle = inv[size_t(j % half)] * float(pos[size_t(t)]);  // f32, as HF
      c[size_t(t * dim + j)] = float(std::cos(double(angle)));
      s[size_t(t * dim + j)] = float(std::sin(double(angle)));
    }
  return {Tensor::from_vector(c, {batch, 1, n, dim}), Tensor::from_vector(s, {batch, 1, n, dim})};
}

// ---------------------------------------------------------------------------------------------
// Config

LlamaConfig::LlamaConfig(const HfConfig& c) {
  model_type = c.model_type();
  vocab = c.require_int("vocab_size");
  hidden = c.get_int("hidden_size", 4096);
  layers = c.get_int("num_hidden_layers", 32);
  heads = c.get_int("num_attention_heads", 32);
  kv_heads = c.get_int("num_key_value_heads", heads);
  LIBAI_CHECK_KIND(CorruptInput, hidden > 0 && heads > 0 && kv_heads > 0 && layers >= 0, c.path(),
                   ": hidden_size, num_attention_heads and num_key_value_heads must be positive");
  LIBAI_CHECK_KIND(CorruptInput, heads % kv_heads == 0, c.path(), ": num_attention_heads ", heads,
                   " is not a multiple of num_key_value_heads ", kv_heads);
  if (!c.has("head_dim"))
    LIBAI_CHECK_KIND(CorruptInput, hidden % heads == 0, c.path(), ": hidden_size ", hidden,
                     " is not divisible by num_attention_heads ", heads, " (and no head_dim)");
  head_dim = c.get_int("head_dim", hidden / heads);
  const bool qwen2 = model_type == "qwen2", mistral = model_type == "mistral";
  inner = c.get_int("intermediate_size", qwen2 ? 22016 : mistral ? 14336 : 11008);
  max_positions = c.get_int("max_position_embeddings", model_type == "llama" ? 2048 : 32768);
  activation = parse_activation(c.get_string("hidden_act", "silu"), c.path() + ": hidden_act");
  eps = c.get_double("rms_norm_eps", 1e-6);
  if (qwen2) {  // Qwen2Attention: biases on q, k and v only
    qkv_bias = true;
  } else if (!mistral) {
    qkv_bias = out_bias = c.get_bool("attention_bias", false);
    mlp_bias = c.get_bool("mlp_bias", false);
  }
  tied = c.get_bool("tie_word_embeddings", false);
  const auto eos_ids = c.get_int_list("eos_token_id");
  eos = eos_ids.empty() ? -1 : eos_ids[0];
  pad = c.get_int("pad_token_id", -1);
  attention_dropout = c.get_double("attention_dropout", 0.0);
  if (qwen2) {
    LIBAI_CHECK_KIND(Unsupported, !c.get_bool("use_sliding_window", false), c.path(),
                     ": qwen2 with use_sliding_window is not supported");
  } else if (mistral) {
    sliding_window = c.get_int("sliding_window", 0);
  }
  rope = RopeConfig::from(c, head_dim);
}

TransformerLayerConfig LlamaConfig::layer() const {
  TransformerLayerConfig layer;
  layer.attention = {.hidden = hidden,
                     .heads = heads,
                     .kv_heads = kv_heads,
                     .head_dim = head_dim,
                     .bias = qkv_bias,
                     .out_bias = out_bias,
                     .dropout = attention_dropout};
  layer.mlp = {.hidden = hidden,
               .intermediate = inner,
               .activation = activation,
               .gated = true,
               .bias = mlp_bias};
  layer.pre_norm = true;
  layer.norm = ops::NormKind::rms;
  layer.norm_eps = eps;
  layer.norm_bias = false;
  return layer;
}

WeightMap llama_weight_map(const LlamaConfig& c) {
  WeightMap map;
  map.add("embed.weight", "model.embed_tokens.weight");
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string ours = "layers." + std::to_string(i) + ".",
                      hf = "model.layers." + std::to_string(i) + ".";
    const std::string attn = hf + "self_attn.", mlp = hf + "mlp.";
    map.add(ours + "attention_norm.weight", hf + "input_layernorm.weight");
    for (const std::string kind : {"weight", "bias"}) {
      if (kind == "bias" && !c.qkv_bias) continue;
      map.add_grouped_qkv(
          ours + "attention.qkv." + kind,
          {attn + "q_proj." + kind, attn + "k_proj." + kind, attn + "v_proj." + kind}, c.heads,
          c.kv_heads);
    }
    map.add(ours + "attention.out.weight", attn + "o_proj.weight");
    if (c.out_bias) map.add(ours + "attention.out.bias", attn + "o_proj.bias");
    map.add(ours + "mlp_norm.weight", hf + "post_attention_layernorm.weight");
    for (const std::string proj : {"gate", "up", "down"}) {
      map.add(ours + "mlp." + proj + ".weight", mlp + proj + "_proj.weight");
      if (c.mlp_bias) map.add(ours + "mlp." + proj + ".bias", mlp + proj + "_proj.bias");
    }
  }
  map.add("final_norm.weight", "model.norm.weight");
  if (c.tied)
    map.ignore("lm_head.weight");  // saved by some exporters although tied to embed_tokens
  else
    map.add("lm_head.weight", "lm_head.weight");
  map.ignore("rotary_emb.inv_freq");  // a buffer older checkpoints saved
  return map;
}

// ---------------------------------------------------------------------------------------------
// The model

namespace {

// The whole model, or one part of it (Note [Model parts], Note [One decoder-only model]):
// token embeddings, pre-norm layers with rotary embeddings and grouped key/value heads, RMS
// norms, a tied or separate head.
class Llama : public DecoderLm {
 public:
  Llama(const HfConfig& hf, const LayerContext& ctx, const StageSpec& part)
      : DecoderLm(hf, part, shape_of(LlamaConfig(hf))), c_(hf), map_(llama_weight_map(c_)) {
    // Note [Fused q/k/v by head]: whole key/value groups per rank, or, with more ranks than
    // key/value heads, each head copied on tp / kv_heads ranks that split its query heads.
    const int tp = ctx.tp_size();
    LIBAI_CHECK_KIND(Unsupported,
                     c_.heads % tp == 0 && (c_.kv_heads % tp == 0 || tp % c_.kv_heads == 0),
                     hf.path(), ": ", c_.model_type, " with tensor_parallel_size ", tp,
                     ": the size must divide num_attention_heads (", c_.heads,
                     ") and divide or be a multiple of num_key_value_heads (", c_.kv_heads, ")");
    if (part.is_first() || (part.is_last() && c_.tied))
      embed_ = &add_module(
          "embed", std::make_unique<Embedding>(ctx, c_.vocab, c_.hidden, EmbeddingParallel::vocab));
    for (int i = part.first_layer; i < part.last_layer; ++i)
      layers_.push_back(&add_module("layers." + std::to_string(i),
                                    std::make_unique<TransformerLayer>(ctx, c_.layer())));
    if (part.is_last()) {
      final_norm_ = &add_module("final_norm", std::make_unique<Norm>(ctx, ops::NormKind::rms, c_.hidden,
                                                               c_.eps, /*bias=*/false));
      if (!c_.tied)
        lm_head_ = &add_module("lm_head", std::make_unique<Embedding>(ctx, c_.vocab, c_.hidden,
                                                                      EmbeddingParallel::vocab));
      Embedding* head = c_.tied ? embed_ : lm_head_;
      head->serve_as_output(/*lookups=*/c_.tied);
      head_ = head;
    }
  }

  const WeightMap& weight_map() const override { return map_; }

 private:
  static Shape shape_of(const LlamaConfig& c) {
    return {.name = c.model_type,
            .vocab = c.vocab,
            .hidden = c.hidden,
            .pad_id = c.pad >= 0 ? c.pad : c.eos >= 0 ? c.eos : 0};
  }

  Tensor embed(const Tensor& ids, const Tensor&) override { return embed_->forward(ids); }

  // Every part rotates queries and keys by position_ids.
  void prepare_layers(LayerInputs& in, const Tensor& h, const Tensor& positions) override {
    auto [cos, sin] = c_.rope.cos_sin(positions);
    in.self.rotary_cos = like(cos, h);
    in.self.rotary_sin = like(sin, h);
  }

  void check_length(int64_t tokens) const override {
    LIBAI_CHECK_KIND(Unsupported, c_.sliding_window <= 0 || tokens <= c_.sliding_window,
                     c_.model_type, ": sliding-window attention is not supported: a sequence of ",
                     tokens, " tokens exceeds sliding_window ", c_.sliding_window);
  }

  // t (f32, CPU) in x's dtype and device.
  static Tensor like(const Tensor& t, const Tensor& x) {
    if (t.dtype() == x.dtype() && t.device() == x.device()) return t;
    Tensor out = Tensor::empty(t.shape(), x.dtype(), x.device());
    out.copy_from(t);
    return out;
  }

  LlamaConfig c_;
  Embedding* embed_ = nullptr;    // first part, and the last when tied
  Embedding* lm_head_ = nullptr;  // last part, untied
  WeightMap map_;
};

}  // namespace

std::unique_ptr<Model> make_llama_lm(const HfConfig& config, const LayerContext& ctx,
                                     const std::optional<StageSpec>& part) {
  const int layers = int(LlamaConfig(config).layers);
  if (part) check_part(config, *part, layers);
  return std::make_unique<Llama>(config, ctx, part.value_or(StageSpec{0, layers, layers}));
}

}  // namespace libai::models
