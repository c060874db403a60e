#include "models/gpt2/gpt2.h"

#include "models/causal_lm.h"
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

struct CachesState : DecodeState {
  const Model* owner = nullptr;    // the part whose new_decode_state() made it
  std::vector<LayerCache> caches;  // one per layer of the part
};

// The whole model, or one part of it (Note [Model parts]):
//   first part in:  input_ids, optional attention_mask, position_ids
//   later parts in: hidden_states [batch, seq, hidden], optional attention_mask
//   out:            hidden_states and attention_mask (parts before the last), or
//                   last_hidden_state and logits (the last; hidden_states.{i} when whole)
class Gpt2 : public Model, public generation::GenerativeModel {
 public:
  Gpt2(const HfConfig& hf, const LayerContext& ctx, const StageSpec& part)
      : Model(hf), c_(hf), map_(gpt2_weight_map(c_)) {
    part_ = part;
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
    if (part.is_last())
      ln_f_ = &add_module("final_norm",
                          std::make_unique<Norm>(ctx, ops::NormKind::layer, c_.hidden, c_.eps));
  }

  // The embeddings: ids, positions [batch, seq] -> [batch, seq, hidden]. First part only.
  Tensor embed(const Tensor& ids, const Tensor& positions) {
    return embed_dropout_->forward(wte_->forward(ids) + wpe_->forward(positions));
  }

  // This part's layers (and the final norm on the last part) over h; keep [batch, kv_len] or
  // undefined. `all` collects each layer's input and the final output.
  Tensor run_layers(Tensor h, const Tensor& keep, std::vector<LayerCache>* caches,
                    std::vector<Tensor>* all = nullptr, bool final_norm = true) {
    LayerInputs in;
    in.self.causal = true;
    in.self.key_padding_mask = keep;
    for (size_t i = 0; i < layers_.size(); ++i) {
      if (all) all->push_back(h);
      h = layers_[i]->forward(h, in, caches ? &(*caches)[i] : nullptr);
    }
    if (!ln_f_ || !final_norm) return h;
    h = ln_f_->forward(h);
    if (all) all->push_back(h);
    return h;
  }

  Tensor logits_of(const Tensor& h) { return vocab_parallel_logits(h, *wte_); }

  TensorMap forward(const TensorMap& inputs) override {
    Tensor h;
    Tensor mask = optional_input(inputs, "attention_mask");
    if (part_.is_first()) {
      const Tensor& ids = require_input(inputs, "input_ids", "gpt2");
      LIBAI_CHECK(ids.dim() == 2, "gpt2: input_ids should be [batch, seq], got ",
                  shape_str(ids.shape()));
      Tensor positions = optional_input(inputs, "position_ids");
      if (!positions.defined())
        positions = ops::expand(ops::unsqueeze(Tensor::arange(ids.size(1)), 0), ids.shape());
      h = embed(ids, positions);
    } else {
      h = require_input(inputs, "hidden_states", "gpt2");
      LIBAI_CHECK(h.dim() == 3 && h.size(2) == c_.hidden, "gpt2 ", to_string(part_),
                  ": hidden_states should be [batch, seq, ", c_.hidden, "], got ",
                  shape_str(h.shape()));
    }
    Tensor keep = mask.defined() ? ops::ne(mask, Tensor::zeros({}, mask.dtype())) : Tensor();
    std::vector<Tensor> all;
    h = run_layers(h, keep, nullptr, part_.is_whole() ? &all : nullptr);
    if (!part_.is_last()) {
      TensorMap out{{"hidden_states", h}};
      if (mask.defined()) out["attention_mask"] = mask;
      return out;
    }
    TensorMap out{{"last_hidden_state", h}};
    put_lm_logits(out, "logits", h, *wte_);
    for (size_t i = 0; i < all.size(); ++i) out["hidden_states." + std::to_string(i)] = all[i];
    return out;
  }

  // Note [Decoding through parts]: one step of one group (models/pipeline/stage.h's
  // decoder-only contract): every part first reorders its caches by select_rows and passes
  // it on; the first embeds input_ids at position_ids (past, past + 1, ... when absent); the
  // last returns the last position's logits [batch, vocab] in f32.
  std::unique_ptr<DecodeState> new_decode_state() const override {
    auto state = std::make_unique<CachesState>();
    state->owner = this;
    state->caches.resize(layers_.size());
    return state;
  }

  TensorMap decode_step(const TensorMap& in, DecodeState& state) override {
    auto* s = dynamic_cast<CachesState*>(&state);
    check(s && s->owner == this, "the state was not made by this stage's new_state()");
    auto& caches = s->caches;
    const Tensor rows = optional_input(in, "select_rows");
    if (rows.defined())
      for (auto& c : caches) c.select_rows(rows);
    const int64_t past = caches.empty() ? 0 : caches[0].self.length();

    Tensor h;  // [batch, n, hidden]
    Tensor positions = optional_input(in, "position_ids");
    const Tensor mask = optional_input(in, "attention_mask");
    if (part_.is_first()) {
      const Tensor ids = optional_input(in, "input_ids");
      check(ids.defined(), "input \"input_ids\" is required");
      check(ids.dim() == 2, "input_ids should be [batch, seq], got ", shape_str(ids.shape()));
      if (!positions.defined()) {  // past, past + 1, ... in every row
        std::vector<int64_t> values(ids.numel());
        for (size_t i = 0; i < values.size(); ++i) values[i] = past + int64_t(i) % ids.size(1);
        positions = Tensor::from_vector(values, ids.shape());
      }
      LIBAI_CHECK(past + ids.size(1) <= c_.positions, "gpt2: sequence of ", past + ids.size(1),
                  " tokens exceeds n_positions ", c_.positions);
      h = embed(ids, positions);
    } else {
      h = optional_input(in, "hidden_states");
      check(h.defined(), "input \"hidden_states\" is required");
      check(h.dim() == 3 && h.size(2) == c_.hidden, "hidden_states should be [batch, seq, ",
            c_.hidden, "], got ", shape_str(h.shape()));
    }
    if (!caches.empty() && past > 0)
      check(caches[0].self.keys().size(0) == h.size(0), "a batch of ", h.size(0),
            " rows for KV caches of ", caches[0].self.keys().size(0),
            " rows (select_rows missing?)");
    if (mask.defined())
      check(mask.dim() == 2 && mask.size(0) == h.size(0) && mask.size(1) == past + h.size(1),
            "attention_mask should be [", h.size(0), ", ", past + h.size(1), "] (past ", past,
            " + new ", h.size(1), " tokens), got ", shape_str(mask.shape()));
    Tensor keep = mask.defined() && mask.dtype() != DType::boolean
                      ? ops::ne(mask, Tensor::zeros({}, mask.dtype()))
                      : mask;
    // The final norm is per position: only the last one is needed.
    h = run_layers(h, keep, &caches, nullptr, /*final_norm=*/false);

    if (!part_.is_last()) {
      TensorMap out{{"hidden_states", h}};
      if (mask.defined()) out["attention_mask"] = mask;
      if (positions.defined()) out["position_ids"] = positions;
      if (rows.defined()) out["select_rows"] = rows;
      return out;
    }
    Tensor logits = logits_of(ln_f_->forward(ops::select(h, 1, -1)));
    if (logits.dtype() != DType::f32) {
      Tensor f32 = Tensor::empty(logits.shape());
      f32.copy_from(logits);
      logits = f32;
    }
    return {{"logits", logits}};  // [batch, vocab]
  }

  std::unique_ptr<generation::DecodeSession> start(
      const std::vector<std::vector<int64_t>>& prompts) override {
    LIBAI_CHECK(part_.is_whole(), "gpt2: generation needs the whole model, not ",
                to_string(part_), " (pipelines generate through models/pipeline/ stages)");
    for (const auto& p : prompts)
      for (int64_t id : p)
        LIBAI_CHECK(id >= 0 && id < c_.vocab, "gpt2: token id ", id, " outside the vocabulary of ",
                    c_.vocab);
    return std::make_unique<CausalLmSession>(
        prompts, c_.eos < 0 ? 0 : c_.eos, c_.layers, [this](const CausalStep& s) {
          LIBAI_CHECK(s.keep.size(1) <= c_.positions, "gpt2: sequence of ", s.keep.size(1),
                      " tokens exceeds n_positions ", c_.positions);
          Tensor h = run_layers(embed(s.ids, s.positions), s.keep, s.caches);
          return logits_of(ops::select(h, 1, -1));  // [batch, vocab]
        });
  }
  bool is_encoder_decoder() const override { return false; }
  int64_t vocab_size() const override { return c_.vocab; }
  generation::GenerativeModel* generative() override { return part_.is_whole() ? this : nullptr; }
  Task task() const override { return Task::causal_lm; }
  const WeightMap& weight_map() const override { return map_; }

 private:
  template <typename... Args>
  void check(bool ok, const Args&... message) const {
    LIBAI_CHECK(ok, "gpt2 stage ", to_string(part_), ": ", message...);
  }

  Gpt2Config c_;
  Embedding* wte_ = nullptr;        // first and last parts
  Embedding* wpe_ = nullptr;        // first part
  Dropout* embed_dropout_ = nullptr;  // first part
  std::vector<TransformerLayer*> layers_;
  Norm* ln_f_ = nullptr;  // last part
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
