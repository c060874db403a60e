#include "models/t5/t5.h"

#include <algorithm>
#include <cmath>

#include "ops/ops.h"
#include "runtime/autograd.h"

namespace libai::models {

T5Config::T5Config(const HfConfig& c, bool mt5) : name(mt5 ? "mt5" : "t5") {
  const std::string& path = c.path();
  vocab = c.require_int("vocab_size");
  d_model = c.get_int("d_model", 512);
  d_kv = c.get_int("d_kv", 64);
  d_ff = c.get_int("d_ff", mt5 ? 1024 : 2048);
  heads = c.get_int("num_heads", mt5 ? 6 : 8);
  encoder_layers = c.get_int("num_layers", mt5 ? 8 : 6);
  decoder_layers = c.get_int("num_decoder_layers", encoder_layers);
  num_buckets = c.get_int("relative_attention_num_buckets", 32);
  max_distance = c.get_int("relative_attention_max_distance", 128);
  eps = c.get_double("layer_norm_epsilon", 1e-6);
  for (auto [key, value] : {std::pair<const char*, int64_t>{"vocab_size", vocab},
                            {"d_model", d_model},
                            {"d_kv", d_kv},
                            {"d_ff", d_ff},
                            {"num_heads", heads},
                            {"num_layers", encoder_layers},
                            {"num_decoder_layers", decoder_layers}})
    LIBAI_CHECK_KIND(CorruptInput, value > 0, path, ": \"", key, "\" should be positive, got ",
                     value);
  // The encoder halves the buckets and keeps half of those exact; the logarithmic buckets
  // then need max_distance beyond the decoder's exact range (else HF divides by log(1)).
  LIBAI_CHECK_KIND(CorruptInput, num_buckets >= 4, path,
                   ": \"relative_attention_num_buckets\" should be at least 4, got ", num_buckets);
  LIBAI_CHECK_KIND(CorruptInput, max_distance > num_buckets / 2, path,
                   ": \"relative_attention_max_distance\" (", max_distance,
                   ") should exceed relative_attention_num_buckets / 2 (", num_buckets / 2, ")");
  parse_feed_forward(c, mt5);
  dropout = c.get_double("dropout_rate", 0.1);
  tied = c.get_bool("tie_word_embeddings", true);
  scale_output = !mt5 && c.get_bool("scale_decoder_outputs", tied);
  pad = c.get_int("pad_token_id", 0);
  decoder_start = c.get_int("decoder_start_token_id", pad);
  LIBAI_CHECK_KIND(CorruptInput, pad >= 0 && pad < vocab, path, ": \"pad_token_id\" ", pad,
                   " is outside the vocabulary of ", vocab);
  LIBAI_CHECK_KIND(CorruptInput, decoder_start >= 0 && decoder_start < vocab, path,
                   ": \"decoder_start_token_id\" ", decoder_start, " is outside the vocabulary of ",
                   vocab);
}

// Hugging Face's rule: "ACT" or "gated-ACT"; "gated-gelu" means gelu_new; a saved
// dense_act_fn (transformers writes it) is what the model runs.
void T5Config::parse_feed_forward(const HfConfig& c, bool mt5) {
  const std::string proj = c.get_string("feed_forward_proj", mt5 ? "gated-gelu" : "relu");
  std::string act = proj;
  const auto dash = proj.find('-');
  if (dash != std::string::npos) {
    LIBAI_CHECK_KIND(
        Unsupported,
        proj.compare(0, dash, "gated") == 0 && proj.find('-', dash + 1) == std::string::npos,
        c.path(), ": feed_forward_proj \"", proj,
        "\" is not supported (expected \"ACT\" or \"gated-ACT\", e.g. \"relu\" or "
        "\"gated-gelu\")");
    gated = true;
    act = proj.substr(dash + 1);
  }
  if (proj == "gated-gelu") act = "gelu_new";
  const bool saved_act = c.has("dense_act_fn");
  act = c.get_string("dense_act_fn", act);
  activation =
      parse_activation(act, c.path() + (saved_act ? ": dense_act_fn" : ": feed_forward_proj"));
  if (c.has("is_gated_act")) {
    const bool saved = c.get_bool("is_gated_act", gated);
    LIBAI_CHECK_KIND(CorruptInput, saved == gated, c.path(), ": \"is_gated_act\" is ",
                     saved ? "true" : "false", " but feed_forward_proj \"", proj, "\" is ",
                     gated ? "gated" : "not gated");
  }
}

T5StackConfig T5Config::stack(bool decoder) const {
  T5StackConfig stack;
  stack.layer.attention = {.hidden = d_model,
                           .heads = heads,
                           .head_dim = d_kv,
                           .bias = false,
                           .scale = 1.0,
                           .dropout = dropout};
  stack.layer.mlp = {.hidden = d_model,
                     .intermediate = d_ff,
                     .activation = activation,
                     .gated = gated,
                     .bias = false,
                     .dropout = dropout};
  stack.layer.dropout = dropout;
  stack.dropout = dropout;
  stack.layer.pre_norm = true;
  stack.layer.norm = ops::NormKind::rms;
  stack.layer.norm_eps = eps;
  stack.layer.norm_bias = false;
  stack.layer.cross_attention = decoder;
  stack.num_buckets = num_buckets;
  stack.max_distance = max_distance;
  stack.layers = decoder ? decoder_layers : encoder_layers;
  stack.decoder = decoder;
  return stack;
}

WeightMap t5_weight_map(const T5Config& c) {
  WeightMap map;
  for (const char* stack : {"encoder", "decoder"}) {
    const bool decoder = std::string(stack) == "decoder";
    const int64_t layers = decoder ? c.decoder_layers : c.encoder_layers;
    const std::string s = stack;
    map.add(s + ".relative_bias.weight",
            s + ".block.0.layer.0.SelfAttention.relative_attention_bias.weight");
    for (int64_t i = 0; i < layers; ++i) {
      const std::string o = s + ".layers." + std::to_string(i) + ".",
                        h = s + ".block." + std::to_string(i) + ".layer.";
      const std::string self = h + "0.SelfAttention.";
      map.add_heads(o + "attention.qkv.weight",
                    {self + "q.weight", self + "k.weight", self + "v.weight"}, 3, c.heads);
      map.add(o + "attention.out.weight", self + "o.weight");
      map.add(o + "attention_norm.weight", h + "0.layer_norm.weight");
      if (decoder) {
        const std::string cross = h + "1.EncDecAttention.";
        map.add(o + "cross_attention.q.weight", cross + "q.weight");
        map.add_heads(o + "cross_attention.kv.weight", {cross + "k.weight", cross + "v.weight"}, 2,
                      c.heads);
        map.add(o + "cross_attention.out.weight", cross + "o.weight");
        map.add(o + "cross_attention_norm.weight", h + "1.layer_norm.weight");
      }
      const std::string ff = h + (decoder ? "2." : "1.");
      if (c.gated) {
        map.add(o + "mlp.gate.weight", ff + "DenseReluDense.wi_0.weight");
        map.add(o + "mlp.up.weight", ff + "DenseReluDense.wi_1.weight");
      } else {
        map.add(o + "mlp.up.weight", ff + "DenseReluDense.wi.weight");
      }
      map.add(o + "mlp.down.weight", ff + "DenseReluDense.wo.weight");
      map.add(o + "mlp_norm.weight", ff + "layer_norm.weight");
    }
    map.add(s + ".final_norm.weight", s + ".final_layer_norm.weight");
  }
  map.add("shared.weight", "shared.weight");
  if (!c.tied)
    map.add("lm_head.weight", "lm_head.weight");
  else
    map.ignore("lm_head.weight");  // tied to shared
  map.ignore("encoder.embed_tokens.weight");
  map.ignore("decoder.embed_tokens.weight");
  map.ignore("EncDecAttention.relative_attention_bias.weight");  // unused by HF too
  return map;
}

namespace {

// The whole model, or one part (Note [Model parts]). A part holds pipeline layers [first,
// last) of encoder_layers + decoder_layers, the encoder's first: encoder layers, decoder
// layers, or the end of the one and the start of the other, each with its stack's bias table.
//   first part in:  input_ids, decoder_input_ids, optional attention_mask,
//                   decoder_attention_mask
//   later parts in: decoder_hidden_states [batch, dec_len, d_model] (the first part's embedded
//                   decoder tokens, or the decoder's running states) and either hidden_states
//                   [batch, seq, d_model] (the encoder's running states) or, once the encoder
//                   is done, encoder_hidden_states (its output after the final norm); the
//                   masks from the micro-batch
//   out (before the last): decoder_hidden_states, and hidden_states or encoder_hidden_states,
//                   with the masks given; every floating one carries its gradient
//   out (the last): logits (or logits_shard) and encoder_last_hidden_state
struct Seq2SeqState : DecodeState {
  const Model* owner = nullptr;    // the part whose new_decode_state() made it
  bool started = false;            // step 0 (the encoder's) ran
  std::vector<LayerCache> caches;  // one per decoder layer of the part
  Tensor memory_keep;              // [batch, source] bool; undefined: all real
};

Tensor keep_of(const Tensor& mask) {
  if (!mask.defined() || mask.dtype() == DType::boolean) return mask;
  return ops::ne(mask, Tensor::zeros({}, mask.dtype()));
}

class T5 : public Model, public generation::GenerativeModel {
 public:
  T5(const HfConfig& hf, const LayerContext& ctx, bool mt5, const StageSpec& part)
      : Model(hf), c_(hf, mt5), map_(t5_weight_map(c_)) {
    part_ = part;
    const int e = int(c_.encoder_layers);
    if (part.is_first() || (part.is_last() && c_.tied))
      shared_ = &add_module(
          "shared", std::make_unique<Embedding>(ctx, c_.vocab, c_.d_model, EmbeddingParallel::vocab));
    if (part.first_layer < e)
      encoder_ = &add_module("encoder", std::make_unique<T5Stack>(ctx, c_.stack(false),
                                                                  part.first_layer,
                                                                  std::min(part.last_layer, e)));
    if (part.last_layer > e)
      decoder_ = &add_module("decoder", std::make_unique<T5Stack>(ctx, c_.stack(true),
                                                                  std::max(part.first_layer, e) - e,
                                                                  part.last_layer - e));
    if (part.is_last() && !c_.tied)
      lm_head_ = &add_module("lm_head", std::make_unique<Embedding>(ctx, c_.vocab, c_.d_model,
                                                                    EmbeddingParallel::vocab));
    if (part.is_last()) {
      if (lm_head_) lm_head_->serve_as_output(/*lookups=*/false);
      else shared_->serve_as_output();
    }
  }

  // ids [batch, seq], keep [batch, seq] or undefined -> [batch, seq, d_model]. Whole model.
  Tensor encode(const Tensor& ids, const Tensor& keep, std::vector<Tensor>* all = nullptr) const {
    T5StackInputs in;
    in.keep = keep;
    return encoder_->forward(shared_->forward(ids), in, nullptr, all);
  }

  // The decoder over `ids` [batch, n] after `in.past` cached tokens -> [batch, n, d_model]
  Tensor decode(const Tensor& ids, const T5StackInputs& in, std::vector<LayerCache>* caches,
                std::vector<Tensor>* all = nullptr) const {
    return decoder_->forward(shared_->forward(ids), in, caches, all);
  }

  // [..., d_model] -> [..., vocab]
  Tensor lm_logits(const Tensor& h) const {
    return vocab_parallel_logits(lm_input(h), lm_head_ ? *lm_head_ : *shared_);
  }
  // What the LM head multiplies: the decoder's output, scaled when the head is tied.
  Tensor lm_input(const Tensor& h) const {
    return c_.scale_output ? h * (1.0 / std::sqrt(double(c_.d_model))) : h;
  }

  TensorMap forward(const TensorMap& inputs) override {
    const char* name = c_.name.c_str();
    Tensor h, memory, d;  // the encoder's running states, its output, the decoder's states
    Tensor keep, dec_keep;
    if (part_.is_first()) {
      const Tensor& ids = require_input(inputs, "input_ids", name);
      const Tensor& dec_ids = require_input(inputs, "decoder_input_ids", name);
      LIBAI_CHECK(ids.dim() == 2, name, ": input_ids should be [batch, seq], got ",
                  shape_str(ids.shape()));
      LIBAI_CHECK(dec_ids.dim() == 2 && dec_ids.size(0) == ids.size(0), name,
                  ": decoder_input_ids should be [", ids.size(0), ", dec_len], got ",
                  shape_str(dec_ids.shape()));
      keep = keep_mask(inputs, "attention_mask", ids.shape());
      dec_keep = keep_mask(inputs, "decoder_attention_mask", dec_ids.shape());
      h = shared_->forward(ids);
      d = shared_->forward(dec_ids);
    } else {
      d = states(inputs, "decoder_hidden_states");
      if (encoder_)
        h = states(inputs, "hidden_states");
      else
        memory = states(inputs, "encoder_hidden_states");
      const Tensor& source = h.defined() ? h : memory;
      keep = keep_mask(inputs, "attention_mask", {source.size(0), source.size(1)});
      dec_keep = keep_mask(inputs, "decoder_attention_mask", {d.size(0), d.size(1)});
    }
    const bool whole = part_.is_whole();
    std::vector<Tensor> enc_all, dec_all;
    if (encoder_) {
      T5StackInputs in;
      in.keep = keep;
      h = encoder_->forward(h, in, nullptr, whole ? &enc_all : nullptr);
      if (encoder_->holds_end()) {  // the encoder's output, after its final norm
        memory = h;
        h = Tensor();
      }
    }
    if (decoder_)
      d = decoder_->forward(d, {.keep = dec_keep, .memory = memory, .memory_keep = keep}, nullptr,
                            whole ? &dec_all : nullptr);
    TensorMap out;
    for (const char* mask : {"attention_mask", "decoder_attention_mask"})
      if (Tensor m = optional_input(inputs, mask); m.defined()) out[mask] = m;
    if (!part_.is_last()) {
      out["decoder_hidden_states"] = d;
      if (h.defined())
        out["hidden_states"] = h;
      else
        out["encoder_hidden_states"] = memory;
      return out;
    }
    out["encoder_last_hidden_state"] = memory;
    put_lm_logits(out, "logits", lm_input(d), lm_head_ ? *lm_head_ : *shared_);
    for (size_t i = 0; i < enc_all.size(); ++i)
      out["encoder_hidden_states." + std::to_string(i)] = enc_all[i];
    for (size_t i = 0; i < dec_all.size(); ++i)
      out["decoder_hidden_states." + std::to_string(i)] = dec_all[i];
    return out;
  }

  // Note [Decoding through parts]: one step of one group under models/stages/stage.h's
  // encoder-decoder contract. Step 0 runs the encoder layers the part holds and fills its
  // decoder layers' cross-attention caches from encoder_hidden_states, keeping its mask;
  // later steps carry one token's decoder_hidden_states only.
  std::unique_ptr<DecodeState> new_decode_state() const override {
    auto state = std::make_unique<Seq2SeqState>();
    state->owner = this;
    state->caches.resize(decoder_ ? decoder_->num_layers() : 0);
    return state;
  }
  TensorMap decode_step(const TensorMap& in, DecodeState& state) override;

  std::unique_ptr<generation::DecodeSession> start(
      const std::vector<std::vector<int64_t>>& prompts) override;
  bool is_encoder_decoder() const override { return true; }
  int64_t decoder_start_token_id() const override { return c_.decoder_start; }
  int64_t vocab_size() const override { return c_.vocab; }
  generation::GenerativeModel* generative() override { return part_.is_whole() ? this : nullptr; }
  Task task() const override { return Task::seq2seq_lm; }
  const WeightMap& weight_map() const override { return map_; }

  const T5Config& t5_config() const { return c_; }
  int64_t decoder_layers() const { return decoder_->num_layers(); }

 private:
  Tensor keep_mask(const TensorMap& inputs, const std::string& key, const Shape& shape) const {
    Tensor mask = optional_input(inputs, key);
    if (!mask.defined()) return mask;
    LIBAI_CHECK(mask.shape() == shape, c_.name, ": ", key, " should have the shape ",
                shape_str(shape), ", got ", shape_str(mask.shape()));
    return ops::ne(mask, Tensor::zeros({}, mask.dtype()));
  }

  // A tensor a part receives from the part before: [batch, seq, d_model].
  const Tensor& states(const TensorMap& inputs, const std::string& key) const {
    const Tensor& t = require_input(inputs, key, c_.name.c_str());
    LIBAI_CHECK(t.dim() == 3 && t.size(2) == c_.d_model, c_.name, " ", to_string(part_), ": ", key,
                " should be [batch, seq, ", c_.d_model, "], got ", shape_str(t.shape()));
    return t;
  }

  template <typename... Args>
  void check(bool ok, const Args&... message) const {
    LIBAI_CHECK(ok, c_.name, " stage ", to_string(part_), ": ", message...);
  }
  // A [batch, seq, d_model] input of a decode step, named in the error when missing.
  const Tensor& step_states(const TensorMap& in, const std::string& key) const {
    auto it = in.find(key);
    check(it != in.end() && it->second.defined(), "input \"", key, "\" is required");
    const Tensor& t = it->second;
    check(t.dim() == 3 && t.size(2) == c_.d_model, key, " should be [batch, seq, ", c_.d_model,
          "], got ", shape_str(t.shape()));
    return t;
  }
  void check_mask(const Tensor& mask, const char* name, const Tensor& states) const {
    if (mask.defined())
      check(mask.dim() == 2 && mask.size(0) == states.size(0) && mask.size(1) == states.size(1),
            name, " should be [", states.size(0), ", ", states.size(1), "], got ",
            shape_str(mask.shape()));
  }

  T5Config c_;
  WeightMap map_;
  Embedding* shared_ = nullptr;   // the first part, and the last when the head is tied
  T5Stack* encoder_ = nullptr;    // parts holding encoder layers
  T5Stack* decoder_ = nullptr;    // parts holding decoder layers
  Embedding* lm_head_ = nullptr;  // the last part, untied: [vocab, d_model], vocab-parallel
};

TensorMap T5::decode_step(const TensorMap& in, DecodeState& state) {
  auto* s = dynamic_cast<Seq2SeqState*>(&state);
  check(s && s->owner == this, "the state was not made by this stage's new_state()");
  const bool prefill = !s->started;
  if (!prefill)
    for (const char* name : {"input_ids", "hidden_states", "encoder_hidden_states"})
      check(!optional_input(in, name).defined(), "input \"", name,
            "\" at a decoding step: the group's encoder already ran at its step 0");
  const Tensor rows = optional_input(in, "select_rows");
  if (rows.defined()) {
    check(!prefill, "select_rows at step 0: there is nothing to reorder yet");
    for (auto& cache : s->caches) cache.select_rows(rows);
    if (s->memory_keep.defined()) s->memory_keep = ops::index_select(s->memory_keep, 0, rows);
  }

  Tensor d;                    // the decoder's hidden states [batch, n, d_model]
  Tensor h, mask;              // step 0, inside the encoder: [batch, source, d_model], mask
  Tensor memory, memory_mask;  // step 0, after the encoder: its output and mask
  if (part_.is_first()) {
    const Tensor ids = optional_input(in, "decoder_input_ids");
    check(ids.defined(), "input \"decoder_input_ids\" is required");
    check(ids.dim() == 2, "decoder_input_ids should be [batch, n], got ", shape_str(ids.shape()));
    d = shared_->forward(ids);
    if (prefill) {
      const Tensor source = optional_input(in, "input_ids");
      check(source.defined(), "input \"input_ids\" is required");
      check(source.dim() == 2 && source.size(0) == ids.size(0), "input_ids should be [",
            ids.size(0), ", source], got ", shape_str(source.shape()));
      h = shared_->forward(source);
      mask = optional_input(in, "attention_mask");
    }
  } else {
    d = step_states(in, "decoder_hidden_states");
    if (prefill && encoder_) {
      h = step_states(in, "hidden_states");
      mask = optional_input(in, "attention_mask");
    } else if (prefill) {
      memory = step_states(in, "encoder_hidden_states");
      memory_mask = optional_input(in, "encoder_attention_mask");
    }
  }

  if (prefill && encoder_) {
    check_mask(mask, "attention_mask", h);
    h = encoder_->forward(h, {.keep = keep_of(mask)});
    if (encoder_->holds_end()) {  // the encoder's output, after its final norm
      memory = h;
      memory_mask = mask;
      h = mask = Tensor();
    }
  }

  if (decoder_) {
    if (prefill) {
      LIBAI_ASSERT(memory.defined(), "t5 stage: no encoder output at step 0");
      check(memory.size(0) == d.size(0), "encoder_hidden_states has ", memory.size(0),
            " rows for ", d.size(0), " decoder rows");
      check_mask(memory_mask, "encoder_attention_mask", memory);
      s->memory_keep = keep_of(memory_mask);
    }
    const int64_t past = s->caches[0].self.length();
    if (past > 0)
      check(s->caches[0].self.keys().size(0) == d.size(0), "a batch of ", d.size(0),
            " rows for caches of ", s->caches[0].self.keys().size(0),
            " rows (select_rows missing?)");
    // Step 0 fills the cross-attention caches from the memory; later steps read them.
    d = decoder_->forward(d, {.memory = memory, .memory_keep = s->memory_keep, .past = past},
                          &s->caches);
  }
  s->started = true;

  if (part_.is_last()) {  // the decoder's last position -> [batch, vocab] f32
    Tensor logits = lm_logits(ops::select(d, 1, -1));
    if (logits.dtype() != DType::f32) {
      Tensor f32 = Tensor::empty(logits.shape());
      f32.copy_from(logits);
      logits = f32;
    }
    return {{"logits", logits}};
  }
  TensorMap out{{"decoder_hidden_states", d}};
  if (rows.defined()) out["select_rows"] = rows;
  if (h.defined()) {  // the encoder goes on in the next part
    out["hidden_states"] = h;
    if (mask.defined()) out["attention_mask"] = mask;
  } else if (memory.defined()) {  // step 0: the next part's decoder layers need it too
    out["encoder_hidden_states"] = memory;
    if (memory_mask.defined()) out["encoder_attention_mask"] = memory_mask;
  }
  return out;
}

// Encoder-decoder decoding: the encoder runs once over the right-padded prompts; the decoder
// starts from decoder_start_token_id and extends every row by one token per step, with the
// self- and cross-attention caches of each layer.
class T5Session : public generation::DecodeSession {
 public:
  T5Session(const T5& model, const std::vector<std::vector<int64_t>>& prompts)
      : model_(model), batch_(int64_t(prompts.size())), caches_(model.decoder_layers()) {
    const T5Config& c = model.t5_config();
    LIBAI_CHECK(batch_ > 0, c.name, ": generation got no prompts");
    for (const auto& p : prompts)
      memory_length_ = std::max<int64_t>(memory_length_, int64_t(p.size()));
    std::vector<int64_t> ids(batch_ * memory_length_, c.pad);
    memory_keep_.assign(batch_ * memory_length_, 0);
    for (int64_t b = 0; b < batch_; ++b) {
      LIBAI_CHECK(!prompts[b].empty(), c.name, ": prompt ", b, " is empty");
      for (size_t j = 0; j < prompts[b].size(); ++j) {
        const int64_t id = prompts[b][j];
        LIBAI_CHECK(id >= 0 && id < c.vocab, c.name, ": token id ", id, " of prompt ", b,
                    " is outside the vocabulary of ", c.vocab);
        ids[b * memory_length_ + int64_t(j)] = id;
        memory_keep_[b * memory_length_ + int64_t(j)] = 1;
      }
    }
    autograd::NoGradGuard no_grad;
    Tensor memory = model.encode(Tensor::from_vector(ids, {batch_, memory_length_}), keep_tensor());
    // The first step fills the cross-attention caches: the memory is not needed after it.
    run(std::vector<int64_t>(batch_, c.decoder_start), memory);
  }

  int64_t batch_size() const override { return batch_; }
  Tensor logits() override { return logits_; }

  void append(const std::vector<int64_t>& tokens) override {
    LIBAI_CHECK(int64_t(tokens.size()) == batch_, model_.t5_config().name, ": append got ",
                tokens.size(), " tokens for a batch of ", batch_);
    autograd::NoGradGuard no_grad;
    run(tokens, Tensor());
  }

  void select_rows(const std::vector<int64_t>& rows) override {
    std::vector<uint8_t> keep(rows.size() * memory_length_);
    for (size_t i = 0; i < rows.size(); ++i) {
      LIBAI_CHECK(rows[i] >= 0 && rows[i] < batch_, "select_rows: row ", rows[i],
                  " out of range for a batch of ", batch_);
      std::copy_n(memory_keep_.begin() + rows[i] * memory_length_, memory_length_,
                  keep.begin() + int64_t(i) * memory_length_);
    }
    Tensor index = Tensor::from_vector(rows);
    for (auto& cache : caches_) cache.select_rows(index);
    memory_keep_ = std::move(keep);
    logits_ = ops::index_select(logits_, 0, index);
    batch_ = int64_t(rows.size());
  }

 private:
  Tensor keep_tensor() const {
    Tensor keep = Tensor::empty({batch_, memory_length_}, DType::boolean);
    std::copy(memory_keep_.begin(), memory_keep_.end(), keep.data<bool>());
    return keep;
  }

  void run(const std::vector<int64_t>& tokens, const Tensor& memory) {
    for (int64_t id : tokens)
      LIBAI_CHECK(id >= 0 && id < model_.vocab_size(), model_.t5_config().name, ": token id ", id,
                  " is outside the vocabulary of ", model_.vocab_size());
    Tensor ids = Tensor::from_vector(tokens, {batch_, 1});
    T5StackInputs in;
    in.memory = memory;
    in.memory_keep = keep_tensor();
    in.past = length_;
    Tensor h = model_.decode(ids, in, &caches_);
    Tensor logits = model_.lm_logits(ops::select(h, 1, -1));  // [batch, vocab]
    ++length_;
    logits_ = Tensor::empty(logits.shape());  // f32 on the CPU, whatever the model's dtype
    logits_.copy_from(logits);
  }

  const T5& model_;
  int64_t batch_;
  std::vector<LayerCache> caches_;
  std::vector<uint8_t> memory_keep_;  // [batch, memory_length] row-major, 1 = a prompt token
  int64_t memory_length_ = 0;
  int64_t length_ = 0;  // decoder tokens fed so far
  Tensor logits_;       // [batch, vocab] f32
};

std::unique_ptr<generation::DecodeSession> T5::start(
    const std::vector<std::vector<int64_t>>& prompts) {
  return std::make_unique<T5Session>(*this, prompts);
}

}  // namespace

int t5_num_layers(const HfConfig& config, bool mt5) {
  const T5Config c(config, mt5);
  return int(c.encoder_layers + c.decoder_layers);
}

std::unique_ptr<Model> make_t5_model(const HfConfig& config, const LayerContext& ctx, bool mt5,
                                     const std::optional<StageSpec>& part) {
  const int layers = t5_num_layers(config, mt5);
  if (part) check_part(config, *part, layers);
  return std::make_unique<T5>(config, ctx, mt5, part.value_or(StageSpec{0, layers, layers}));
}

}  // namespace libai::models
