#include "actors/jobs/config_job.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <sstream>

#include "actors/jobs/model_jobs.h"
#include "actors/jobs/pipeline_service.h"
#include "actors/synthetic.h"
#include "actors/synthetic_train.h"
#include "schedule/train_programs.h"
#include "models/gguf.h"
#include "models/hf_config.h"
#include "models/weights.h"
#include "models/pipelines/pipelines.h"
#include "models/tokenizers/tokenizer.h"
#include "runtime/config/unimplemented.h"
#include "runtime/device_profile.h"
#include "runtime/error.h"
#include "runtime/logging.h"
#include "runtime/threads.h"

namespace libai::actors {

namespace mp = models::stages;

ConfigJob::ConfigJob(const config::Config& cfg, int nodes) : plan::RunJob(cfg, nodes) {}

std::vector<wire::DeviceProfile> ConfigJob::profile_devices(int node_rank) {
  return wire::to_wire(measure_devices(node_rank));
}

void ConfigJob::plan(wire::Assignment& assignment) {
  if (searching_) {
    std::istringstream lines(search_layout(assignment));
    for (std::string line; std::getline(lines, line);) logger("run")->info("{}", line);
    assignment.config_yaml = cfg_.to_yaml();
  }
  shape_ = shape();
  // Measured when the cluster formed, unless the config fixes them.
  if (!shape_->local_hop_seconds) shape_->local_hop_seconds = assignment.local_hop_seconds;
  if (!shape_->remote_hop_seconds) shape_->remote_hop_seconds = assignment.remote_hop_seconds;
  choose_stage_precision(assignment);
  const std::vector<DeviceProfile> devices = wire::from_wire(assignment.devices);
  plan_ = compile_job_plan(*shape_, devices);
  plan::check_job_plan(*plan_, devices, per_node_);
  assignment.stage_of.assign(plan_->stage_of.begin(), plan_->stage_of.end());
  // compile_plan numbers devices as the mesh [dp, pp, tp] (tp fastest), as layout() does: stage
  // s runs on pipeline slot stages[s].slot, and a slot's tp ranks are tp consecutive devices,
  // on one node since devices_per_node is a multiple of tp.
  assignment.device_of_stage.clear();
  // (An interleaved training plan lists pp x chunks virtual stages: the first pp place them.)
  for (int s = 0; s < pp_; ++s) assignment.device_of_stage.push_back(plan_->stages[size_t(s)].slot);
}

std::string ConfigJob::search_layout(const wire::Assignment& assignment) {
  return search_layout(wire::from_wire(assignment.devices), assignment.local_hop_seconds,
                       assignment.remote_hop_seconds);
}

const schedule::Plan& ConfigJob::chosen_plan() const {
  LIBAI_CHECK(plan_.has_value(), "the job has no plan yet: node 0 plans it when the cluster forms");
  return *plan_;
}

PipelineLayout ConfigJob::layout(const wire::Assignment& assignment) {
  if (!assignment.config_yaml.empty() && assignment.config_yaml != cfg_.to_yaml())
    read(config::Config::parse(assignment.config_yaml, "node 0's config"));
  LIBAI_CHECK(int(assignment.stage_of.size()) == num_layers_, "the assignment splits ",
              assignment.stage_of.size(), " layers but the model has ", num_layers_);
  // It came over the network: every layer on a stage of this job, in order, none left empty
  // (a stage index out of range would index past the per-stage tables below).
  const int64_t stages = training_ ? int64_t(pp_) * chunks_ : int64_t(pp_);
  std::vector<int> layers_on(size_t(stages), 0);
  for (size_t l = 0; l < assignment.stage_of.size(); ++l) {
    const int64_t s = assignment.stage_of[l];
    LIBAI_CHECK(s >= 0 && s < stages, "the assignment puts layer ", l, " on stage ", s,
                " of a job with ", stages, " stages");
    LIBAI_CHECK(l == 0 || s >= assignment.stage_of[l - 1], "the assignment puts layer ", l,
                " on stage ", s, " after layer ", l - 1, " on stage ", assignment.stage_of[l - 1],
                ": stages hold contiguous layers, in order");
    ++layers_on[size_t(s)];
  }
  for (int64_t s = 0; s < stages; ++s)
    LIBAI_CHECK(layers_on[size_t(s)] > 0, "the assignment leaves stage ", s, " without layers");
  if (!assignment.device_of_stage.empty()) {
    std::vector<int> slots(assignment.device_of_stage.begin(), assignment.device_of_stage.end());
    std::sort(slots.begin(), slots.end());
    bool permutation = int(slots.size()) == pp_;
    for (int s = 0; permutation && s < pp_; ++s) permutation = slots[size_t(s)] == s;
    LIBAI_CHECK(permutation, "the assignment places ", assignment.device_of_stage.size(),
                " stages on pipeline slots that are not a permutation of the ", pp_, " slots");
  }
  PipelineLayout layout = make_layout({.dp = dp_, .pp = pp_, .tp = tp_}, num_groups_);
  layout.by_arrival = serving_;  // Note [Serve jobs]
  for (SlotSpec& slot : layout.slots) {
    const int position = assignment.device_of_stage.empty()
                             ? slot.stage
                             : assignment.device_of_stage[size_t(slot.stage)];
    const int device = (slot.replica * pp_ + position) * tp_ + slot.rank;
    slot.node = device / per_node_;
    slot.device = Device::cpu(device % per_node_);
    slot.slowdown = slowdown_[size_t(device)];
  }
  return layout;
}

std::optional<TrainPrograms> ConfigJob::train_programs(const wire::Assignment&) {
  if (!training_) return std::nullopt;
  return actors::train_programs(schedule_, pp_, num_groups_, chunks_);
}

TrainComputeFactory ConfigJob::train_compute(const PipelineLayout&, const wire::Assignment& assignment,
                                             const std::shared_ptr<comm::Communicator>&) {
  // The plan's split: layers per virtual stage (chunk c of stage d is virtual stage c pp + d).
  std::vector<int> layers_of(size_t(pp_ * chunks_), 0);
  for (int64_t v : assignment.stage_of) {
    LIBAI_CHECK(v >= 0 && v < pp_ * chunks_, "the assignment puts a layer on virtual stage ", v,
                " of ", pp_ * chunks_);
    ++layers_of[size_t(v)];
  }
  const SyntheticTrainCompute::Options base{.forward_seconds = 0,
                                            .backward_seconds = 0,
                                            .chunk_forward_seconds = {},
                                            .chunk_backward_seconds = {},
                                            .device = 0,
                                            .devices = pp_,
                                            .chunks = chunks_,
                                            .elements = elements_,
                                            .fail_forward_at = {}};
  const int pp = pp_, chunks = chunks_;
  const double layer_seconds = layer_seconds_, backward_factor = backward_factor_;
  return [=](const SlotSpec& slot) -> std::shared_ptr<TrainStageCompute> {
    auto options = base;
    options.device = slot.stage;
    for (int c = 0; c < chunks; ++c) {
      const double forward = layers_of[size_t(c * pp + slot.stage)] * layer_seconds;
      options.chunk_forward_seconds.push_back(forward);
      options.chunk_backward_seconds.push_back(forward * backward_factor);
    }
    return std::make_shared<SyntheticTrainCompute>(options);
  };
}

void ConfigJob::train(TrainClient& client, const PipelineLayout&) {
  train_results_ = run_synthetic_training(client, steps_);
}

ComputeFactory ConfigJob::compute(const PipelineLayout& layout, const wire::Assignment& assignment) {
  for (int d = 0; d < per_node_; ++d)
    if (kind_ != JobKind::synthetic && thread_budget(Device::cpu(d)) != threads_)
      set_thread_budget(Device::cpu(d), threads_);
  const std::vector<int> stage_of(assignment.stage_of.begin(), assignment.stage_of.end());
  if (kind_ == JobKind::synthetic) {
    std::vector<int> layers_of(size_t(pp_), 0);
    for (int s : stage_of) ++layers_of[size_t(s)];
    const double per_layer = layer_seconds_;
    return [layers_of, per_layer](const SlotSpec& slot) -> std::shared_ptr<StageCompute> {
      return std::make_shared<SyntheticCompute>(per_layer * layers_of[size_t(slot.stage)]);
    };
  }
  return model_stage_factory(model_, layout, stage_of, DType::f32, quantize_, quantize_keep_,
                             precision_of_stages(assignment));
}

void ConfigJob::drive(PipelineClient& client, const PipelineLayout& layout) {
  if (kind_ == JobKind::synthetic) {
    run_synthetic_job(client, layout, steps_);
    return;
  }
  if (serving_) {
    LIBAI_CHECK(server_ != nullptr, "a serve job runs under `libai-actor serve` (or serve_cluster)");
    ServiceOptions options;
    options.model_dir = model_;
    options.max_batch = max_batch_;
    options.max_queue = max_queue_;
    auto service = make_pipeline_service(client, layout, model_, options);
    server_(*service);
    return;  // the service ends its requests, then each group's done packet ends the stages
  }
  const auto hf = models::HfConfig::load(model_);
  if (kind_ == JobKind::generate) {
    models::generation::GenerationConfig g;
    g.max_new_tokens = cfg_.get_or<int64_t>("job.max_new_tokens", 20);
    g.min_new_tokens = cfg_.get_or<int64_t>("job.min_new_tokens", 0);
    g.do_sample = cfg_.get_or<bool>("job.do_sample", false);
    g.temperature = cfg_.get_or<double>("job.temperature", 1.0);
    g.top_k = cfg_.get_or<int64_t>("job.top_k", 50);
    g.top_p = cfg_.get_or<double>("job.top_p", 1.0);
    g.seed = cfg_.get_or<uint64_t>("job.seed", 0);
    g.num_beams = cfg_.get_or<int64_t>("job.num_beams", 1);
    g.length_penalty = cfg_.get_or<double>("job.length_penalty", 1.0);
    g.num_return_sequences = cfg_.get_or<int64_t>("job.num_return_sequences", 1);
    g.repetition_penalty = cfg_.get_or<double>("job.repetition_penalty", 1.0);
    g.no_repeat_ngram_size = cfg_.get_or<int64_t>("job.no_repeat_ngram_size", 0);
    models::pipelines::complete_generation_config(model_, hf.json(), g);
    const auto groups = split_into_groups(prompts_, num_groups_);
    auto results = run_generation(client, layout, hf, groups, g);
    generated_.clear();
    generated_text_.clear();
    std::unique_ptr<tokenizers::Tokenizer> tok;
    try {
      tok = tokenizers::load_tokenizer(model_);
    } catch (const Error&) {
      // No tokenizer: ids only.
    }
    for (auto& group : results)
      for (auto& per_prompt : group) {
        generated_.emplace_back();
        for (auto& seq : per_prompt) {
          generated_.back().push_back(seq.tokens);
          generated_text_.push_back(
              tok ? tok->decode(std::vector<int32_t>(seq.tokens.begin(), seq.tokens.end()), true)
                  : std::string());
        }
      }
    return;
  }
  // Encoding.
  auto tok = tokenizers::load_tokenizer(model_);
  const size_t max_length = models::pipelines::embedding_max_length(model_, hf);
  std::vector<models::TensorMap> batches;
  std::vector<Tensor> masks;
  for (size_t start = 0; start < texts_.size(); start += size_t(micro_batch_size_)) {
    std::vector<std::string> chunk(texts_.begin() + std::ptrdiff_t(start),
                                   texts_.begin() + std::ptrdiff_t(std::min(
                                                        texts_.size(), start + size_t(micro_batch_size_))));
    auto enc = models::pipelines::encode_batch(*tok, chunk, max_length);
    models::TensorMap batch{{"input_ids", enc.input_ids}, {"attention_mask", enc.attention_mask}};
    if (enc.token_type_ids.defined()) batch["token_type_ids"] = enc.token_type_ids;
    batches.push_back(std::move(batch));
    masks.push_back(enc.attention_mask);
  }
  auto hidden = run_encoding(client, layout, batches);
  embeddings_.clear();
  for (size_t b = 0; b < hidden.size(); ++b)
    for (auto& e : models::pipelines::mean_pool_normalize(hidden[b], masks[b]))
      embeddings_.push_back(std::move(e));
}

}  // namespace libai::actors
