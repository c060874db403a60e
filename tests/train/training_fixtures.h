// The torch training references under tests/data/training/ (tools/make_training_fixtures.py):
// the initial model folder, the micro-batches of each step, the per-step figures and the final
// weights, and the training setup they were made with, built from our own pieces.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/model.h"
#include "runtime/checkpoint/safetensors.h"
#include "train/train_step.h"

namespace libai::testing {

struct TrainingFixture {
  std::filesystem::path folder;
  nlohmann::json reference;
  int64_t steps = 0, accumulation = 0;

  explicit TrainingFixture(const std::string& name)
      : folder(std::filesystem::path(LIBAI_SOURCE_DIR) / "tests" / "data" / "training" / name) {
    std::ifstream in(folder / "reference.json");
    reference = nlohmann::json::parse(in);
    steps = reference["settings"]["steps"];
    accumulation = reference["settings"]["num_accumulation_steps"];
  }
  const nlohmann::json& settings() const { return reference["settings"]; }
  const nlohmann::json& step(int64_t s) const { return reference["steps"][size_t(s)]; }

  // Micro-batch k of step s, under the model's input names.
  // Stage threads of the layout tests call it at once: the file is opened once, under a lock
  // (two threads opening it both would free one's file while the other reads its names).
  models::TensorMap micro_batch(int64_t s, int64_t k) const {
    std::shared_ptr<const checkpoint::SafetensorsFile> batches;
    {
      std::lock_guard lock(*batches_mutex_);
      if (!batches_)
        batches_ = std::make_shared<checkpoint::SafetensorsFile>(
            checkpoint::SafetensorsFile::open((folder / "batches.safetensors").string()));
      batches = batches_;
    }
    const std::string prefix = "s" + std::to_string(s) + ".m" + std::to_string(k) + ".";
    models::TensorMap out;
    for (const auto& name : batches->names())
      if (name.rfind(prefix, 0) == 0)
        out[name.substr(prefix.size())] = batches->tensor(name).clone_raw();
    return out;
  }
  std::vector<models::TensorMap> micro_batches(int64_t s) const {
    std::vector<models::TensorMap> out;
    for (int64_t k = 0; k < accumulation; ++k) out.push_back(micro_batch(s, k));
    return out;
  }

  train::ParamGroupOptions group_options() const {
    const auto& s = settings();
    return {.lr = s["lr"],
            .weight_decay = s["weight_decay"],
            .weight_decay_norm = s["weight_decay_norm"],
            .weight_decay_bias = s["weight_decay_bias"]};
  }
  train::OptimizerOptions optimizer_options() const {
    const auto& s = settings();
    train::OptimizerOptions o;
    if (s["optimizer"] == "sgd") {
      o.kind = train::OptimizerKind::sgd;
      o.momentum = s["momentum"];
      o.dampening = s["dampening"];
      o.nesterov = s["nesterov"];
    } else {
      o.beta1 = s["betas"][0];
      o.beta2 = s["betas"][1];
      o.eps = s["eps"];
    }
    return o;
  }
  train::LrSchedulerOptions schedule_options() const {
    const auto& s = settings();
    train::LrSchedulerOptions o;
    o.kind = train::lr_schedule_from_name(s["scheduler"]);
    o.max_iter = steps;
    o.warmup_iter = int64_t(double(s["warmup_ratio"]) * double(steps));
    o.warmup_factor = s["warmup_factor"];
    o.warmup_method = s["warmup_method"];
    o.alpha = s["alpha"];
    return o;
  }
  train::TrainStepOptions step_options() const {
    const auto& s = settings();
    train::TrainStepOptions o;
    o.num_accumulation_steps = accumulation;
    o.clip_grad_max_norm = double(s["clip_grad_max_norm"]);
    o.clip_grad_norm_type = s["clip_grad_norm_type"];
    if (s.contains("loss_scale")) {
      const auto& ls = s["loss_scale"];
      o.loss_scale = train::GradScalerOptions{.init_scale = ls["init_scale"],
                                              .growth_factor = ls["growth_factor"],
                                              .backoff_factor = ls["backoff_factor"],
                                              .growth_interval = ls["growth_interval"]};
    }
    return o;
  }

 private:
  mutable std::shared_ptr<checkpoint::SafetensorsFile> batches_;
  std::shared_ptr<std::mutex> batches_mutex_ = std::make_shared<std::mutex>();  // copies share it
};

// `fn` throws an E whose message holds every piece (the first names what must be named).
template <typename E, typename Fn>
void expect_error(Fn&& fn, const std::vector<std::string>& pieces) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one naming " << pieces[0];
  } catch (const E& e) {
    for (const auto& piece : pieces)
      EXPECT_NE(std::string(e.what()).find(piece), std::string::npos) << e.what();
  }
}

}  // namespace libai::testing
