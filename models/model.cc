#include "models/model.h"

#include <algorithm>

#include "models/convert.h"
#include "models/layers/linear.h"
#include "models/family.h"
#include "runtime/allocator.h"
#include "runtime/logging.h"

namespace libai::models {

const char* task_name(Task task) {
  switch (task) {
    case Task::causal_lm: return "causal-lm";
    case Task::masked_lm: return "masked-lm";
    case Task::sequence_classification: return "sequence-classification";
    case Task::encoder: return "encoder";
    case Task::seq2seq_lm: return "seq2seq-lm";
    case Task::image_classification: return "image-classification";
    case Task::pretraining: return "pretraining";
  }
  return "?";
}

const Tensor& require_input(const TensorMap& inputs, const std::string& name, const char* model) {
  auto it = inputs.find(name);
  LIBAI_CHECK(it != inputs.end() && it->second.defined(), model, ": input \"", name, "\" is required");
  return it->second;
}

Tensor optional_input(const TensorMap& inputs, const std::string& name) {
  auto it = inputs.find(name);
  return it == inputs.end() ? Tensor() : it->second;
}

void Model::put_lm_logits(TensorMap& out, const std::string& name, const Tensor& h,
                          const Embedding& table, const Tensor& bias_shard) const {
  Tensor shard = vocab_parallel_logits_shard(h, table, bias_shard);  // [..., rows]
  if (logits_shard_ && table.group()) {
    out["logits_shard"] = shard;
    logits_shard_layout_ = {table.group(), table.count()};
  } else {
    out[name] = gather_vocab_logits(shard, table);  // [..., vocab]
  }
}

TensorMap Model::decode_step(const TensorMap&, DecodeState&) {
  LIBAI_CHECK_KIND(Unsupported, false, config_.path(), ": a ", config_.model_type(), " ",
                   task_name(task()), " model does not decode through pipeline stages");
  return {};
}

std::string to_string(const StageSpec& spec) {
  return str_cat("layers [", spec.first_layer, ", ", spec.last_layer, ") of ", spec.num_layers);
}

void check_part(const HfConfig& config, const StageSpec& part, int num_layers) {
  LIBAI_CHECK(part.num_layers == num_layers && 0 <= part.first_layer &&
                  part.first_layer < part.last_layer && part.last_layer <= part.num_layers,
              config.path(), ": part ", to_string(part), " is out of range for a ",
              config.model_type(), " model of ", num_layers,
              " layers (expected 0 <= first_layer < last_layer <= num_layers = ", num_layers, ")");
}

std::unique_ptr<Model> create_model(const HfConfig& config, const LayerContext& ctx,
                                    const std::optional<StageSpec>& part) {
  const Family& family = family_of(config);
  return family.head(config).make(config, ctx, part);
}

void check_load_options(const LoadOptions& options) {
  LIBAI_CHECK(options.pack_dtype == DType::f32 || options.pack_dtype == DType::bf16,
              "LoadOptions.pack_dtype: weights pack as f32 or bf16, not ",
              dtype_name(options.pack_dtype));
  LIBAI_CHECK(options.pack_dtype == DType::f32 || options.pack_weights,
              "LoadOptions.pack_dtype bf16 needs pack_weights (the packed copies hold the bf16 "
              "values)");
  const bool quantized = options.quantize.kind != ops::Quantization::none;
  LIBAI_CHECK(!quantized || options.pack_weights, "LoadOptions.quantize ",
              ops::quantization_name(options.quantize),
              " needs pack_weights (the quantized copies are packed ones)");
  LIBAI_CHECK(!quantized || options.device.is_cpu(), "LoadOptions.quantize ",
              ops::quantization_name(options.quantize), " runs on the CPU only, not ",
              options.device.str());
  LIBAI_CHECK(!quantized || options.dtype == DType::f32, "LoadOptions.quantize ",
              ops::quantization_name(options.quantize), " needs f32 parameters, not ",
              dtype_name(options.dtype));
  LIBAI_CHECK(quantized || options.quantize_keep.empty(),
              "LoadOptions.quantize_keep names layers to keep unquantized, but nothing is "
              "quantized");
}

namespace {

// Note [Quantized checkpoints]
// A folder written by `convert --quantize` stores each quantized layer's values (W.q, W.scale,
// W.min; ops/packed_linear.h) and no f32 weight: the source reads W as their dequantisation,
// and packing installs the stored values as the layer's quantized copy, so the model runs the
// checkpoint's weights without quantizing again; layers stored in f32 get f32 copies. Under
// tensor parallelism a rank holds a block of the stored rows: the ranks quantize their blocks
// of the dequantised values again (exact for q4 without a minimum, within one rounding of the
// scale otherwise), and say so in the log.
void install_stored(Module& module, const WeightSource& source, const LoadOptions& options) {
  const ops::QuantSpec& spec = source.quantization();
  for (auto& [name, m] : module.named_modules()) {
    const std::string weight = weight_name(name);
    auto* linear = dynamic_cast<Linear*>(m);
    auto* table = dynamic_cast<Embedding*>(m);
    if (!linear && !table) continue;
    const auto stored = source.quantized(weight);
    const std::string what = source.path() + ": " + weight;
    if (linear) {
      if (stored) linear->install_quantized(spec, *stored, what);
      else linear->pack(options.pack_dtype);
    } else if (table->serves_as_output()) {
      if (stored) table->install_quantized(spec, *stored, what);
      else table->pack(options.pack_dtype);
    }
  }
}

// What a quantized checkpoint's layers amount to as PackSpec::keep: the layers stored in f32.
std::vector<std::string> stored_f32_layers(Module& module, const WeightSource& source) {
  std::vector<std::string> keep;
  for (auto& [name, m] : module.named_modules()) {
    const std::string weight = weight_name(name);
    auto* table = dynamic_cast<Embedding*>(m);
    if (!dynamic_cast<Linear*>(m) && !(table && table->serves_as_output())) continue;
    if (!source.quantized(weight)) keep.push_back(table ? "output" : name);
  }
  return keep;
}

// Whether a load packs copies that replace the f32 weights (quantized, or bf16) and drops them.
bool releases_f32_weights(const LoadOptions& options) {
  return options.pack_weights && !options.keep_f32_weights &&
         (options.quantize.kind != ops::Quantization::none || options.pack_dtype == DType::bf16);
}

void release_packed(Module& module, const LoadOptions& options) {
  // The pool would keep the released blocks (and a streaming load's temporaries) for tensors
  // of their sizes, which inference never asks for again: they go back to the system.
  if (options.keep_f32_weights) return;
  release_packed_weights(module);
  cpu_allocator().empty_cache();
}

}  // namespace

void pack_loaded(Module& module, const LoadOptions& options, bool whole,
                 const WeightSource* source) {
  if (!options.pack_weights) return;
  if (source && source->quantization().kind != ops::Quantization::none) {
    const ops::QuantSpec& stored = source->quantization();
    LIBAI_CHECK(options.quantize.kind == ops::Quantization::none || options.quantize == stored,
                source->path(), " is quantized as ", ops::quantization_name(stored),
                " (convert --quantize): quantize ", ops::quantization_name(options.quantize),
                " would quantize it again; leave it out, or load the f32 model");
    if (!options.tp || options.tp->size() == 1) {
      install_stored(module, *source, options);
      release_packed(module, options);
      return;
    }
    logger("models")->info("{}: {} ranks quantize their blocks of the stored {} weights again",
                           source->path(), options.tp->size(), ops::quantization_name(stored));
    LoadOptions again = options;
    again.quantize = stored;
    again.quantize_keep = stored_f32_layers(module, *source);
    pack_loaded(module, again, false);
    return;
  }
  const PackSpec spec{.dtype = options.pack_dtype,
                      .quantize = options.quantize,
                      .keep = options.quantize_keep};
  if (whole && spec.quantize.kind != ops::Quantization::none) {
    const auto modules = module.named_modules();
    for (const std::string& keep : spec.keep) {
      const bool found = keep == "output" ||
                         std::any_of(modules.begin(), modules.end(),
                                     [&](const auto& m) { return keep_names(keep, m.first); });
      if (found) continue;
      std::string examples;  // the names of this model's first linear layers
      for (const auto& [name, m] : modules)
        if (dynamic_cast<const Linear*>(m) && std::count(examples.begin(), examples.end(), ',') < 2)
          examples += (examples.empty() ? "" : ", ") + name;
      LIBAI_THROW(InvalidArgument, "quantize keep: '", keep,
                  "' names no layer of the model (a module name, such as ", examples,
                  ", or the start of one up to a dot; or output for the LM head)");
    }
  }
  pack_for_inference(module, spec);
  if (releases_f32_weights(options)) release_packed(module, options);
}

// Note [Streaming packed loads]
// A load that packs and then releases the f32 weights (quantized copies, or bf16 panels,
// without keep_f32_weights: Note [Released weights]) held the whole f32 model before packing
// any of it: a 1.1 B Llama from Q4_0 peaked at 6 GB to end at 1.3 GB. Now its parameters are
// created uninitialized, so that no page of a weight is touched before its values are read,
// and load_parameters calls back after each parameter: a Linear whose weight has just been
// read (or an untied head's table) is packed as pack_for_inference would pack it (its keep
// entry, its group checks) and released at once, and the freed block goes back to the system
// (the pool would keep it). The load then holds the packed copies, what stays f32 (embeddings,
// norms, biases, kept layers) and one layer's f32 weight at a time. What would not be released
// (kept layers' f32 copies, a row-parallel rank's bf16 ones, tied tables) is packed after the
// load, as before; pack_for_inference skips what was released already. A
// quantized checkpoint (stored values) and a load that keeps its f32 weights pack after.
LayerContext load_context(const LoadOptions& options) {
  return {.device = options.device,
          .dtype = options.dtype,
          .tp = options.tp,
          .uninitialized_parameters = true};
}

std::function<void(const ParameterInfo&)> streaming_packer(Module& module, const LoadOptions& options,
                                                           const WeightSource& source) {
  if (!releases_f32_weights(options) || source.quantization().kind != ops::Quantization::none ||
      !options.device.is_cpu() || options.dtype != DType::f32)
    return {};
  // Linear layers, and output-only tables (an untied head, never looked up): what releases.
  auto packed = std::make_shared<std::map<std::string, std::pair<std::string, Module*>>>();
  for (auto& [name, m] : module.named_modules()) {
    auto* table = dynamic_cast<Embedding*>(m);
    if (dynamic_cast<Linear*>(m) || (table && table->output_only()))
      (*packed)[weight_name(name)] = {name, m};
  }
  const PackSpec spec{.dtype = options.pack_dtype,
                      .quantize = options.quantize,
                      .keep = options.quantize_keep,
                      .releasing = true};
  return [packed, spec](const ParameterInfo& info) {
    const auto it = packed->find(info.name);
    if (it == packed->end()) return;
    auto& [name, m] = it->second;
    if (!pack_module(name, *m, spec)) return;
    auto* linear = dynamic_cast<Linear*>(m);
    const int64_t freed = linear ? linear->release_weight()
                                 : dynamic_cast<Embedding*>(m)->release_weight();
    if (freed > 0) cpu_allocator().empty_cache();
  };
}

std::unique_ptr<Model> load_model(const std::filesystem::path& folder, const LoadOptions& options) {
  check_load_options(options);
  HfConfig config = HfConfig::load(folder);
  auto model = create_model(config, load_context(options), options.part);
  auto source = WeightSource::open(options.weights.empty() ? folder : options.weights, options.format);
  WeightMap map = is_libai_layout(source) ? identity_map(*model) : model->weight_map();
  // A part reads only the tensors its own parameters map to: the rest of the checkpoint
  // belongs to the other parts, not "unexpected".
  if (options.part) map.ignore("");
  load_parameters(*model, source, map, streaming_packer(*model, options, source));
  pack_loaded(*model, options, /*whole=*/!options.part, &source);
  return model;
}

}  // namespace libai::models
