#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <fstream>
#include <mutex>

#include "models/init.h"
#include "models/training_mode.h"
#include "ops/ops.h"
#include "runtime/autograd.h"
#include "runtime/comm/mesh.h"
#include "runtime/comm/spmd.h"
#include "runtime/config/unimplemented.h"
#include "runtime/logging.h"
#include "train/checkpoint.h"
#include "train/data/prefetcher.h"
#include "train/data/sampler.h"
#include "train/data_config.h"
#include "train/flops.h"
#include "train/metrics.h"
#include "train/train_config.h"

namespace libai::train {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct RunSettings {
  fs::path output_dir;
  int64_t train_iter = 0;
  double train_epoch = 0;
  int64_t log_period = 20, checkpoint_period = 1000, max_to_keep = 100;
  bool eval_enabled = false;
  int64_t eval_period = 1000, eval_iter = 10;
  int dp = 1, tp = 1;
};

RunSettings read_settings(const config::Config& cfg, const TrainerFlags& flags) {
  RunSettings s;
  s.output_dir = cfg.get_or<std::string>("train.output_dir", "./output");
  s.train_iter = cfg.get_or<int64_t>("train.train_iter", 0);
  s.train_epoch = cfg.get_or<double>("train.train_epoch", 0.0);
  // train_iter 0 (and no epochs) trains nothing and writes the initial model as model_final.
  s.log_period = cfg.get_or<int64_t>("train.log_period", 20);
  s.checkpoint_period = cfg.get_or<int64_t>("train.checkpointer.period", 1000);
  s.max_to_keep = cfg.get_or<int64_t>("train.checkpointer.max_to_keep", 100);
  s.eval_enabled = cfg.get_or<bool>("train.evaluation.enabled", false);
  s.eval_period = cfg.get_or<int64_t>("train.evaluation.eval_period", 1000);
  s.eval_iter = cfg.get_or<int64_t>("train.evaluation.eval_iter", 10);
  s.dp = cfg.get_or<int>("train.dist.data_parallel_size", 1);
  s.tp = cfg.get_or<int>("train.dist.tensor_parallel_size", 1);
  if (flags.fast_dev_run) {
    s.train_iter = 2;
    s.train_epoch = 0;
    s.log_period = 1;
    s.checkpoint_period = 2;
    s.eval_period = 2;
    s.eval_iter = 1;
  }
  return s;
}

// The model to train: a checkpoint or Hugging Face folder (fine-tuning), or a config.json
// initialised from scratch.
std::unique_ptr<models::Model> build_model(const config::Config& cfg,
                                           std::shared_ptr<comm::Communicator> tp, uint64_t seed) {
  const auto weights = cfg.get_or<std::string>("model.weights", "");
  const auto config_file = cfg.get_or<std::string>("model.config", "");
  LIBAI_CHECK(
      weights.empty() != config_file.empty(),
      "set one of model.weights (a model folder to fine-tune) and model.config (a config.json "
      "to train from scratch)");
  if (!weights.empty()) return models::load_model(weights, {.tp = tp});
  auto model = models::create_model(models::HfConfig::load(config_file), {.tp = tp});
  models::init_parameters(*model, seed);
  return model;
}

bool is_classification(models::Task task) {
  return task == models::Task::sequence_classification ||
         task == models::Task::image_classification;
}

double mean_over(double value, const std::shared_ptr<comm::Communicator>& group) {
  if (!group || group->size() == 1) return value;
  Tensor t = Tensor::full({1}, value, DType::f64);
  group->all_reduce(t);
  return t.data<double>()[0] / group->size();
}

// Validation loss (and perplexity or accuracy) over eval_iter micro-batches of every rank,
// from the start of the validation split each time, so evaluations compare.
std::map<std::string, double> evaluate(models::Model& model, const data::Dataset& dataset,
                                       int64_t micro, int64_t eval_iter, int dp_rank,
                                       const ParallelGroups& groups) {
  autograd::NoGradGuard no_grad;
  data::SingleRoundSampler sampler(
      dataset.size(),
      {.micro_batch_size = micro, .data_parallel_size = groups.dp ? groups.dp->size() : 1},
      /*drop_last=*/true);
  data::SampleCursor cursor(sampler, dp_rank);
  double loss = 0, correct = 0, seen = 0;
  int64_t batches = 0;
  for (; batches < eval_iter; ++batches) {
    std::vector<int64_t> indices = cursor.next();
    if (indices.empty()) break;
    models::TensorMap batch = data::make_batch(dataset, indices);
    const LossOutput out = compute_loss(model, batch);
    loss += out.loss.item<double>();
    if (is_classification(model.task()) && out.logits.defined()) {
      auto p = ops::argmax(out.logits, -1).to_vector<int64_t>();
      auto l = batch.at("labels").to_vector<int64_t>();
      for (size_t i = 0; i < p.size(); ++i) correct += p[i] == l[i];
      seen += double(p.size());
    }
  }
  LIBAI_CHECK(batches > 0, "evaluation: the validation split has fewer than ", micro,
              " samples per rank");
  std::map<std::string, double> out;
  out["eval/loss"] = mean_over(loss / double(batches), groups.dp);
  if (seen > 0)
    out["eval/accuracy"] = mean_over(correct / seen, groups.dp);
  else if (!is_classification(model.task()))  // a regression head has neither
    out["eval/perplexity"] = std::exp(out["eval/loss"]);
  return out;
}

// Tokens a sample puts through the model: its sequence length, or for images the patches and
// the class token.
int64_t tokens_per_sample(const models::TensorMap& batch, const models::HfConfig& config) {
  if (auto it = batch.find("input_ids"); it != batch.end() && it->second.dim() >= 2)
    return it->second.size(1);
  const int64_t patches =
      config.get_int("image_size", 224) / std::max<int64_t>(1, config.get_int("patch_size", 16));
  return patches * patches + 1;
}

struct Writers {
  std::vector<std::unique_ptr<MetricsWriter>> all;
  void write(const StepMetrics& m) {
    for (auto& w : all) w->write(m);
  }
};

// One rank's run. Rank 0 (of the world) writes the metrics and reports the result.
void run_rank(const config::Config& cfg, const TrainerFlags& flags, const RunSettings& settings,
              comm::Communicator* world, TrainResult& result, std::mutex& result_mutex) {
  TrainConfig t = train_config_from(cfg);
  const comm::DeviceMesh mesh{.dp = settings.dp, .pp = 1, .tp = settings.tp};
  ParallelGroups groups;
  int rank = 0, dp_rank = 0;
  if (world) {
    auto mesh_groups = comm::make_mesh_groups(*world, mesh);
    if (settings.tp > 1) groups.tp = mesh_groups.tp;
    if (settings.dp > 1) groups.dp = mesh_groups.dp;
    rank = world->rank();
    dp_rank = mesh.coordinates(rank).dp;
  }
  const bool writer = rank == 0;

  auto model = build_model(cfg, groups.tp, t.step.seed);
  model->set_requires_grad(true);
  const int64_t micro = t.batch.micro, global = t.batch.global;

  // Data: enough samples for every step; epochs become steps over one epoch of the split.
  int64_t train_iter = settings.train_iter;
  const int64_t evaluations =
      settings.eval_enabled ? std::max<int64_t>(1, train_iter / settings.eval_period + 1) : 1;
  DataNeeds needs{.train_samples = train_iter * global,
                  .validation_samples = settings.eval_iter * micro * settings.dp * evaluations,
                  .seed = t.step.seed};
  if (settings.train_epoch > 0 && !flags.eval_only) {
    needs.train_samples = 0;
    const int64_t epoch = build_data(cfg, *model, needs).train->size();
    train_iter = int64_t(std::ceil(settings.train_epoch * double(epoch) / double(global)));
    needs.train_samples = train_iter * global;
    if (writer)
      logger("train")->info("train.train_epoch {}: {} steps of {} samples over an epoch of {}",
                            settings.train_epoch, train_iter, global, epoch);
  }
  DataSplits data = build_data(cfg, *model, needs);

  t.schedule.max_iter = std::max<int64_t>(train_iter, 1);
  auto optimizer = make_optimizer(default_param_groups(*model, t.groups), t.optimizer);
  LrScheduler schedule(t.schedule);
  TrainStep step(*model, *optimizer, &schedule, t.step, groups);
  const SaveOptions save_options{.schedule = &schedule, .groups = groups};

  TrainingProgress progress{.seed = t.step.seed};
  if (flags.resume) {
    if (auto folder = last_checkpoint(settings.output_dir)) {
      progress = load_checkpoint(*folder, *model, *optimizer, step.scaler());
      step.set_steps_done(progress.iteration);
      if (writer)
        logger("train")->info("resuming from {} at step {}", folder->string(), progress.iteration);
    } else if (writer) {
      logger("train")->info("--resume: no checkpoint in {}; starting at step 0",
                            settings.output_dir.string());
    }
  }
  const int64_t first = step.steps_done();

  Writers writers;
  if (writer) {
    writers.all.push_back(make_console_writer(train_iter));
    writers.all.push_back(make_json_writer(settings.output_dir / "metrics.json"));
    writers.all.push_back(make_tensorboard_writer(settings.output_dir / "tensorboard"));
    writers.all.push_back(make_loss_curve_writer(settings.output_dir / "loss_curve.svg"));
  }
  std::optional<double> last_eval;

  auto run_evaluation = [&](int64_t iteration) {
    if (!data.validation) return;
    auto metrics = evaluate(*model, *data.validation, micro, settings.eval_iter, dp_rank, groups);
    last_eval = metrics.at("eval/loss");
    if (writer) writers.write({.iteration = iteration, .scalars = metrics});
    if (!progress.has_best || *last_eval < progress.best_metric) {
      progress.has_best = true;
      progress.best_metric = *last_eval;
      progress.iteration = step.steps_done();
      save_checkpoint(settings.output_dir, "model_best", *model, *optimizer, step.scaler(),
                      progress, int(settings.max_to_keep), save_options);
    }
  };

  if (flags.eval_only) {
    LIBAI_CHECK(data.validation != nullptr,
                "--eval-only: the data has no validation split (data.splits)");
    run_evaluation(first);
  } else {
    data::CyclicSampler sampler(data.train->size(), {.micro_batch_size = micro,
                                                     .data_parallel_size = settings.dp,
                                                     .shuffle = data.shuffle,
                                                     .seed = uint32_t(t.step.seed)});
    data::SampleCursor cursor(sampler, dp_rank, progress.consumed_samples);
    data::Prefetcher prefetcher(data::micro_batch_producer(*data.train, cursor),
                                size_t(2 * t.batch.accumulation));
    std::optional<double> flops_per_token;  // train/flops.h, once the sequence length is known
    int64_t steps = 0;                      // in this logging period
    auto period_start = Clock::now();
    double period_wait = prefetcher.wait_seconds();
    for (int64_t iteration = first; iteration < train_iter; ++iteration) {
      std::vector<models::TensorMap> micro_batches;
      for (int64_t k = 0; k < t.batch.accumulation; ++k) {
        auto batch = prefetcher.next();
        LIBAI_CHECK(batch.has_value(), "the training data ran out at step ", iteration, " (",
                    data.train->size(), " samples)");
        micro_batches.push_back(std::move(*batch));
      }
      StepResult r = step.run(micro_batches);
      progress.iteration = step.steps_done();
      progress.consumed_samples += global;
      result.losses.push_back(r.loss);
      ++steps;
      const bool last = iteration + 1 == train_iter;
      if ((iteration + 1) % settings.log_period == 0 || last) {
        const double seconds = std::chrono::duration<double>(Clock::now() - period_start).count();
        const double samples = double(steps * global);
        const int64_t sequence = tokens_per_sample(micro_batches[0], model->config());
        const double tokens = samples * double(sequence);
        if (!flops_per_token) flops_per_token = training_flops_per_token(model->config(), sequence);
        StepMetrics m{.iteration = iteration + 1, .loss = r.loss};
        m.scalars = {
            {"lr", r.lr},
            {"grad_norm", r.grad_norm},
            {"samples_per_s", samples / seconds},
            {"tokens_per_s", tokens / seconds},
            {"gflops", *flops_per_token * tokens / seconds / 1e9},
            {"step_ms", 1e3 * seconds / double(steps)},
            {"data_wait_ms", 1e3 * (prefetcher.wait_seconds() - period_wait) / double(steps)}};
        if (t.step.loss_scale) m.scalars["loss_scale"] = r.loss_scale;
        for (const auto& [name, value] : r.parts) m.scalars[name] = value;
        if (writer) writers.write(m);
        period_start = Clock::now();
        steps = 0;
        period_wait = prefetcher.wait_seconds();
      }
      if (settings.eval_enabled && ((iteration + 1) % settings.eval_period == 0 || last))
        run_evaluation(iteration + 1);
      if ((iteration + 1) % settings.checkpoint_period == 0 && !last)
        save_checkpoint(settings.output_dir, checkpoint_name(iteration + 1), *model, *optimizer,
                        step.scaler(), progress, int(settings.max_to_keep), save_options);
    }
    save_checkpoint(settings.output_dir, "model_final", *model, *optimizer, step.scaler(), progress,
                    int(settings.max_to_keep), save_options);
  }
  for (auto& w : writers.all) w->close();
  if (writer) {
    std::lock_guard lock(result_mutex);
    result.first_iteration = first;
    result.iterations = step.steps_done();
    result.eval_loss = last_eval;
    result.output_dir = settings.output_dir;
  }
}

}  // namespace

TrainResult run_training(const config::Config& cfg, const TrainerFlags& flags) {
  config::check_implemented(cfg, config::Purpose::training);
  const RunSettings settings = read_settings(cfg, flags);
  fs::create_directories(settings.output_dir);
  config::write_resolved(cfg, settings.output_dir.string());
  TrainResult result;
  std::mutex result_mutex;
  const int world = settings.dp * settings.tp;
  if (world == 1) {
    run_rank(cfg, flags, settings, nullptr, result, result_mutex);
  } else {
    std::vector<TrainResult> per_rank(static_cast<size_t>(world));
    comm::run_spmd_threads(world, [&](comm::Communicator& comm) {
      run_rank(cfg, flags, settings, &comm,
               comm.rank() == 0 ? result : per_rank[size_t(comm.rank())], result_mutex);
    });
  }
  return result;
}

}  // namespace libai::train
