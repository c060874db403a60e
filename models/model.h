// Model: a module of one family with one head (GPT-2 LM head, BERT masked LM, ...), built
// from a Hugging Face config and loaded from its checkpoint through the family's WeightMap.
//
//   auto model = models::load_model("tests/data/models/gpt2");     // config.json + weights
//   NamedTensors out = model->forward({{"input_ids", ids}, {"attention_mask", mask}});
//   out.at("logits");                      // Hugging Face's output names
//   auto* lm = model->generative();        // non-null for GPT-2, T5, MT5
//
// forward() takes and returns tensors under Hugging Face's names, so parity tests compare
// them with reference dumps directly and `libai-actor forward --save` writes the same names.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "models/generation/session.h"
#include "models/hf_config.h"
#include "models/module.h"
#include "models/weights.h"

namespace libai::models {

using TensorMap = std::map<std::string, Tensor>;

// What a model's head computes, for the task pipelines and the CLI.
// pretraining: BERT's masked LM + next-sentence prediction (BertForPreTraining).
enum class Task {
  causal_lm,
  masked_lm,
  sequence_classification,
  encoder,
  seq2seq_lm,
  image_classification,
  pretraining
};
const char* task_name(Task task);

class Embedding;

// Note [Logits shard]: under tensor parallelism an LM head's logits are computed as one
// shard per rank ([..., vocab / tp] each, the table's rows) and gathered into "logits". A loss
// does not need the gather (ops/vocab_parallel_cross_entropy.h), so a model asked to
// (set_logits_shard(true), as train::compute_loss does) returns this rank's shard under
// "logits_shard" instead of "logits" (or "prediction_logits"), gradient attached, padded to
// ceil(vocab / tp) columns; logits_shard_layout() says how it is split. With no tensor
// parallelism the flag changes nothing: "logits" is the whole thing. Heads without a
// vocabulary (classifiers) ignore it.
class Model : public Module {
 public:
  // Inputs (by name): input_ids, attention_mask, token_type_ids, position_ids,
  // decoder_input_ids, decoder_attention_mask, pixel_values; each model reads those it needs
  // and rejects a missing required one by name. Outputs: logits, last_hidden_state,
  // hidden_states.{i} (embedding output first), pooler_output, encoder_last_hidden_state, ...
  virtual TensorMap forward(const TensorMap& inputs) = 0;
  virtual Task task() const = 0;
  virtual const WeightMap& weight_map() const = 0;
  virtual generation::GenerativeModel* generative() { return nullptr; }
  const HfConfig& config() const { return config_; }
  // Note [Logits shard].
  void set_logits_shard(bool on) { logits_shard_ = on; }
  bool logits_shard() const { return logits_shard_; }
  // How the last "logits_shard" that forward() returned is split: the tensor-parallel group
  // and the whole vocabulary (the shard's columns past it are padding).
  struct LogitsShardLayout {
    std::shared_ptr<comm::Communicator> group;
    int64_t vocab = 0;
  };
  const LogitsShardLayout& logits_shard_layout() const { return logits_shard_layout_; }

 protected:
  explicit Model(HfConfig config) : config_(std::move(config)) {}
  // Puts the LM head's logits of h [..., dim] through the (possibly vocab-parallel) `table`
  // into out[name], or this rank's shard into out["logits_shard"] (Note [Logits shard]).
  void put_lm_logits(TensorMap& out, const std::string& name, const Tensor& h,
                     const Embedding& table, const Tensor& bias_shard = Tensor()) const;
  HfConfig config_;
  bool logits_shard_ = false;
  mutable LogitsShardLayout logits_shard_layout_;
};

// Looks up a required input, with an error naming it and the model.
const Tensor& require_input(const TensorMap& inputs, const std::string& name, const char* model);
// An optional input: undefined when absent.
Tensor optional_input(const TensorMap& inputs, const std::string& name);

struct LoadOptions {
  DType dtype = DType::f32;
  Device device = Device::cpu();
  WeightFormat format = WeightFormat::any;
  std::filesystem::path weights;  // a specific weights file; empty: the folder's
  // Tensor parallelism: this rank loads and computes its shard over the group (null: whole).
  std::shared_ptr<comm::Communicator> tp;
};

// Builds the model that config.json names (model_type, architectures[0]) without weights.
std::unique_ptr<Model> create_model(const HfConfig& config, const LayerContext& ctx);
// Reads `folder`/config.json, builds the model and loads its weights.
std::unique_ptr<Model> load_model(const std::filesystem::path& folder, const LoadOptions& options = {});

}  // namespace libai::models
