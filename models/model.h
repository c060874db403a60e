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
#include <optional>
#include <string>

#include "models/generation/session.h"
#include "models/hf_config.h"
#include "models/module.h"
#include "models/weights.h"
#include "ops/packed_linear.h"

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

// Which part of a model an object holds: layers [first_layer, last_layer) of num_layers; the
// first part also holds the embeddings, the last the final norm and the head (Note [Model
// parts]). A pipeline stage holds one part.
struct StageSpec {
  int first_layer = 0, last_layer = 0, num_layers = 0;
  bool is_first() const { return first_layer == 0; }
  bool is_last() const { return last_layer == num_layers; }
  bool is_whole() const { return is_first() && is_last(); }
  int size() const { return last_layer - first_layer; }
  bool operator==(const StageSpec&) const = default;
};
std::string to_string(const StageSpec& spec);  // "layers [2, 4) of 6"
// InvalidArgument naming the config unless 0 <= first_layer < last_layer <= num_layers ==
// the model's `num_layers`.
void check_part(const HfConfig& config, const StageSpec& part, int num_layers);

// Note [Model parts]
// A model built for a part (create_model's or LoadOptions' `part`) holds only the modules of
// its layers, plus the embeddings on the first part and the final norm and head on the last,
// under the whole model's names: its checkpoint names, weight map, dropout masks (keyed by
// module path, models/training_mode.h) and initialisation are the whole model's. Its forward
// takes, on the first part, the model's inputs and, on the others, what the part before
// returned; it returns, on the last part, the whole model's outputs (logits or
// "logits_shard", last_hidden_state, ...) and, on the others, the tensors that cross the cut:
// "hidden_states" (floating, with its autograd graph: the backward of the part before starts
// from its gradient) and the side inputs the later parts need (attention_mask, ...), which
// carry no gradient. Every position is computed, as in training (decoding through stages
// keeps KV caches: models/stages/stage.h). Inputs a part does not use (input_ids on a later
// part, labels) are ignored, so the last part can be given its micro-batch merged with what
// it received, which is how train::compute_loss runs on it. The per-layer outputs
// "hidden_states.{i}" are returned by a whole model only. Every family and head can be cut:
// BERT / RoBERTa and ViT as GPT-2 (the pooler and the classifier / NSP heads on the last
// part); T5 / MT5 in the order encoder layers, then decoder layers, where the tensors that
// cross a cut are "decoder_hidden_states" (the first part's embedded decoder tokens, then the
// decoder's running states) with "hidden_states" (inside the encoder) or
// "encoder_hidden_states" (after the encoder's final norm), all with gradients (models/t5/t5.cc).

// What a model part keeps for one group of sequences between decoding steps: its layers' KV
// caches (Note [Decoding through parts]).
class DecodeState {
 public:
  virtual ~DecodeState() = default;
};

// Note [Decoding through parts]
// An inference pipeline stage (models/stages/stage.h) is a model part that also offers a
// decode step: new_decode_state() makes the caches of one group of sequences and
// decode_step() runs one micro-batch of that group through the part's layers under the stage
// message contract of stage.h (one step's tokens, logits of the last position in f32 on the
// last part). So the modules, names and checkpoint rules of a stage are the part's, and the
// family declares its layers once: stages::part_stage wraps such a part as a stage. A family
// whose parts do not decode gives its stages another way (Family::make_stage) or none.

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
  // Note [Decoding through parts]: a fresh state for one group of sequences, or null when
  // this model does not decode through stages; decode_step rejects a state another part made.
  virtual std::unique_ptr<DecodeState> new_decode_state() const { return nullptr; }
  virtual TensorMap decode_step(const TensorMap& in, DecodeState& state);
  // The part of the model this object holds (Note [Model parts]); the whole model unless it
  // was built for a part.
  const StageSpec& part() const { return part_; }
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
  StageSpec part_;
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
  // Only this part of the model (Note [Model parts]); only its tensors are read. None: whole.
  std::optional<StageSpec> part;
  // For models that only run forward: packs the CPU f32 weights of the Linear layers and the
  // tied output tables once loaded (Note [Packed inference weights] in models/layers/linear.h).
  bool pack_weights = false;
  // The packed copies' dtype: f32, or bf16 (rounds those weights to bf16: half the bytes a
  // decoding step reads; Note [Packed inference weights]); bf16 needs pack_weights.
  DType pack_dtype = DType::f32;
  // Quantized packed copies (Note [Packed inference weights]; ops/packed_linear.h): int8,
  // int8-dynamic or q4 for every Linear and output table, but those `quantize_keep` names
  // (models/layers/linear.h, PackSpec::keep), which get pack_dtype copies. Needs pack_weights.
  ops::QuantSpec quantize;
  std::vector<std::string> quantize_keep;
  // With quantize or a bf16 pack_dtype: whether those Linear layers keep their f32 weights. By
  // default they are released once packed (Note [Released weights] in models/layers/linear.cc):
  // the model then runs forward only, in the memory of its packed copies (plus embeddings and
  // norms).
  bool keep_f32_weights = false;
};

// InvalidArgument for options that contradict each other or name what is not implemented
// (pack_dtype other than f32 / bf16, or bf16 without pack_weights); load_model and load_stage
// call it before reading any weight.
void check_load_options(const LoadOptions& options);
// Note [Streaming packed loads] in model.cc: the context load_model and load_stage build their
// modules in (parameters uninitialized: every one is read), and the callback their
// load_parameters gets, which packs and releases each Linear as soon as its weight is read
// when `options` pack and release (quantize, or bf16 copies, without keep_f32_weights); an
// empty function otherwise.
LayerContext load_context(const LoadOptions& options);
std::function<void(const ParameterInfo&)> streaming_packer(Module& module, const LoadOptions& options,
                                                           const WeightSource& source);
// What load_model and load_stage pack with; `whole`: the whole model (a keep entry that names
// no module of it is then InvalidArgument, naming it). A quantized checkpoint (`source`'s
// quantization, convert --quantize) installs its stored copies instead of quantizing
// (Note [Quantized checkpoints] in models/model.cc).
void pack_loaded(Module& module, const LoadOptions& options, bool whole,
                 const WeightSource* source = nullptr);

// Builds the model that config.json names (model_type, architectures[0]) without weights; with
// `part`, only that part (Note [Model parts]): InvalidArgument for a part out of range.
std::unique_ptr<Model> create_model(const HfConfig& config, const LayerContext& ctx,
                                    const std::optional<StageSpec>& part = std::nullopt);
// Reads `folder`/config.json, builds the model and loads its weights.
std::unique_ptr<Model> load_model(const std::filesystem::path& folder, const LoadOptions& options = {});

}  // namespace libai::models
