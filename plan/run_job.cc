#include "plan/run_job.h"

#include <algorithm>
#include <set>

#include "models/gguf.h"
#include "models/hf_config.h"
#include "models/stages/stage.h"
#include "models/pipelines/pipelines.h"
#include "models/tokenizers/tokenizer.h"
#include "models/weights.h"
#include "plan/timed_layers.h"
#include "runtime/config/unimplemented.h"
#include "runtime/error.h"
#include "runtime/threads.h"
#include "schedule/train_programs.h"

namespace libai::plan {

namespace mp = models::stages;

RunJob::RunJob(const config::Config& cfg, int nodes) : nodes_(nodes) { read(cfg); }

void RunJob::read(const config::Config& cfg) {
  cfg_ = cfg;
  prompts_.clear();  // read again with node 0's config (layout()) or the search's choice
  const std::string target = cfg.get_or<std::string>("job._target_", "train");
  serving_ = target == "serve";
  if (target == "generate" || serving_)
    kind_ = JobKind::generate;
  else if (target == "encode")
    kind_ = JobKind::encode;
  else if (target == "synthetic" || target == "synthetic_train")
    kind_ = JobKind::synthetic;
  else
    LIBAI_THROW(InvalidArgument, "job._target_ is '", target,
                "': `libai-actor run` runs generate, encode, synthetic or synthetic_train jobs "
                "(`libai-actor serve` runs serve jobs)");
  training_ = target == "synthetic_train";
  // Keys this runtime accepts but a run job cannot act on (amp, ZeRO, what-if keys, ...).
  config::check_implemented(cfg, config::Purpose::inference_job);
  dp_ = cfg.get_or<int>("train.dist.data_parallel_size", 1);
  tp_ = cfg.get_or<int>("train.dist.tensor_parallel_size", 1);
  pp_ = cfg.get_or<int>("train.dist.pipeline_parallel_size", 1);
  per_node_ = cfg.get_or<int>("train.cluster.devices_per_node", 1);
  threads_ = cfg.get_or<int>("train.cluster.device_threads", 1);
  balance_ = cfg.get_or<std::string>("train.dist.balance", "uniform");
  const int devices = nodes_ * per_node_;
  // Note [Auto parallel of a run job]: until node 0's search, one replica of one stage stands
  // in (what the devices are profiled with).
  searching_ = cfg.get_or<bool>("graph.auto_parallel.enabled", false);
  if (searching_) {
    LIBAI_CHECK(target == "generate" || target == "encode",
                "graph.auto_parallel.enabled: a run job searches its layout for generate and "
                "encode jobs; a ", target, " job takes train.dist from the config (set "
                "auto_parallel off)");
    LIBAI_CHECK(per_node_ % tp_ == 0, "train.dist.tensor_parallel_size ", tp_,
                " does not divide train.cluster.devices_per_node ", per_node_);
    dp_ = 1;
    pp_ = 1;
  }
  LIBAI_CHECK(searching_ || dp_ * tp_ * pp_ == devices, "train.dist: data_parallel_size ", dp_,
              " x tensor_parallel_size ", tp_, " x pipeline_parallel_size ", pp_, " = ",
              dp_ * tp_ * pp_, " slots, but the cluster has ", nodes_, " node(s) x ",
              "train.cluster.devices_per_node ", per_node_, " = ", devices, " devices");
  LIBAI_CHECK(tp_ == 1 || per_node_ % tp_ == 0, "train.dist.tensor_parallel_size ", tp_,
              " does not divide train.cluster.devices_per_node ", per_node_,
              ": the ranks of a stage must share a node");
  slowdown_ = cfg.get_or<std::vector<double>>("train.cluster.device_slowdown",
                                              std::vector<double>(size_t(devices), 1.0));
  LIBAI_CHECK(int(slowdown_.size()) == devices, "train.cluster.device_slowdown has ",
              slowdown_.size(), " entries but the cluster has ", devices, " devices");
  check_profile_names();

  read_stage_precision(cfg);
  if (training_) {
    read_synthetic_training(cfg);
  } else if (kind_ == JobKind::synthetic) {
    auto layers = cfg.get_or<std::optional<int>>("train.dist.pipeline_num_layers", std::nullopt);
    LIBAI_CHECK(layers.has_value(), "a synthetic job needs train.dist.pipeline_num_layers");
    num_layers_ = *layers;
    layer_seconds_ = cfg.get_or<double>("job.layer_seconds", 0.001);
    LIBAI_CHECK(layer_seconds_ >= 0, "job.layer_seconds must not be negative");
    num_groups_ = cfg.get_or<int>("job.num_micro_batches", pp_ * dp_);
    steps_ = cfg.get_or<int>("job.steps", 1);
  } else {
    const auto weights = cfg.get_or<std::string>("model.weights", "");
    LIBAI_CHECK(!weights.empty(), "model.weights is not set: a ", target,
                " job needs a model folder");
    model_ = weights;
    quantize_ = ops::parse_quantization(cfg.get_or<std::string>("model.quantize", "none"),
                                        "model.quantize");
    quantize_keep_ = cfg.get_or<std::vector<std::string>>("model.quantize_keep", {});
    LIBAI_CHECK(quantize_.kind != ops::Quantization::none || !precisions_.empty() ||
                    quantize_keep_.empty(),
                "model.quantize_keep is set but model.quantize is none");
    // A quantized checkpoint (convert --quantize) runs quantized as stored: the plan prices it
    // so. (Its safetensors header says; a GGUF file is never one.)
    if (quantize_.kind == ops::Quantization::none && !models::is_gguf(model_))
      quantize_ = models::WeightSource::open(model_).quantization();
    LIBAI_CHECK(precisions_.empty() || quantize_.kind == ops::Quantization::none,
                cfg.node("train.dist.stage_precision").describe(), ": ", model_.string(),
                " is a quantized checkpoint (", ops::quantization_name(quantize_),
                ", convert --quantize), which runs as stored; give stage precisions with the "
                "f32 model");
    const auto hf = models::HfConfig::load(model_);
    num_layers_ = mp::pipeline_num_layers(hf);
    // The model fixes the layer count; a different train.dist.pipeline_num_layers would be
    // ignored, so it is an error.
    if (auto given = cfg.get_or<std::optional<int>>("train.dist.pipeline_num_layers", std::nullopt))
      LIBAI_CHECK(*given == num_layers_, cfg.node("train.dist.pipeline_num_layers").describe(),
                  " = ", *given, ": the model in ", model_.string(), " has ", num_layers_,
                  " pipeline layers (set it to null: a ", target, " job takes it from the model)");
    auto tokenizer = [&] { return tokenizers::load_tokenizer(model_); };
    if (serving_) {
      read_serving(cfg, hf);
    } else if (kind_ == JobKind::generate) {
      prompt_texts_ = cfg.get_or<std::vector<std::string>>("job.prompts", {});
      if (!prompt_texts_.empty()) {
        auto tok = tokenizer();
        for (const auto& text : prompt_texts_) {
          auto ids = tok->encode(text).ids;
          LIBAI_CHECK(!ids.empty(), "job.prompts: the prompt '", text, "' has no tokens");
          prompts_.emplace_back(ids.begin(), ids.end());
        }
      }
      for (auto& ids : cfg.get_or<std::vector<std::vector<int64_t>>>("job.prompt_ids", {}))
        prompts_.push_back(ids);
      LIBAI_CHECK(!prompts_.empty(), "a generate job needs job.prompts or job.prompt_ids");
      encoder_decoder_ = mp::is_encoder_decoder(hf);
      // A model that cannot generate through stages is named here, before any node loads it.
      if (encoder_decoder_)
        mp::seq2seq_lm_info(hf);
      else
        mp::causal_lm_info(hf);
      num_groups_ = std::min<int>(cfg.get_or<int>("job.num_groups", pp_ * dp_), int(prompts_.size()));
    } else {
      texts_ = cfg.get_or<std::vector<std::string>>("job.texts", {});
      LIBAI_CHECK(!texts_.empty(), "an encode job needs job.texts");
      micro_batch_size_ = cfg.get_or<int>("job.micro_batch_size", 8);
      LIBAI_CHECK(micro_batch_size_ >= 1, "job.micro_batch_size must be at least 1");
      num_groups_ = int((texts_.size() + size_t(micro_batch_size_) - 1) / size_t(micro_batch_size_));
    }
  }
  if (kind_ == JobKind::generate) steps_ = int(cfg.get_or<int64_t>("job.max_new_tokens", 20));
  LIBAI_CHECK(steps_ >= 1, "job.max_new_tokens must be at least 1, got ", steps_);
  if (kind_ == JobKind::encode) steps_ = 1;
  LIBAI_CHECK(pp_ <= num_layers_, "train.dist.pipeline_parallel_size ", pp_, " is more than the ",
              num_layers_, " layers of the model");
  LIBAI_CHECK(num_groups_ >= dp_, "the job has ", num_groups_,
              " groups of work but train.dist.data_parallel_size is ", dp_);
}

// Note [Serve jobs]: `job._target_: serve` is a generate job without prompts: node 0 runs a
// pipeline service (actors/pipeline_service.h) over the stages, one lane per group, until the
// server it is given returns. The stages take inputs by arrival (Note [Stage programs]). The
// plan is made for the load the config describes: job.max_batch rows over job.num_groups
// lanes, prompts of job.prompt_tokens and job.max_new_tokens steps (what one batch of
// requests would cost; the split does not change while serving).
void RunJob::read_serving(const config::Config& cfg, const models::HfConfig& hf) {
  LIBAI_CHECK(!cfg.has("job.prompts") && !cfg.has("job.prompt_ids"),
              "a serve job takes its prompts from requests: remove job.prompts / job.prompt_ids");
  mp::causal_lm_info(hf);  // decoder-only, named here before any node loads it
  // A key a serve job does not read would be ignored silently: each is an error naming it.
  static const std::set<std::string> known = {"_target_", "max_batch", "num_groups", "max_queue",
                                              "prompt_tokens", "max_new_tokens"};
  for (const auto& [key, value] : cfg.root().find_path("job")->entries())
    LIBAI_CHECK(known.count(key), value.describe(), ": a serve job does not read job.", key,
                " (it reads job.max_batch, num_groups, max_queue, prompt_tokens, max_new_tokens; "
                "a request sets its own sampling)");
  num_groups_ = cfg.get_or<int>("job.num_groups", pp_ * dp_);
  LIBAI_CHECK(num_groups_ >= 1, "job.num_groups must be at least 1, got ", num_groups_);
  max_batch_ = cfg.get_or<int>("job.max_batch", 16);
  LIBAI_CHECK(max_batch_ >= num_groups_, "job.max_batch ", max_batch_,
              " must be at least job.num_groups ", num_groups_, " (a row per lane)");
  max_queue_ = cfg.get_or<int>("job.max_queue", 256);
  LIBAI_CHECK(max_queue_ >= 0, "job.max_queue must not be negative, got ", max_queue_);
  prompt_tokens_ = cfg.get_or<int>("job.prompt_tokens", 32);
  LIBAI_CHECK(prompt_tokens_ >= 1, "job.prompt_tokens must be at least 1, got ", prompt_tokens_);
}

void RunJob::check_profile_names() const {
  const config::Node* overrides = cfg_.root().find_path("train.cluster.profiles");
  if (overrides == nullptr || overrides->is_null()) return;
  LIBAI_CHECK(overrides->is_map(), overrides->describe(),
              ": expected a map from device names (node0:cpu:0, ...) to profile fields");
  for (const auto& [name, fields] : overrides->entries()) {
    bool known = false;
    for (int k = 0; k < nodes_ && !known; ++k)
      for (int d = 0; d < per_node_ && !known; ++d) known = name == str_cat("node", k, ":cpu:", d);
    LIBAI_CHECK(known, fields.describe(), ": '", name,
                "' is not a device of the cluster; its devices are node<k>:cpu:<d> for k < ",
                nodes_, " (nodes) and d < ", per_node_,
                " (train.cluster.devices_per_node), e.g. node0:cpu:0");
  }
}

DeviceProfile RunJob::with_overrides(DeviceProfile p) const {
  const config::Node* overrides = cfg_.root().find_path("train.cluster.profiles");
  if (overrides && overrides->is_map())
    if (const config::Node* fields = overrides->find(p.name)) apply_profile_overrides(p, *fields);
  return p;
}

std::vector<DeviceProfile> RunJob::measure_devices(int node_rank) const {
  std::vector<DeviceProfile> out;
  if (per_node_ * threads_ > hardware_cores()) {
    // More device threads than cores: model stages would fight for them, so that is refused;
    // synthetic stages sleep, so their devices may share cores: each is this node's first
    // device, measured once, at its emulated slow-down.
    LIBAI_CHECK(kind_ == JobKind::synthetic, "train.cluster.devices_per_node ", per_node_,
                " x train.cluster.device_threads ", threads_, " = ", per_node_ * threads_,
                " compute threads, but node ", node_rank, " has ", hardware_cores(), " cores");
    const DeviceProfile measured = profile_cpu_device(Device::cpu(0), 1);
    for (int d = 0; d < per_node_; ++d) {
      DeviceProfile p = emulated_device(measured, node_rank, d);
      time_layer(Device::cpu(0), p.slowdown, p);
      out.push_back(with_overrides(p));
    }
    return out;
  }
  for (int d = 0; d < per_node_; ++d) {
    const int global = node_rank * per_node_ + d;
    DeviceProfile p = profile_cpu_device(Device::cpu(d), threads_, slowdown_[size_t(global)]);
    p.name = str_cat("node", node_rank, ":cpu:", d);
    time_layer(Device::cpu(d), slowdown_[size_t(global)], p);  // Note [Timed layers]
    out.push_back(with_overrides(p));
  }
  return out;
}

// Note [Timed layers]
// The planner balances stages by each device's time for the job's layers. A synthetic job
// times one of its layers on every device when the node joins (the fastest of nine, the
// stage's emulated slow-down included): that is the cost the stages will pay. Not the median:
// the other nodes profile meanwhile, which on a shared host delays a sleeping stage's wake-ups
// by milliseconds; the delays only add, so the minimum is the cost. A model job times its
// layer 1 (time_model_layer: the job's micro-batch or prefill, and a decoding step at the mean
// context) and the plan scales the roofline of every layer, the embedding and the head on
// that device by the timed layer's ratio to its own roofline (Note [Calibrated layer costs]
// in plan/run_plan.cc): the roofline keeps the shape of the costs (which layer, which step), the
// timing brings the per-op overheads no roofline counts. Models with fewer than 3 layers and
// T5 are not timed. A what-if override of the rates (train.cluster.profiles) drops a timed
// layer unless it sets layer_seconds.

void RunJob::time_layer(Device device, double slowdown, DeviceProfile& profile) const {
  if (kind_ == JobKind::synthetic) {
    profile.layer_seconds = time_synthetic_layer(layer_seconds_, slowdown);
    return;
  }
  const JobShape job = shape();
  const int64_t context = job.input_tokens + std::max<int64_t>(job.max_new_tokens, 1) / 2;
  // Precisions per stage: the layer at each precision priced (Note [Precision per pipeline
  // stage]), so that every slot's costs, in whichever precision it ends up, are timed ones.
  for (const ops::WeightPrecision& p : precisions_)
    if (auto t = time_model_layer(model_, device, slowdown, job.rows, job.input_tokens, context,
                                  /*repetitions=*/3, p))
      profile.timings.push_back({ops::weight_precision_name(p), t->forward_seconds, t->step_seconds});
  if (!precisions_.empty()) return;
  if (auto t = time_model_layer(model_, device, slowdown, job.rows, job.input_tokens, context,
                                /*repetitions=*/3, {.quantize = quantize_})) {
    profile.layer_seconds = t->forward_seconds;
    profile.layer_step_seconds = t->step_seconds;
  }
}

std::vector<DeviceProfile> RunJob::devices_like_this_node() const {
  DeviceProfile measured = profile_cpu_device(Device::cpu(0), threads_);
  time_layer(Device::cpu(0), 1.0, measured);
  std::vector<DeviceProfile> out;
  for (int k = 0; k < nodes_; ++k)
    for (int d = 0; d < per_node_; ++d) out.push_back(with_overrides(emulated_device(measured, k, d)));
  return out;
}

DeviceProfile RunJob::emulated_device(const DeviceProfile& measured, int node, int d) const {
  DeviceProfile p = measured;
  const double slowdown = slowdown_[size_t(node * per_node_ + d)];
  p.name = str_cat("node", node, ":cpu:", d);
  p.matmul_gflops /= slowdown;
  p.memory_bandwidth_gbs /= slowdown;
  p.layer_seconds *= slowdown;
  p.layer_step_seconds *= slowdown;
  for (auto& t : p.timings) t.layer_seconds *= slowdown, t.layer_step_seconds *= slowdown;
  p.slowdown = slowdown;
  return p;
}

JobShape RunJob::shape() const {
  JobShape job;
  job.local_hop_seconds =
      cfg_.get_or<std::optional<double>>("train.cluster.local_hop_seconds", std::nullopt);
  job.remote_hop_seconds =
      cfg_.get_or<std::optional<double>>("train.cluster.remote_hop_seconds", std::nullopt);
  job.kind = kind_;
  job.model = model_;
  job.quantize = quantize_;
  job.precisions = precisions_;
  job.slot_precision = slot_precision_;
  job.dp = dp_;
  job.pp = pp_;
  job.tp = tp_;
  job.devices_per_node = per_node_;
  job.num_layers = num_layers_;
  job.num_groups = num_groups_;
  // A training job's steps are not decoding steps: the plan covers one forward of each
  // micro-batch (its split and devices; Note [Synthetic training jobs]).
  job.steps = training_ ? 1 : steps_;
  job.layer_seconds = layer_seconds_;
  job.training = training_;  // Note [Synthetic training jobs]
  job.schedule = schedule_;
  job.chunks = chunks_;
  job.backward_factor = backward_factor_;
  job.balance = balance_;
  job.custom_stage_ids = cfg_.get_or<std::optional<std::vector<int64_t>>>(
      "train.dist.custom_pipeline_stage_id", std::nullopt);
  if (serving_) {
    job.input_tokens = prompt_tokens_;
    job.rows = (max_batch_ + num_groups_ - 1) / num_groups_;
    job.max_new_tokens = steps_;
  } else if (kind_ == JobKind::generate) {
    size_t longest = 1;
    for (const auto& p : prompts_) longest = std::max(longest, p.size());
    job.input_tokens = int64_t(longest);
    // Rows per prompt: its beams, or the sequences sampled for it.
    const int64_t per_prompt =
        std::max<int64_t>({1, cfg_.get_or<int64_t>("job.num_beams", 1),
                           cfg_.get_or<int64_t>("job.num_return_sequences", 1)});
    const int64_t prompts = int64_t(prompts_.size()), groups = num_groups_;
    job.rows = (prompts + groups - 1) / groups * per_prompt;
    job.max_new_tokens = steps_;
  } else if (kind_ == JobKind::encode) {
    const auto hf = models::HfConfig::load(model_);
    auto tok = tokenizers::load_tokenizer(model_);
    const auto encoded = models::pipelines::encode_batch(
        *tok, texts_, models::pipelines::embedding_max_length(model_, hf));
    job.input_tokens = encoded.input_ids.shape()[1];
    job.rows = std::min<int64_t>(micro_batch_size_, int64_t(texts_.size()));
  }
  return job;
}

// Note [Synthetic training jobs]
// job._target_: synthetic_train runs training programs through training stage actors over
// synthetic stages (actors/synthetic_train.h). The model is train.dist.pipeline_num_layers
// layers (default: one per virtual stage) of job.layer_seconds of forward each per
// micro-batch on a device of slow-down 1 (default: job.forward_seconds per stage's share of
// them), and each layer's backward takes job.backward_factor times its forward (default
// job.backward_seconds / job.forward_seconds, i.e. 2). Node 0 plans the split like any job's
// (train.dist.balance: uniform, or measured from each device's timed layer, which includes its
// train.cluster.device_slowdown), as a TRAINING plan of job.schedule: the partition balances
// forward + backward, the prediction is one step's timeline. Each stage then sleeps its
// chunk's layers x job.layer_seconds (backward: x job.backward_factor), stretched by its
// device's slow-down (EmulatedSpeed in the stage actor).
void RunJob::read_synthetic_training(const config::Config& cfg) {
  schedule_ = cfg.get_or<std::string>("job.schedule", "1f1b");
  chunks_ = cfg.get_or<int>("job.chunks", schedule_ == "interleaved" ? 2 : 1);
  LIBAI_CHECK(chunks_ >= 1, "job.chunks must be at least 1, got ", chunks_);
  num_layers_ = cfg.get_or<int>("train.dist.pipeline_num_layers", pp_ * chunks_);
  LIBAI_CHECK(num_layers_ >= pp_ * chunks_, "train.dist.pipeline_num_layers ", num_layers_,
              " < ", pp_, " pipeline stages x ", chunks_, " chunks");
  const double forward = cfg.get_or<double>("job.forward_seconds", 0.002);
  const double backward = cfg.get_or<double>("job.backward_seconds", 2 * forward);
  LIBAI_CHECK(forward >= 0 && backward >= 0,
              "job.forward_seconds and job.backward_seconds must not be negative");
  layer_seconds_ = cfg.get_or<double>("job.layer_seconds", forward * pp_ / num_layers_);
  LIBAI_CHECK(layer_seconds_ >= 0, "job.layer_seconds must not be negative, got ", layer_seconds_);
  backward_factor_ = cfg.get_or<double>("job.backward_factor", forward > 0 ? backward / forward : 2.0);
  LIBAI_CHECK(backward_factor_ >= 0, "job.backward_factor must not be negative, got ",
              backward_factor_);
  num_groups_ = cfg.get_or<int>("job.micro_batches", 4 * pp_);
  steps_ = cfg.get_or<int>("job.steps", 1);
  LIBAI_CHECK(steps_ >= 1, "job.steps must be at least 1, got ", steps_);
  elements_ = cfg.get_or<int64_t>("job.elements", 2);
  LIBAI_CHECK(elements_ >= 2, "job.elements must be at least 2, got ", elements_);
  try {
    schedule::train_programs(schedule_, pp_, num_groups_, chunks_);
  } catch (const InvalidArgument& e) {
    LIBAI_THROW(InvalidArgument, "job.schedule '", schedule_, "' (job.micro_batches ",
                num_groups_, ", job.chunks ", chunks_, "): ", e.what());
  }
}

}  // namespace libai::plan
