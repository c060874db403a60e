#include "actors/jobs/model_train_job.h"

#include <algorithm>
#include <chrono>
#include <sstream>

#include "plan/run_plan.h"
#include "actors/messages.h"
#include "schedule/train_programs.h"
#include "models/stages/stage.h"
#include "runtime/config/unimplemented.h"
#include "runtime/logging.h"
#include "runtime/threads.h"
#include "schedule/partition.h"
#include "train/data/sampler.h"
#include "train/data_config.h"
#include "train/metrics.h"
#include "train/step_runner.h"

namespace libai::actors {

namespace {

models::HfConfig model_config_of(const config::Config& cfg, std::filesystem::path* weights) {
  LIBAI_CHECK_KIND(Unsupported, cfg.get_or<std::string>("model.quantize", "none") == "none",
                   "model.quantize: quantized training is not supported (quantized weights are "
                   "for inference: run and serve jobs, generate, serve --model)");
  const auto folder = cfg.get_or<std::string>("model.weights", "");
  const auto config_file = cfg.get_or<std::string>("model.config", "");
  LIBAI_CHECK(folder.empty() != config_file.empty(),
              "set one of model.weights (a model folder to fine-tune) and model.config (a "
              "config.json to train from scratch)");
  *weights = folder;
  return models::HfConfig::load(folder.empty() ? std::filesystem::path(config_file)
                                               : std::filesystem::path(folder) / "config.json");
}

}  // namespace

GraphTrainSettings graph_train_settings(const config::Config& cfg, int nodes) {
  config::check_implemented(cfg, config::Purpose::graph_training);
  GraphTrainSettings s;
  s.dp = cfg.get_or<int>("train.dist.data_parallel_size", 1);
  s.tp = cfg.get_or<int>("train.dist.tensor_parallel_size", 1);
  s.pp = cfg.get_or<int>("train.dist.pipeline_parallel_size", 1);
  s.schedule = cfg.get_or<std::string>("train.dist.pipeline_schedule", "1f1b");
  s.chunks = cfg.get_or<int>("train.dist.virtual_pipeline_size", 1);
  s.threads = cfg.get_or<int>("train.cluster.device_threads", 1);
  s.train_iter = cfg.get_or<int64_t>("train.train_iter", 0);
  s.log_period = cfg.get_or<int64_t>("train.log_period", 20);
  s.train = train::train_config_from(cfg);
  s.train.schedule.max_iter = std::max<int64_t>(s.train_iter, 1);
  s.model_config = model_config_of(cfg, &s.weights);
  const int slots = s.dp * s.tp * s.pp;
  LIBAI_CHECK(slots % nodes == 0, "train.dist: ", s.dp, " x ", s.tp, " x ", s.pp, " = ", slots,
              " slots do not divide over ", nodes, " nodes");
  LIBAI_CHECK((slots / nodes) % s.tp == 0, "train.dist.tensor_parallel_size ", s.tp,
              " does not divide the ", slots / nodes,
              " slots per node: the ranks of a stage must share a node");
  const int64_t m = s.train.batch.accumulation;
  try {
    train_programs(s.schedule, s.pp, int(m), s.chunks);
  } catch (const InvalidArgument& e) {
    LIBAI_THROW(InvalidArgument, "train.dist.pipeline_schedule '", s.schedule, "' with ", m,
                " micro-batches (train.num_accumulation_steps) and virtual_pipeline_size ",
                s.chunks, ": ", e.what());
  }
  const int num_layers = models::stages::pipeline_num_layers(s.model_config);
  const int virtual_stages = s.pp * s.chunks;
  LIBAI_CHECK(virtual_stages <= num_layers, "train.dist: pipeline_parallel_size ", s.pp,
              " x virtual_pipeline_size ", s.chunks, " = ", virtual_stages,
              " virtual stages, but the model has ", num_layers, " layers");
  auto custom = cfg.get_or<std::optional<std::vector<int64_t>>>("train.dist.custom_pipeline_stage_id",
                                                                std::nullopt);
  // Until node 0's plan says otherwise (ModelTrainJob::layout).
  const schedule::StageAssignment stage_of =
      custom ? schedule::custom_partition(*custom, num_layers, virtual_stages)
             : schedule::uniform_partition(num_layers, virtual_stages);
  s.stage_of.assign(stage_of.begin(), stage_of.end());
  s.virtual_stages = virtual_stage_specs(s.stage_of, virtual_stages);
  return s;
}

std::vector<models::StageSpec> virtual_stage_specs(const std::vector<int64_t>& stage_of,
                                                   int virtual_stages) {
  const int num_layers = int(stage_of.size());
  std::vector<models::StageSpec> out;
  for (int v = 0; v < virtual_stages; ++v) {
    models::StageSpec spec{.first_layer = -1, .last_layer = -1, .num_layers = num_layers};
    for (int l = 0; l < num_layers; ++l)
      if (stage_of[size_t(l)] == v) {
        LIBAI_CHECK(spec.first_layer < 0 || spec.last_layer == l, "the split puts layer ", l,
                    " on virtual stage ", v, " apart from its other layers");
        if (spec.first_layer < 0) spec.first_layer = l;
        spec.last_layer = l + 1;
      }
    LIBAI_CHECK(spec.first_layer >= 0, "the split gives virtual stage ", v, " of ",
                virtual_stages, " no layer of ", num_layers);
    out.push_back(spec);
  }
  for (int64_t v : stage_of)
    LIBAI_CHECK(v >= 0 && v < virtual_stages, "the split puts a layer on virtual stage ", v,
                " of ", virtual_stages);
  return out;
}

MicroBatchSource make_micro_batch_source(const config::Config& cfg, const GraphTrainSettings& s) {
  // build_data reads the model's config only: a one-layer part stands in for the model.
  const int layers = models::stages::pipeline_num_layers(s.model_config);
  auto probe = models::create_model(s.model_config, {}, models::StageSpec{0, 1, layers});
  const int64_t global = s.train.batch.global, micro = s.train.batch.micro;
  train::DataSplits data = train::build_data(
      cfg, *probe, {.train_samples = s.train_iter * global, .seed = s.train.step.seed});
  auto sampler = std::make_shared<train::data::CyclicSampler>(
      data.train->size(), train::data::SamplerOptions{.micro_batch_size = micro,
                                                      .data_parallel_size = s.dp,
                                                      .shuffle = data.shuffle,
                                                      .seed = uint32_t(s.train.step.seed)});
  auto dataset = data.train;
  const int dp = s.dp;
  return [dataset, sampler, global, micro, dp](int64_t step, int replica, int k) {
    const int64_t consumed = step * global + int64_t(k) * micro * dp;
    std::vector<int64_t> indices = sampler->micro_batch(consumed, replica);
    LIBAI_CHECK(!indices.empty(), "the training data ran out at step ", step);
    return train::data::make_batch(*dataset, indices);
  };
}

ValidationSource make_validation_source(const config::Config& cfg, const train::TrainerFlags& flags,
                                        const GraphTrainSettings& s) {
  if (!flags.eval_only && !cfg.get_or<bool>("train.evaluation.enabled", false)) return nullptr;
  const int layers = models::stages::pipeline_num_layers(s.model_config);
  auto probe = models::create_model(s.model_config, {}, models::StageSpec{0, 1, layers});
  // The loop's own needs (train/step_runner.h), so the splits are the ones it reads.
  train::DataSplits data = train::build_data(
      cfg, *probe, train::training_data_needs(cfg, flags, s.train, s.train_iter, s.dp));
  if (!data.validation) return nullptr;
  auto validation = data.validation;
  const int64_t micro = s.train.batch.micro;
  const int dp = s.dp;
  return [cfg, flags, validation, micro, dp](int replica) {
    return train::validation_micro_batches(cfg, flags, *validation, micro, dp, replica);
  };
}

// ---------------------------------------------------------------------------------------------

namespace {

// The factory of a run's slots, given each slot's groups.
TrainComputeFactory model_compute_factory(
    const GraphTrainSettings& s, MicroBatchSource data,
    std::function<std::shared_ptr<comm::Communicator>(int slot)> tp_of,
    std::function<std::function<train::StageGroups()>(int slot)> groups_of,
    std::function<std::function<void(const std::string&)>(int slot)> on_error_of,
    PipelineLayout layout, ValidationSource validation) {
  return [=](const SlotSpec& slot) -> std::shared_ptr<TrainStageCompute> {
    const int index = layout.index(slot.replica, slot.stage, slot.rank);
    ModelTrainOptions o;
    o.model_config = s.model_config;
    o.weights = s.weights;
    o.train = s.train;
    for (int c = 0; c < s.chunks; ++c)
      o.parts.push_back(s.virtual_stages[size_t(c * s.pp + slot.stage)]);
    o.layout = {.pp = s.pp,
                .stage = slot.stage,
                .num_chunks = s.chunks,
                .dp = s.dp,
                .dp_rank = slot.replica,
                .micro_batch_size = s.train.batch.micro};
    o.tp = tp_of(index);
    o.groups = groups_of(index);
    o.data = data;
    o.reports_loss = slot.stage == s.pp - 1 && slot.rank == 0;
    o.on_error = on_error_of(index);
    for (int stage = 0; stage < s.pp; ++stage) o.stage_roots.push_back(layout.index(0, stage, 0));
    o.validation = validation;
    return std::make_shared<ModelTrainCompute>(std::move(o));
  };
}

void set_budgets(const GraphTrainSettings& s, int per_node) {
  for (int d = 0; d < per_node; ++d)
    if (thread_budget(Device::cpu(d)) != s.threads) set_thread_budget(Device::cpu(d), s.threads);
}

}  // namespace

namespace {

// The trainer's loop (train/step_runner.h) runs the steps through the train driver: the
// stages read their own micro-batches, so the loop's (replica 0's, for its token counts) are
// not sent anywhere.
class GraphRunner final : public train::StepRunner {
 public:
  // plan_text: logged once the run is under way (Note [Logging the plan late]).
  GraphRunner(TrainClient& client, const GraphTrainSettings& s, models::Task task,
              std::string plan_text)
      : client_(client), settings_(s), task_(task), plan_text_(std::move(plan_text)) {}
  const models::HfConfig& model_config() const override { return settings_.model_config; }
  models::Task task() const override { return task_; }
  train::StepResult run(const std::vector<std::vector<models::TensorMap>>&) override {
    announce_plan();
    const TrainStepResult r = client_.run_step(int(steps_));
    LIBAI_CHECK(r.total.loss_count > 0, "step ", steps_, ": no stage reported a loss");
    const double n = double(r.total.loss_count);  // one report per replica, all alike
    auto extra = [&](const char* name) {
      auto it = r.total.extra.find(name);
      return it == r.total.extra.end() ? 0.0 : it->second / n;
    };
    train::StepResult out;
    out.step = steps_++;
    out.loss = r.total.loss_sum / n;
    out.grad_norm = r.total.grad_norm;
    out.lr = extra("lr");
    out.skipped = r.total.skipped;
    out.loss_scale = extra("loss_scale");
    out.samples = int64_t(extra("samples"));
    out.targets = int64_t(extra("targets"));
    for (const auto& [name, value] : r.total.extra)
      if (name != "lr" && name != "loss_scale" && name != "samples" && name != "targets")
        out.parts[name] = value / n;
    return out;
  }
  int64_t steps_done() const override { return steps_; }
  // The loop's validation micro-batches (replica 0's) are not sent: every slot reads its own.
  std::map<std::string, double> evaluate(const std::vector<std::vector<models::TensorMap>>&) override {
    announce_plan();
    const TrainStepResult r = client_.run_control({.kind = wire::TrainControlKind::evaluate});
    LIBAI_CHECK(r.total.loss_count > 0, "evaluation: no stage reported a loss");
    std::map<std::string, double> out;
    for (const auto& [name, value] : r.total.extra) out[name] = value / double(r.total.loss_count);
    return out;
  }
  // Note [Graph-mode checkpoints] (actors/jobs/model_train_control.cc).
  void save(const std::filesystem::path& output_dir, const std::string& name,
            const train::TrainingProgress& progress, int max_to_keep) override {
    client_.run_control({.kind = wire::TrainControlKind::save,
                         .folder = output_dir.string(),
                         .name = name,
                         .max_to_keep = max_to_keep,
                         .iteration = progress.iteration,
                         .consumed_samples = progress.consumed_samples,
                         .best_metric = progress.best_metric,
                         .has_best = progress.has_best,
                         .seed = progress.seed});
  }
  train::TrainingProgress load(const std::filesystem::path& folder) override {
    const TrainStepResult r =
        client_.run_control({.kind = wire::TrainControlKind::load, .folder = folder.string()});
    const auto& extra = r.slots.at(0).extra;
    auto value = [&](const char* name) {
      auto it = extra.find(name);
      LIBAI_CHECK_KIND(CorruptInput, it != extra.end(), "loading ", folder.string(),
                       ": slot 0 did not report the checkpoint's ", name);
      return it->second;
    };
    train::TrainingProgress progress;
    progress.iteration = int64_t(value("iteration"));
    progress.consumed_samples = int64_t(value("consumed_samples"));
    progress.best_metric = value("best_metric");
    progress.has_best = value("has_best") != 0;
    progress.seed = uint64_t(value("seed"));
    steps_ = progress.iteration;
    return progress;
  }


  // Note [Logging the plan late]: the plan is logged when the first step (or evaluation)
  // starts, after every slot has built its parts and loaded any checkpoint, so that a run
  // that fails before training prints its one error line and nothing else.
  void announce_plan() {
    if (plan_text_.empty()) return;
    logger("train")->info("{}", plan_text_);
    plan_text_.clear();
  }

 private:
  TrainClient& client_;
  const GraphTrainSettings& settings_;
  models::Task task_;
  std::string plan_text_;
  int64_t steps_ = 0;
};

}  // namespace

ModelTrainJob::ModelTrainJob(const config::Config& cfg, const ClusterSpec& spec,
                             const train::TrainerFlags& flags)
    : cfg_(cfg), spec_(spec), flags_(flags) {
  if (cfg.get_or<bool>("graph.auto_parallel.enabled", false)) {
    // Note [Auto parallel on a cluster]: the layout waits for node 0's search; until then every
    // node's devices are replicas, measured as the search wants them.
    cfg_.apply_override("train.cluster.nodes=" + std::to_string(spec.nodes));
    std::filesystem::path weights;
    const models::HfConfig model = model_config_of(cfg_, &weights);
    const std::string name =
        weights.empty() ? cfg_.get_or<std::string>("model.config", "") : weights.string();
    search_ = plan::auto_parallel_setup(cfg_, model, name);
    per_node_ = search_->space.devices_per_node;
    shape_ = auto_parallel_profiling_shape(cfg_, *search_);
    return;
  }
  configure();
}

void ModelTrainJob::adopt(const config::Config& chosen) {
  cfg_ = chosen;
  search_.reset();
  configure();
}

void ModelTrainJob::configure() {
  settings_ = graph_train_settings(cfg_, spec_.nodes);
  if (flags_.fast_dev_run) {  // the loop's 2 steps (train/training_loop.cc, read_settings)
    settings_.train_iter = 2;
    settings_.train.schedule.max_iter = 2;
  }
  per_node_ = settings_.dp * settings_.tp * settings_.pp / spec_.nodes;
  const std::string name = settings_.weights.empty()
                               ? cfg_.get_or<std::string>("model.config", "")
                               : settings_.weights.string();
  shape_ = plan::model_train_shape(cfg_, settings_.model_config, name, per_node_);
}

std::vector<wire::DeviceProfile> ModelTrainJob::profile_devices(int node_rank) {
  // Measured rates and a timed layer (forward and backward) at each device's slow-down.
  return wire::to_wire(profile_train_devices(cfg_, shape_, node_rank));
}

// Note [Planning a model's training]
// Node 0 compiles the training plan (plan/train_plan.h) from the profiles every node sent:
// its split of the layers over the virtual stages (train.dist.balance) and, for a balanced
// plan, which pipeline slot runs which stage (slots are interchangeable when they only differ
// in speed, and the head's stage wants the fast one). The assignment carries both to every
// node (stage_of: [layer] virtual stage; device_of_stage: [stage] pipeline slot), and
// layout() builds the parts and places the slots from them, so every node agrees. Parameters
// are initialised by their whole-model names (Note [Model parts]), so any split trains the
// same model: the losses equal one device's whatever the plan chose.
//
// Note [Auto parallel on a cluster]
// With graph.auto_parallel.enabled the layout is not known when the nodes start: each node
// measures its devices as the search wants them (every device a replica at micro-batch 1 under
// its own train.cluster.device_slowdown; auto_parallel_profiling_shape), node 0 searches over
// all of them and the hop between nodes the cluster just measured (run_auto_parallel), sets
// the chosen keys in its config (auto parallel off) and plans that layout as any other; the
// assignment carries that config, from which every other node takes the same keys
// (adopt_chosen_layout) before building its slots. The output folder's config.yaml is the
// chosen config, so that running it again runs the same layout. On one node the same steps
// run in this process.
void ModelTrainJob::plan(wire::Assignment& assignment) {
  if (search_) {
    const AutoParallelRun run = run_auto_parallel(cfg_, *search_, wire::from_wire(assignment.devices),
                                                  assignment.remote_hop_seconds,
                                                  assignment.inter_node_bandwidth_gbs);
    std::ostringstream chosen;
    adopt(chosen_config(cfg_, run, chosen));
    logger("train")->info("{}", chosen.str().substr(0, chosen.str().size() - 1));
    const schedule::LinkModel &inside = run.setup.intra_node, &between = run.setup.inter_node;
    logger("train")->info(
        "auto parallel links: inside a node {:.3g} GB/s + {}, between nodes {:.3g} GB/s + {}{}",
        inside.bandwidth_gbs, plan::format_seconds(inside.latency_seconds), between.bandwidth_gbs,
        plan::format_seconds(between.latency_seconds),
        run.setup.inter_node_measured ? " (between nodes: measured as the cluster formed)" : "");
    assignment.config_yaml = cfg_.to_yaml();
    config::write_resolved(cfg_, cfg_.get_or<std::string>("train.output_dir", "./output"));
  }
  const int virtual_stages = settings_.pp * settings_.chunks;
  assignment.stage_of.assign(settings_.stage_of.begin(), settings_.stage_of.end());
  assignment.device_of_stage.clear();
  for (int s = 0; s < settings_.pp; ++s) assignment.device_of_stage.push_back(s);
  auto log = logger("train");
  const bool custom = shape_.custom_stage_ids.has_value();
  if (!plan::has_train_costs(settings_.model_config)) {
    LIBAI_CHECK(shape_.balance == "uniform" || custom, "train.dist.balance is ", shape_.balance,
                ", but the planner has no costs for model_type '",
                settings_.model_config.model_type(), "' (it has costs for ",
                plan::families_with_train_costs(),
                "): set train.dist.balance uniform or train.dist.custom_pipeline_stage_id");
    log->info("no training plan: no cost model for model_type '{}'; the layers split {}",
              settings_.model_config.model_type(), custom ? "as custom_pipeline_stage_id says" : "uniformly");
    return;
  }
  if (custom && virtual_stages > settings_.pp) {
    log->info("no training plan: custom_pipeline_stage_id over {} virtual stages", virtual_stages);
    return;
  }
  if (shape_.local_hop_seconds == 0) shape_.local_hop_seconds = assignment.local_hop_seconds;
  if (shape_.remote_hop_seconds == 0) shape_.remote_hop_seconds = assignment.remote_hop_seconds;
  const std::vector<DeviceProfile> devices = wire::from_wire(assignment.devices);
  plan_ = compile_train_plan(shape_, devices);
  std::ostringstream text;
  print_train_plan(text, shape_, *plan_, devices);
  plan_text_ = text.str();  // logged when training starts (Note [Logging the plan late])
  plan::check_train_plan(*plan_, devices, per_node_);
  assignment.stage_of.assign(plan_->stage_of.begin(), plan_->stage_of.end());
  for (int s = 0; s < settings_.pp; ++s)
    assignment.device_of_stage[size_t(s)] = plan_->stages[size_t(s)].slot;
}

PipelineLayout ModelTrainJob::layout(const wire::Assignment& assignment) {
  if (search_) {  // a node other than 0 (Note [Auto parallel on a cluster])
    LIBAI_CHECK(!assignment.config_yaml.empty(),
                "graph.auto_parallel.enabled: node 0's assignment carries no config to take the "
                "chosen layout from");
    adopt(plan::adopt_chosen_layout(cfg_,
                              config::Config::parse(assignment.config_yaml, "node 0's config")));
  }
  // Node 0 planned with its config: the keys that decide who owns which shard must be this
  // node's too (each node builds its slots from its own config), else the slots would issue
  // different collectives. One error naming the key instead.
  if (!assignment.config_yaml.empty()) {
    const config::Config planned = config::Config::parse(assignment.config_yaml, "node 0's config");
    auto agree = [&](const char* key, auto fallback) {
      const auto mine = cfg_.get_or(key, fallback), theirs = planned.get_or(key, fallback);
      LIBAI_CHECK(mine == theirs, "this node's config has ", key, " = ", mine,
                  ", but node 0 planned the job with ", theirs,
                  ": start every node with the same config");
    };
    agree("train.zero_optimization.enabled", false);
    agree("train.zero_optimization.stage", int64_t(1));
    for (const char* key : {"train.dist.data_parallel_size", "train.dist.tensor_parallel_size",
                            "train.dist.pipeline_parallel_size"})
      agree(key, int64_t(1));
  }
  const int virtual_stages = settings_.pp * settings_.chunks;
  if (!assignment.stage_of.empty()) {
    LIBAI_CHECK(assignment.stage_of.size() == settings_.stage_of.size(), "the assignment splits ",
                assignment.stage_of.size(), " layers but the model has ", settings_.stage_of.size());
    settings_.stage_of.assign(assignment.stage_of.begin(), assignment.stage_of.end());
    settings_.virtual_stages = virtual_stage_specs(settings_.stage_of, virtual_stages);
  }
  std::vector<int> position(size_t(settings_.pp));
  for (int s = 0; s < settings_.pp; ++s) position[size_t(s)] = s;
  if (!assignment.device_of_stage.empty()) {
    position.assign(assignment.device_of_stage.begin(), assignment.device_of_stage.end());
    std::vector<int> sorted = position;
    std::sort(sorted.begin(), sorted.end());
    bool permutation = int(sorted.size()) == settings_.pp;
    for (int s = 0; permutation && s < settings_.pp; ++s) permutation = sorted[size_t(s)] == s;
    LIBAI_CHECK(permutation, "the assignment places ", position.size(),
                " stages on pipeline slots that are not a permutation of the ", settings_.pp,
                " slots");
  }
  PipelineLayout layout = make_train_layout({.dp = settings_.dp, .pp = settings_.pp, .tp = settings_.tp});
  for (SlotSpec& slot : layout.slots) {
    // Devices in mesh order [dp, pp, tp], as the plan numbers them.
    const int device =
        (slot.replica * settings_.pp + position[size_t(slot.stage)]) * settings_.tp + slot.rank;
    slot.node = device / per_node_;
    slot.device = Device::cpu(device % per_node_);
    slot.slowdown = shape_.slowdown[size_t(device)];
  }
  return layout;
}

ComputeFactory ModelTrainJob::compute(const PipelineLayout&, const wire::Assignment&) {
  LIBAI_THROW(InvalidArgument, "a training job runs training stages only");
}

std::optional<TrainPrograms> ModelTrainJob::train_programs(const wire::Assignment&) {
  return actors::train_programs(settings_.schedule, settings_.pp,
                                int(settings_.train.batch.accumulation), settings_.chunks);
}

TrainComputeFactory ModelTrainJob::train_compute(const PipelineLayout& layout, const wire::Assignment&,
                                                 const std::shared_ptr<comm::Communicator>& data_plane) {
  set_budgets(settings_, per_node_);
  MicroBatchSource data = make_micro_batch_source(cfg_, settings_);
  ValidationSource validation = make_validation_source(cfg_, flags_, settings_);
  const auto timeout = std::chrono::milliseconds(60000);
  if (!data_plane) {  // one node: every slot here
    auto groups = std::make_shared<std::vector<train::StageGroups>>(local_train_groups(layout, timeout));
    return model_compute_factory(
        settings_, data, [groups](int i) { return (*groups)[size_t(i)].tp; },
        [groups](int i) { return [groups, i] { return (*groups)[size_t(i)]; }; },
        [groups](int) {
          return [groups](const std::string& why) {
            for (const auto& g : *groups) abort_local_groups(g, why);
          };
        },
        layout, validation);
  }
  auto groups = std::make_shared<ClusterSlotGroups>(
      cluster_train_groups(layout, spec_.node_rank, *data_plane, spec_.addr, timeout));
  auto factory = model_compute_factory(
      settings_, data,
      [groups](int i) {
        auto it = groups->tp.find(i);
        return it == groups->tp.end() ? nullptr : it->second;
      },
      [groups](int i) { return [groups, i] { return groups->rest.at(i).get(); }; },
      [groups](int) { return [](const std::string&) {}; }, layout, validation);
  return factory;
}

void ModelTrainJob::train(TrainClient& client, const PipelineLayout&) {
  const int layers = models::stages::pipeline_num_layers(settings_.model_config);
  const models::Task task =
      models::create_model(settings_.model_config, {}, models::StageSpec{0, 1, layers})->task();
  const train::LoopRole role{.data_parallel_size = settings_.dp, .replicas = {0}, .writer = true};
  train::run_training_loop(
      cfg_, flags_, role,
      [&](const train::TrainConfig&) { return std::make_unique<GraphRunner>(client, settings_, task, plan_text_); },
      result_);
}

train::TrainResult run_graph_training(const config::Config& cfg, const train::TrainerFlags& flags,
                                      const ClusterSpec& spec) {
  config::check_implemented(cfg, config::Purpose::graph_training);  // before writing anything
  // Under auto parallel node 0 writes the chosen config over this one once it has searched.
  const std::filesystem::path out = cfg.get_or<std::string>("train.output_dir", "./output");
  if (spec.node_rank == 0) {
    std::filesystem::create_directories(out);
    config::write_resolved(cfg, out.string());
  }
  ModelTrainJob job(cfg, spec, flags);
  if (spec.nodes == 1) {
    caf::actor_system_config config;
    configure_actor_system(config);
    caf::actor_system system(config);
    wire::Assignment assignment;
    assignment.devices = job.profile_devices(0);
    job.plan(assignment);
    const PipelineLayout layout = job.layout(assignment);
    LocalTrainPipeline pipeline(system, layout, *job.train_programs(assignment),
                                job.train_compute(layout, assignment, nullptr));
    try {
      job.train(pipeline.client(), layout);
    } catch (...) {
      pipeline.client().fail("the training loop failed");
      throw;
    }
    pipeline.finish();
    return job.result();
  }
  run_cluster(spec, job, cluster_options(cfg));
  return job.result();
}

}  // namespace libai::actors
