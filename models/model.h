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
enum class Task { causal_lm, masked_lm, sequence_classification, encoder, seq2seq_lm, image_classification };
const char* task_name(Task task);

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

 protected:
  explicit Model(HfConfig config) : config_(std::move(config)) {}
  HfConfig config_;
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
