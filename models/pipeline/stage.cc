#include "models/pipeline/stage.h"

#include "models/bert/bert.h"
#include "models/convert.h"
#include "models/gpt2/gpt2.h"
#include "models/pipeline/families.h"
#include "models/t5/t5.h"
#include "ops/ops.h"

namespace libai::models::pipeline {

namespace {

using StageFactory = std::unique_ptr<PipelineStage> (*)(const HfConfig&, const StageSpec&,
                                                        const LayerContext&);

// The one table of families that can be cut into stages.
struct StageFamily {
  const char* model_type;
  StageFactory make;
};
constexpr StageFamily kStageFamilies[] = {
    {"gpt2", make_gpt2_stage}, {"bert", make_bert_stage}, {"roberta", make_roberta_stage},
    {"t5", make_t5_stage},     {"mt5", make_mt5_stage},
};

const StageFamily* find_family(const std::string& model_type) {
  for (const auto& f : kStageFamilies)
    if (model_type == f.model_type) return &f;
  return nullptr;
}

}  // namespace

std::vector<StageSpec> contiguous_stages(const std::vector<int>& layers_per_stage) {
  LIBAI_CHECK(!layers_per_stage.empty(), "contiguous_stages: no stages");
  int total = 0;
  for (size_t i = 0; i < layers_per_stage.size(); ++i) {
    LIBAI_CHECK(layers_per_stage[i] > 0, "contiguous_stages: stage ", i, " has ",
                layers_per_stage[i], " layers (every stage needs at least one)");
    total += layers_per_stage[i];
  }
  std::vector<StageSpec> specs;
  int first = 0;
  for (int n : layers_per_stage) {
    specs.push_back({.first_layer = first, .last_layer = first + n, .num_layers = total});
    first += n;
  }
  return specs;
}

const WeightMap& PipelineStage::weight_map() const {
  static const WeightMap empty;
  return empty;
}

int pipeline_num_layers(const HfConfig& config) {
  const std::string type = config.model_type();
  if (type == "gpt2") return int(Gpt2Config(config).layers);
  if (type == "bert" || type == "roberta") return int(BertConfig(config, type == "roberta").layers);
  if (type == "vit") return int(config.get_int("num_hidden_layers", 12));
  if (type == "t5" || type == "mt5") {  // the defaults of models/t5/t5.cc
    const int64_t encoder = config.get_int("num_layers", type == "mt5" ? 8 : 6);
    return int(encoder + config.get_int("num_decoder_layers", encoder));
  }
  LIBAI_CHECK_KIND(Unsupported, false, config.path(), ": model_type \"", type,
                   "\" has no layers that a pipeline knows how to count");
  return 0;
}

std::unique_ptr<PipelineStage> create_stage(const HfConfig& config, const StageSpec& spec,
                                            const LayerContext& ctx) {
  const std::string type = config.model_type();
  const StageFamily* family = find_family(type);
  if (!family) {
    std::string known;
    for (const auto& f : kStageFamilies) known += str_cat(known.empty() ? "" : ", ", f.model_type);
    LIBAI_CHECK(false, config.path(), ": pipeline stages are not supported for model_type ",
                type.empty() ? "(missing)" : type, " (stage ", to_string(spec),
                "; supported: ", known, ")");
  }
  const int layers = pipeline_num_layers(config);
  LIBAI_CHECK(spec.num_layers == layers && 0 <= spec.first_layer &&
                  spec.first_layer < spec.last_layer && spec.last_layer <= spec.num_layers,
              config.path(), ": stage ", to_string(spec), " is out of range for a ", type,
              " model of ", layers,
              " layers (expected 0 <= first_layer < last_layer <= num_layers = ", layers, ")");
  return family->make(config, spec, ctx);
}

std::unique_ptr<PipelineStage> load_stage(const std::filesystem::path& folder,
                                          const StageSpec& spec, const LoadOptions& options) {
  HfConfig config = HfConfig::load(folder);
  LayerContext ctx{.device = options.device, .dtype = options.dtype, .tp = options.tp};
  auto stage = create_stage(config, spec, ctx);
  auto source =
      WeightSource::open(options.weights.empty() ? folder : options.weights, options.format);
  // load_parameters reads only the tensors the stage's own parameters map to. The rest of
  // the checkpoint belongs to the other stages (or to heads no stage runs): not "unexpected".
  WeightMap map = is_libai_layout(source) ? identity_map(*stage) : stage->weight_map();
  map.ignore("");
  load_parameters(*stage, source, map);
  return stage;
}

CausalLmInfo causal_lm_info(const HfConfig& config) {
  LIBAI_CHECK(config.model_type() == "gpt2", config.path(), ": model_type \"", config.model_type(),
              "\" is not a decoder-only model that pipeline generation supports (gpt2)");
  const Gpt2Config c(config);
  // Pads are masked out: any id in the vocabulary does (GPT-2 pads with eos, as its session).
  return {.vocab_size = c.vocab, .pad_id = c.eos < 0 ? 0 : c.eos, .max_positions = c.positions};
}

bool is_encoder_decoder(const HfConfig& config) {
  const std::string type = config.model_type();
  return type == "t5" || type == "mt5";
}

Seq2SeqLmInfo seq2seq_lm_info(const HfConfig& config) {
  LIBAI_CHECK(is_encoder_decoder(config), config.path(), ": model_type \"", config.model_type(),
              "\" is not an encoder-decoder model that pipeline generation supports (t5, mt5)");
  const T5Config c(config, config.model_type() == "mt5");
  return {.vocab_size = c.vocab, .pad_id = c.pad, .decoder_start_id = c.decoder_start};
}

const Tensor& require_activation(const Activations& in, const std::string& name, const char* family,
                                 const StageSpec& spec) {
  auto it = in.find(name);
  LIBAI_CHECK(it != in.end() && it->second.defined(), family, " stage ", to_string(spec),
              ": input \"", name, "\" is required");
  return it->second;
}

const Tensor& require_hidden_states(const Activations& in, int64_t hidden, const char* family,
                                    const StageSpec& spec) {
  const Tensor& h = require_activation(in, "hidden_states", family, spec);
  LIBAI_CHECK(h.dim() == 3 && h.size(2) == hidden, family, " stage ", to_string(spec),
              ": hidden_states should be [batch, seq, ", hidden, "], got ", shape_str(h.shape()));
  return h;
}

Tensor keep_mask(const Tensor& attention_mask) {
  if (!attention_mask.defined() || attention_mask.dtype() == DType::boolean) return attention_mask;
  return ops::ne(attention_mask, Tensor::zeros({}, attention_mask.dtype()));
}

}  // namespace libai::models::pipeline
