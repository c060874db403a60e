// What the tests of config jobs' plans share: device profiles of given rates, a synthetic
// job's config, and ModelJobPlan, a random 4-layer GPT-2 with a generate job over it.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <unistd.h>

#include "actors/jobs/config_job.h"
#include "plan/timed_layers.h"
#include "models/convert.h"
#include "runtime/config/config.h"
#include "tests/models/random_models.h"

namespace libai::actors {

// The planner takes runtime::DeviceProfile; these tests build the assignment's wire profiles
// and plan with the same ones, converted as the cluster's node 0 converts them.
inline schedule::PlanRequest plan_request(const JobShape& job,
                                          const std::vector<wire::DeviceProfile>& devices) {
  return plan::plan_request(job, wire::from_wire(devices));
}
inline schedule::Plan compile_job_plan(const JobShape& job,
                                       const std::vector<wire::DeviceProfile>& devices) {
  return plan::compile_job_plan(job, wire::from_wire(devices));
}
inline void check_job_plan(const schedule::Plan& p, const std::vector<wire::DeviceProfile>& devices,
                           int devices_per_node) {
  plan::check_job_plan(p, wire::from_wire(devices), devices_per_node);
}
inline void print_job_plan(std::ostream& out, const JobShape& job, const schedule::Plan& p,
                           const std::vector<wire::DeviceProfile>& devices) {
  plan::print_job_plan(out, job, p, wire::from_wire(devices));
}
using plan::time_model_layer;
using plan::time_synthetic_layer;

}  // namespace libai::actors

namespace libai::actors::testing {

using libai::testing::families;
using libai::testing::save_random_model;

inline wire::DeviceProfile device(const std::string& name, double gflops, double gbs = 10,
                                  double free_bytes = 1e9) {
  return {name, gflops, gbs, uint64_t(free_bytes)};
}

inline config::Config synthetic_config(int layers, int pp, const std::string& balance,
                                       int micro_batches, int steps) {
  return config::Config::parse(
      str_cat("train:\n  dist: {pipeline_parallel_size: ", pp, ", pipeline_num_layers: ", layers,
              ", balance: ", balance, "}\n",
              "job: {_target_: synthetic, layer_seconds: 0.001, num_micro_batches: ", micro_batches,
              ", steps: ", steps, "}\n"));
}


class ModelJobPlan : public ::testing::Test {
 protected:
  void SetUp() override {
    for (auto f : families())
      if (f.name == "gpt2") {
        f.config["n_layer"] = 4;
        model_ = save_random_model(f, "config_job_" + std::to_string(::getpid()));
      }
  }
  void TearDown() override { std::filesystem::remove_all(model_); }

  // Five prompts (the longest of 4 tokens) in 2 groups: 3 rows per group.
  config::Config generate_config(const std::string& balance, int tp = 1, int per_node = 1) const {
    return config::Config::parse(
        str_cat("model: {weights: ", model_.string(), "}\n",
                "train:\n  dist: {pipeline_parallel_size: 2, tensor_parallel_size: ", tp,
                ", balance: ", balance, "}\n  cluster: {devices_per_node: ", per_node, "}\n",
                "job:\n  _target_: generate\n  prompt_ids: [[5, 6, 7], [9], [11, 3, 30, 2], [8, "
                "8], [20]]\n",
                "  max_new_tokens: 6\n  num_groups: 2\n"));
  }

  // model_ written by convert --quantize as `spec`, beside it.
  std::filesystem::path quantized_copy(const ops::QuantSpec& spec) const {
    const std::filesystem::path out = model_.string() + "_" + ops::quantization_name(spec);
    models::convert_model(model_, out, models::CheckpointLayout::libai, spec);
    return out;
  }
  // A generate job of one prompt over the model in `folder`, with `dist` as train.dist.
  static config::Config folder_config(const std::filesystem::path& folder,
                                      const std::string& dist = "pipeline_parallel_size: 2") {
    return config::Config::parse(
        str_cat("model: {weights: ", folder.string(), "}\n", "train:\n  dist: {", dist, "}\n",
                "job:\n  _target_: generate\n  prompt_ids: [[5, 6, 7]]\n  max_new_tokens: 6\n"));
  }

  std::filesystem::path model_;
};


}  // namespace libai::actors::testing
