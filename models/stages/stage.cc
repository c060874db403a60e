#include "models/stages/stage.h"

#include "models/convert.h"
#include "models/family.h"
#include "ops/ops.h"
#include "runtime/autograd.h"

namespace libai::models::stages {

namespace {

// The family of `config` with inference stages, or an InvalidArgument naming the stage.
const Family& stage_family(const HfConfig& config, const StageSpec& spec) {
  const std::string type = config.model_type();
  const Family* family = find_family(type);
  if (!family || !family->make_stage)
    LIBAI_CHECK(false, config.path(), ": pipeline stages are not supported for model_type ",
                type.empty() ? "(missing)" : type, " (stage ", to_string(spec), "; supported: ",
                family_names([](const Family& f) { return f.make_stage != nullptr; }), ")");
  return *family;
}

// A model part as a stage: the part is a transparent child, so the stage's parameters have
// the part's names.
class PartStage : public PipelineStage {
 public:
  explicit PartStage(std::unique_ptr<Model> part)
      : PipelineStage(part->part()), part_(&add_module("", std::move(part))) {}
  std::unique_ptr<StageState> new_state() const override { return part_->new_decode_state(); }
  Activations forward(const Activations& in, StageState& state) override {
    return part_->decode_step(in, state);
  }
  const WeightMap& weight_map() const override { return part_->weight_map(); }

 private:
  Model* part_;
};

// A part of a family whose parts only run forward (encoders, classifiers): each micro-batch
// is one forward of the part (Note [Model parts]) without autograd, nothing kept between.
class ForwardStage : public PipelineStage {
 public:
  explicit ForwardStage(std::unique_ptr<Model> part)
      : PipelineStage(part->part()), part_(&add_module("", std::move(part))) {}
  std::unique_ptr<StageState> new_state() const override { return std::make_unique<StageState>(); }
  Activations forward(const Activations& in, StageState&) override {
    autograd::NoGradGuard no_grad;
    return part_->forward(in);
  }
  const WeightMap& weight_map() const override { return part_->weight_map(); }

 private:
  Model* part_;
};

}  // namespace

std::unique_ptr<PipelineStage> forward_stage(std::unique_ptr<Model> part) {
  return std::make_unique<ForwardStage>(std::move(part));
}

std::unique_ptr<PipelineStage> make_forward_stage(const HfConfig& config, const StageSpec& spec,
                                                  const LayerContext& ctx) {
  return forward_stage(family_of(config).head(config).make(config, ctx, spec));
}

std::unique_ptr<PipelineStage> part_stage(std::unique_ptr<Model> part) {
  LIBAI_CHECK(part->new_decode_state() != nullptr, part->config().path(), ": a ",
              part->config().model_type(), " ", task_name(part->task()),
              " model does not decode through pipeline stages");
  return std::make_unique<PartStage>(std::move(part));
}

std::unique_ptr<PipelineStage> make_part_stage(const HfConfig& config, const StageSpec& spec,
                                               const LayerContext& ctx) {
  return part_stage(family_of(config).head(config).make(config, ctx, spec));
}

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
  const Family* family = find_family(type);
  LIBAI_CHECK_KIND(Unsupported, family && family->num_layers, config.path(), ": model_type \"",
                   type, "\" has no layers that a pipeline knows how to count");
  return family->num_layers(config);
}

std::unique_ptr<PipelineStage> create_stage(const HfConfig& config, const StageSpec& spec,
                                            const LayerContext& ctx) {
  const Family& family = stage_family(config, spec);
  const int layers = family.num_layers(config);
  LIBAI_CHECK(spec.num_layers == layers && 0 <= spec.first_layer &&
                  spec.first_layer < spec.last_layer && spec.last_layer <= spec.num_layers,
              config.path(), ": stage ", to_string(spec), " is out of range for a ",
              config.model_type(), " model of ", layers,
              " layers (expected 0 <= first_layer < last_layer <= num_layers = ", layers, ")");
  return family.make_stage(config, spec, ctx);
}

std::unique_ptr<PipelineStage> load_stage(const std::filesystem::path& folder,
                                          const StageSpec& spec, const LoadOptions& options) {
  check_load_options(options);
  HfConfig config = HfConfig::load(folder);
  auto stage = create_stage(config, spec, load_context(options));
  auto source =
      WeightSource::open(options.weights.empty() ? folder : options.weights, options.format);
  // load_parameters reads only the tensors the stage's own parameters map to. The rest of
  // the checkpoint belongs to the other stages (or to heads no stage runs): not "unexpected".
  WeightMap map = is_libai_layout(source) ? identity_map(*stage) : stage->weight_map();
  map.ignore("");
  load_parameters(*stage, source, map, streaming_packer(*stage, options, source));
  pack_loaded(*stage, options, /*whole=*/false, &source);
  return stage;
}

namespace {

// The family of `config` when it generates that way, else nullptr.
const Family* generating(const HfConfig& config, GenerationKind kind) {
  const Family* family = find_family(config.model_type());
  return family && family->generates == kind ? family : nullptr;
}

template <GenerationKind kind>
bool generates(const Family& family) {
  return family.generates == kind;
}

}  // namespace

CausalLmInfo causal_lm_info(const HfConfig& config) {
  const Family* family = generating(config, GenerationKind::causal);
  LIBAI_CHECK(family, config.path(), ": model_type \"", config.model_type(),
              "\" is not a decoder-only model that pipeline generation supports (",
              family_names(generates<GenerationKind::causal>), ")");
  const GenerationInfo info = family->generation(config);
  return {.vocab_size = info.vocab_size, .pad_id = info.pad_id, .max_positions = info.max_positions};
}

bool is_decoder_only(const HfConfig& config) {
  return generating(config, GenerationKind::causal) != nullptr;
}

bool is_encoder_decoder(const HfConfig& config) {
  return generating(config, GenerationKind::seq2seq) != nullptr;
}

Seq2SeqLmInfo seq2seq_lm_info(const HfConfig& config) {
  const Family* family = generating(config, GenerationKind::seq2seq);
  LIBAI_CHECK(family, config.path(), ": model_type \"", config.model_type(),
              "\" is not an encoder-decoder model that pipeline generation supports (",
              family_names(generates<GenerationKind::seq2seq>), ")");
  const GenerationInfo info = family->generation(config);
  return {.vocab_size = info.vocab_size, .pad_id = info.pad_id, .decoder_start_id = info.decoder_start_id};
}

}  // namespace libai::models::stages
