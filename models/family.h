// The declaration of a model family (docs/DESIGN.md, Note [One declaration per model family]):
// everything the rest of the runtime asks of a family, found through the one table in
// models/registry.cc by config.json's model_type. Code outside models/<family>/ and that table
// never names a family.
//
//   const Family& family = family_of(config);                 // Unsupported for unknown types
//   auto part = family.head(config).make(config, ctx, StageSpec{0, 6, family.num_layers(config)});
//   if (family.generates == GenerationKind::causal) family.generation(config).vocab_size ...
//   auto costs = family.costs.layers(config, tokens, context, bytes);
//
// A family's folder declares its Family (e.g. models/gpt2/gpt2_family.cc) and the registry
// lists it once; docs/MODELS.md ("Adding a family") lists what to write.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/layer_cost.h"
#include "models/model.h"

namespace libai::models {

namespace stages {
class PipelineStage;
}
struct GgufArchitecture;
namespace onnx {
class ExportGraphs;
struct ExportOptions;
}  // namespace onnx

// Builds the whole model (part empty) or one part of it (Note [Model parts]); InvalidArgument
// for a part out of range.
using MakeModel = std::unique_ptr<Model> (*)(const HfConfig&, const LayerContext&,
                                             const std::optional<StageSpec>& part);

// One head of the family: the class config.json's "architectures"[0] names.
struct FamilyHead {
  std::string architecture;  // "" = the head built when config.json names none
  MakeModel make = nullptr;
};

// How the family generates (generation::GenerativeModel), and what generation needs of a
// model without building it.
enum class GenerationKind { none, causal, seq2seq };
struct GenerationInfo {
  int64_t vocab_size = 0;
  int64_t pad_id = 0;            // pads prompts (masked out)
  int64_t max_positions = 0;     // causal: the longest sequence (0: unbounded)
  int64_t decoder_start_id = 0;  // seq2seq: the decoder's first token
};

// Planning estimates from config.json alone (models/stages/stage.h documents the numbers);
// `bytes` is the size of one element of the parameters and activations.
struct FamilyCosts {
  // One entry per layer in pipeline order; context: the keys each token attends to (> 0).
  std::vector<LayerCost> (*layers)(const HfConfig&, double tokens, double context,
                                   double bytes) = nullptr;
  LayerCost (*embedding)(const HfConfig&, double tokens, double bytes) = nullptr;  // first part
  LayerCost (*head)(const HfConfig&, double tokens, double bytes) = nullptr;       // last part
};

// The model's size for training FLOPs (Kaplan et al.'s 6 N + attention, train/flops.h):
// the weights of its matrix products per token, its attention blocks and their width, and the
// tokens one sample holds when the family fixes it (ViT's patches; 0: the sequence length).
struct FlopsShape {
  double matrix_parameters = 0;
  int64_t attention_blocks = 0, attention_width = 0, tokens = 0;
};

// An inference pipeline stage (models/stages/stage.h): layers [first, last) with the KV
// caches decoding keeps; stages::make_part_stage makes it from the config's head built for
// that part (Note [Decoding through parts] in models/model.h). The spec is checked by the
// caller.
using MakeStage = std::unique_ptr<stages::PipelineStage> (*)(const HfConfig&, const StageSpec&,
                                                               const LayerContext&);

// ONNX export (models/onnx/export.h): declares the graphs of `model`, a whole model of this
// family loaded on the CPU in f32, in `graphs` (one for most families, written to the --out
// file; T5's encoder and decoders beside it); Unsupported naming what for an option or a head
// it does not export. The function lives in the family's folder
// (models/<family>/<family>_onnx.cc), so this header stays free of protobuf.
using ExportOnnx = void (*)(Model& model, const onnx::ExportOptions& options,
                            onnx::ExportGraphs& graphs);

struct Family {
  std::string model_type;         // config.json "model_type"
  std::vector<FamilyHead> heads;  // by architecture; one with "" is the default
  // The layers a pipeline cuts (StageSpec::num_layers): T5's encoder + decoder layers.
  int (*num_layers)(const HfConfig&) = nullptr;
  GenerationKind generates = GenerationKind::none;
  GenerationInfo (*generation)(const HfConfig&) = nullptr;  // set when it generates
  FamilyCosts costs;                                        // null members: no cost model
  FlopsShape (*flops)(const HfConfig&) = nullptr;           // null: no FLOPs count
  MakeStage make_stage = nullptr;                           // null: no inference pipeline stages
  ExportOnnx export_onnx = nullptr;                         // null: no ONNX export
  // GGUF files of these general.architecture values (models/gguf.h); null: none.
  const GgufArchitecture* gguf = nullptr;
  // init_parameters scales the residual output projections by 1 / sqrt(2 num_layers) (GPT-2).
  bool scaled_residual_init = false;

  // The head config.json names (its default when it names none, with a warning for an
  // unknown architecture); Unsupported listing the known ones when there is no default.
  const FamilyHead& head(const HfConfig& config) const;
};

// The registry (models/registry.cc): every family, the built-in ones in the order the table
// lists them, then the registered ones in the order of registration.
const std::vector<const Family*>& families();

// Note [Families from outside the library]
// A program declares a Family for a model of its own (a Model built from the library's layers,
// with its WeightMap and its config.json mapping) and registers it before loading one: from then
// on load_model, create_model, load_stage, the pipelines, training and the CLI code paths that
// go through family_of find it by config.json's model_type, as they find the built-in families.
// InvalidArgument when a family already declares that model_type, or when the declaration has
// no model_type, no head or no num_layers. Register before other threads load models (readers
// of the table take no lock); `family` must outlive every use (a function-local static, as the
// built-in declarations are).
void register_family(const Family& family);
// The family of a model_type; nullptr when none declares it.
const Family* find_family(const std::string& model_type);
// The family of config.json's model_type: CorruptInput when it is missing, Unsupported naming
// it and the known types when no family declares it.
const Family& family_of(const HfConfig& config);
// "gpt2, bert, ..." for messages: the families for which `has` holds.
std::string family_names(bool (*has)(const Family&) = nullptr);

}  // namespace libai::models
