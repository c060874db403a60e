// The trainer's shared loop (train/step_runner.h): data, steps, logging, evaluation and
// checkpoint timing over any StepRunner.
#include <chrono>
#include <cmath>

#include "runtime/logging.h"
#include "train/data/prefetcher.h"
#include "train/data/sampler.h"
#include "train/data_config.h"
#include "train/flops.h"
#include "train/metrics.h"
#include "train/step_runner.h"

namespace libai::train {
namespace {

namespace fs = std::filesystem;
using SteadyClock = std::chrono::steady_clock;

struct RunSettings {
  fs::path output_dir;
  int64_t train_iter = 0;
  double train_epoch = 0;
  int64_t log_period = 20, checkpoint_period = 1000, max_to_keep = 100;
  bool eval_enabled = false;
  int64_t eval_period = 1000, eval_iter = 10;
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

}  // namespace

models::HfConfig training_model_config(const config::Config& cfg) {
  const auto weights = cfg.get_or<std::string>("model.weights", "");
  const auto config_file = cfg.get_or<std::string>("model.config", "");
  LIBAI_CHECK(
      weights.empty() != config_file.empty(),
      "set one of model.weights (a model folder to fine-tune) and model.config (a config.json "
      "to train from scratch)");
  return models::HfConfig::load(weights.empty() ? fs::path(config_file) : fs::path(weights));
}

std::map<std::string, double> eval_metrics(models::Task task, double loss_sum, int64_t batches,
                                           double correct, double seen,
                                           const std::shared_ptr<comm::Communicator>& dp) {
  std::map<std::string, double> out;
  out["eval/loss"] = mean_over(loss_sum / double(batches), dp);
  if (seen > 0)
    out["eval/accuracy"] = mean_over(correct / seen, dp);
  else if (!is_classification(task))  // a regression head has neither
    out["eval/perplexity"] = std::exp(out["eval/loss"]);
  return out;
}

void run_training_loop(const config::Config& cfg, const TrainerFlags& flags, const LoopRole& role,
                       const RunnerFactory& make_runner, TrainResult& result) {
  const RunSettings settings = read_settings(cfg, flags);
  TrainConfig t = train_config_from(cfg);
  const bool writer = role.writer;
  const int dp = role.data_parallel_size;
  const int64_t micro = t.batch.micro, global = t.batch.global;
  const models::HfConfig model_config = training_model_config(cfg);

  // Data: enough samples for every step; epochs become steps over one epoch of the split.
  int64_t train_iter = settings.train_iter;
  const int64_t evaluations =
      settings.eval_enabled ? std::max<int64_t>(1, train_iter / settings.eval_period + 1) : 1;
  DataNeeds needs{.train_samples = train_iter * global,
                  .validation_samples = settings.eval_iter * micro * dp * evaluations,
                  .seed = t.step.seed};
  if (settings.train_epoch > 0 && !flags.eval_only) {
    needs.train_samples = 0;
    const int64_t epoch = build_data(cfg, model_config, needs).train->size();
    train_iter = int64_t(std::ceil(settings.train_epoch * double(epoch) / double(global)));
    needs.train_samples = train_iter * global;
    if (writer)
      logger("train")->info("train.train_epoch {}: {} steps of {} samples over an epoch of {}",
                            settings.train_epoch, train_iter, global, epoch);
  }
  DataSplits data = build_data(cfg, model_config, needs);

  t.schedule.max_iter = std::max<int64_t>(train_iter, 1);
  std::unique_ptr<StepRunner> runner = make_runner(t);

  TrainingProgress progress{.seed = t.step.seed};
  if (flags.resume) {
    if (auto folder = last_checkpoint(settings.output_dir)) {
      progress = runner->load(*folder);
      if (writer)
        logger("train")->info("resuming from {} at step {}", folder->string(), progress.iteration);
    } else if (writer) {
      logger("train")->info("--resume: no checkpoint in {}; starting at step 0",
                            settings.output_dir.string());
    }
  }
  const int64_t first = runner->steps_done();

  Writers writers;
  if (writer) {
    writers.all.push_back(make_console_writer(train_iter));
    writers.all.push_back(make_json_writer(settings.output_dir / "metrics.json"));
    writers.all.push_back(make_tensorboard_writer(settings.output_dir / "tensorboard"));
    writers.all.push_back(make_loss_curve_writer(settings.output_dir / "loss_curve.svg"));
  }
  std::optional<double> last_eval;

  // Validation over eval_iter micro-batches of every replica, from the start of the split
  // each time, so evaluations compare.
  auto run_evaluation = [&](int64_t iteration) {
    if (!data.validation) return;
    data::SingleRoundSampler sampler(data.validation->size(),
                                     {.micro_batch_size = micro, .data_parallel_size = dp},
                                     /*drop_last=*/true);
    std::vector<std::vector<models::TensorMap>> batches;
    for (int replica : role.replicas) {
      data::SampleCursor cursor(sampler, replica);
      auto& mine = batches.emplace_back();
      for (int64_t b = 0; b < settings.eval_iter; ++b) {
        std::vector<int64_t> indices = cursor.next();
        if (indices.empty()) break;
        mine.push_back(data::make_batch(*data.validation, indices));
      }
      LIBAI_CHECK(!mine.empty(), "evaluation: the validation split has fewer than ", micro,
                  " samples per rank");
    }
    auto metrics = runner->evaluate(batches);
    last_eval = metrics.at("eval/loss");
    if (writer) writers.write({.iteration = iteration, .scalars = metrics});
    if (!progress.has_best || *last_eval < progress.best_metric) {
      progress.has_best = true;
      progress.best_metric = *last_eval;
      progress.iteration = runner->steps_done();
      runner->save(settings.output_dir, "model_best", progress, int(settings.max_to_keep));
    }
  };

  if (flags.eval_only) {
    LIBAI_CHECK(data.validation != nullptr,
                "--eval-only: the data has no validation split (data.splits)");
    run_evaluation(first);
  } else {
    data::CyclicSampler sampler(data.train->size(), {.micro_batch_size = micro,
                                                     .data_parallel_size = dp,
                                                     .shuffle = data.shuffle,
                                                     .seed = uint32_t(t.step.seed)});
    std::vector<std::unique_ptr<data::SampleCursor>> cursors;
    std::vector<std::unique_ptr<data::Prefetcher>> prefetchers;
    for (int replica : role.replicas) {
      cursors.push_back(
          std::make_unique<data::SampleCursor>(sampler, replica, progress.consumed_samples));
      prefetchers.push_back(std::make_unique<data::Prefetcher>(
          data::micro_batch_producer(*data.train, *cursors.back()),
          size_t(2 * t.batch.accumulation)));
    }
    auto wait_seconds = [&] {
      double s = 0;
      for (auto& p : prefetchers) s += p->wait_seconds();
      return s;
    };
    std::optional<double> flops_per_token;  // train/flops.h, once the sequence length is known
    int64_t steps = 0;                      // in this logging period
    auto period_start = SteadyClock::now();
    double period_wait = wait_seconds();
    for (int64_t iteration = first; iteration < train_iter; ++iteration) {
      std::vector<std::vector<models::TensorMap>> batches(role.replicas.size());
      for (size_t i = 0; i < role.replicas.size(); ++i)
        for (int64_t k = 0; k < t.batch.accumulation; ++k) {
          auto batch = prefetchers[i]->next();
          LIBAI_CHECK(batch.has_value(), "the training data ran out at step ", iteration, " (",
                      data.train->size(), " samples)");
          batches[i].push_back(std::move(*batch));
        }
      StepResult r = runner->run(batches);
      progress.iteration = runner->steps_done();
      progress.consumed_samples += global;
      result.losses.push_back(r.loss);
      ++steps;
      const bool last = iteration + 1 == train_iter;
      if ((iteration + 1) % settings.log_period == 0 || last) {
        const double seconds =
            std::chrono::duration<double>(SteadyClock::now() - period_start).count();
        const double samples = double(steps * global);
        const int64_t sequence = tokens_per_sample(batches[0][0], runner->model_config());
        const double tokens = samples * double(sequence);
        if (!flops_per_token)
          flops_per_token = training_flops_per_token(runner->model_config(), sequence);
        StepMetrics m{.iteration = iteration + 1, .loss = r.loss};
        m.scalars = {{"lr", r.lr},
                     {"grad_norm", r.grad_norm},
                     {"samples_per_s", samples / seconds},
                     {"tokens_per_s", tokens / seconds},
                     {"gflops", *flops_per_token * tokens / seconds / 1e9},
                     {"step_ms", 1e3 * seconds / double(steps)},
                     {"data_wait_ms", 1e3 * (wait_seconds() - period_wait) / double(steps)}};
        if (t.step.loss_scale) m.scalars["loss_scale"] = r.loss_scale;
        for (const auto& [name, value] : r.parts) m.scalars[name] = value;
        if (writer) writers.write(m);
        period_start = SteadyClock::now();
        steps = 0;
        period_wait = wait_seconds();
      }
      if (settings.eval_enabled && ((iteration + 1) % settings.eval_period == 0 || last))
        run_evaluation(iteration + 1);
      if ((iteration + 1) % settings.checkpoint_period == 0 && !last)
        runner->save(settings.output_dir, checkpoint_name(iteration + 1), progress,
                     int(settings.max_to_keep));
    }
    runner->save(settings.output_dir, "model_final", progress, int(settings.max_to_keep));
  }
  for (auto& w : writers.all) w->close();
  if (writer) {
    result.first_iteration = first;
    result.iterations = runner->steps_done();
    result.eval_loss = last_eval;
    result.output_dir = settings.output_dir;
  }
}

}  // namespace libai::train
