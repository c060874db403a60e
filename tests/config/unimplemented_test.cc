// Keys the schema accepts but a command does not act on are errors that name the key, where it
// was written and why (runtime/config/unimplemented.h); the shipped defaults pass every purpose
// that can use them.
#include <gtest/gtest.h>

#include "app/schema.h"
#include "runtime/config/unimplemented.h"
#include "tests/config/test_files.h"

namespace libai::config {
namespace {

using testing::error_message;

const std::string kDefault = LIBAI_SOURCE_DIR "/configs/default.yaml";

bool contains(const std::string& text, const std::string& piece) {
  return text.find(piece) != std::string::npos;
}

std::vector<std::string> problems_of(const std::vector<std::string>& overrides, Purpose purpose) {
  return unimplemented_problems(load_libai_config(kDefault, overrides).root(), purpose);
}

std::string only_problem(const std::vector<std::string>& overrides, Purpose purpose) {
  const std::vector<std::string> problems = problems_of(overrides, purpose);
  EXPECT_EQ(problems.size(), 1u) << ::testing::PrintToString(problems);
  return problems.empty() ? "" : problems.front();
}

TEST(Unimplemented, DefaultsPassWhereTheyApply) {
  EXPECT_TRUE(problems_of({}, Purpose::inference_job).empty());
  EXPECT_TRUE(problems_of({}, Purpose::what_if_plan).empty());
  // Training runs eagerly: the shipped default graph.enabled: true is its one problem.
  EXPECT_TRUE(problems_of({"graph.enabled=false"}, Purpose::training).empty());
}

TEST(Unimplemented, ZeroTrainsAndIsAnErrorForARunJob) {
  // ZeRO shards training state (train/zero.h): both training modes take it ...
  EXPECT_TRUE(problems_of({"graph.enabled=false", "train.zero_optimization.enabled=true",
                           "train.zero_optimization.stage=3"},
                          Purpose::training)
                  .empty());
  EXPECT_TRUE(problems_of({"train.zero_optimization.enabled=true",
                           "train.dist.pipeline_parallel_size=2"},
                          Purpose::graph_training)
                  .empty());
  // ... a run job (inference) has nothing to shard.
  EXPECT_TRUE(contains(
      only_problem({"train.zero_optimization.enabled=true"}, Purpose::inference_job),
      "<command line>: key 'train.zero_optimization.enabled' = true: ZeRO shards training state"));
  // Its stage alone asks for nothing.
  EXPECT_TRUE(problems_of({"train.zero_optimization.stage=2"}, Purpose::inference_job).empty());
  // `libai-actor plan` costs it for training (Note [ZeRO memory model]), not for inference.
  EXPECT_TRUE(problems_of({"train.zero_optimization.enabled=true"}, Purpose::what_if_plan).empty());
  EXPECT_TRUE(contains(only_problem({"train.zero_optimization.enabled=true",
                                     "job._target_=generate"},
                                    Purpose::what_if_plan),
                       "key 'train.zero_optimization.enabled' = true: ZeRO shards training's "
                       "model state; this plan is of a generate job, which is inference"));
}

TEST(Unimplemented, NamesTheFileAndLine) {
  testing::TempDir dir;
  const std::string path =
      dir.write("job.yaml", "_base_: '" + kDefault + "'\ntrain:\n  amp:\n    enabled: true\n");
  const std::vector<std::string> problems =
      unimplemented_problems(load_libai_config(path).root(), Purpose::inference_job);
  ASSERT_EQ(problems.size(), 1u) << ::testing::PrintToString(problems);
  EXPECT_EQ(problems[0], path +
                             ":4:14: key 'train.amp.enabled' = true: train.amp applies to "
                             "training; run jobs are inference (they compute in f32)");
}

TEST(Unimplemented, RunJobs) {
  EXPECT_TRUE(contains(only_problem({"graph.enabled=false"}, Purpose::inference_job),
                       "key 'graph.enabled' = false: eager execution of a run job is not "
                       "implemented"));
  EXPECT_TRUE(
      contains(only_problem({"train.activation_checkpoint.enabled=true"}, Purpose::inference_job),
               "activation checkpointing applies to training; run jobs are inference"));
  for (const char* what_if : {"train.dist.device_speed=[1]", "train.dist.device_memory=[8]",
                              "train.dist.layer_memory=1", "train.dist.activation_memory=0.5"}) {
    const std::string problem = only_problem({what_if}, Purpose::inference_job);
    EXPECT_TRUE(contains(problem,
                         "a what-if planning key, read only by `libai-actor plan` of a "
                         "job without model costs"))
        << problem;
  }
  // Every problem at once, none hidden behind the first.
  EXPECT_EQ(problems_of({"graph.enabled=false", "train.amp.enabled=true",
                         "train.dist.layer_memory=1", "train.zero_optimization.enabled=true"},
                        Purpose::inference_job)
                .size(),
            4u);
}

TEST(Unimplemented, GraphTraining) {
  // Pipeline, data and tensor parallelism, activation checkpointing and evaluation run on the
  // actor runtime.
  EXPECT_TRUE(
      problems_of(
          {"train.dist.pipeline_parallel_size=2", "train.dist.data_parallel_size=2",
           "train.activation_checkpoint.enabled=true", "train.evaluation.enabled=true",
           "train.dist.pipeline_schedule=interleaved", "train.dist.virtual_pipeline_size=2"},
          Purpose::graph_training)
          .empty());
  EXPECT_TRUE(contains(only_problem({"train.amp.enabled=true"}, Purpose::graph_training),
                       "mixed precision through the training stage actors"));
  EXPECT_TRUE(contains(only_problem({"train.train_epoch=2"}, Purpose::graph_training),
                       "graph-mode training counts steps"));
}

TEST(Unimplemented, AutoParallelIsSearchedByPlanGraphTrainingAndRunJobsOnly) {
  for (Purpose purpose : {Purpose::graph_training, Purpose::inference_job})
    EXPECT_TRUE(problems_of({"graph.auto_parallel.enabled=true"}, purpose).empty())
        << purpose_name(purpose);
  EXPECT_TRUE(contains(only_problem({"graph.auto_parallel.enabled=true", "graph.enabled=false"},
                                    Purpose::training),
                       "the layout search runs in `libai-actor plan`"));
  EXPECT_TRUE(contains(only_problem({"graph.auto_parallel.enabled=true"}, Purpose::what_if_plan),
                       "the layout search needs a model's costs"));
}

TEST(Unimplemented, Training) {
  const std::string graph = only_problem({}, Purpose::training);
  EXPECT_TRUE(contains(graph,
                       "key 'graph.enabled' = true: this is eager training"))
      << graph;
  // Eager pipeline training exists; only a custom split of the layers is refused.
  EXPECT_TRUE(contains(only_problem({"graph.enabled=false",
                                     "train.dist.custom_pipeline_stage_id=[0, 0, 1, 1]"},
                                    Purpose::training),
                       "cuts the layers evenly"));
  // Chunks per rank without a pipeline would be read by nothing: refused in both modes.
  EXPECT_TRUE(contains(only_problem({"graph.enabled=false", "train.dist.virtual_pipeline_size=2",
                                     "train.dist.pipeline_schedule=interleaved"},
                                    Purpose::training),
                       "key 'train.dist.virtual_pipeline_size' = 2: model chunks per pipeline rank "
                       "need pipeline_parallel_size > 1"));
  EXPECT_TRUE(contains(only_problem({"train.dist.virtual_pipeline_size=2"},
                                    Purpose::graph_training),
                       "need pipeline_parallel_size > 1"));
  EXPECT_TRUE(contains(only_problem({"graph.enabled=false", "train.cluster.device_slowdown=[1, 2]"},
                                    Purpose::training),
                       "a device key of the actor runtime"));
  EXPECT_TRUE(contains(
      only_problem({"graph.enabled=false", "train.dist.device_speed=[1]"}, Purpose::training),
      "a what-if planning key, read only by `libai-actor plan`"));
  // The training keys themselves are implemented.
  EXPECT_TRUE(
      problems_of({"graph.enabled=false", "train.amp.enabled=true", "train.amp.dtype=f16",
                   "train.activation_checkpoint.enabled=true", "train.num_accumulation_steps=4",
                   "optim._target_=sgd", "train.scheduler._target_=WarmupPolynomialLR",
                   "train.dist.data_parallel_size=2", "train.dist.tensor_parallel_size=2"},
                  Purpose::training)
          .empty());
}

TEST(Unimplemented, WhatIfPlans) {
  // Planning a training job: checkpointing changes the costs the planner assumes.
  EXPECT_TRUE(
      contains(only_problem({"train.activation_checkpoint.enabled=true"}, Purpose::what_if_plan),
               "the planner does not model recomputation yet"));
  EXPECT_TRUE(problems_of({"train.amp.enabled=true"}, Purpose::what_if_plan).empty());
  // Planning an inference job: training keys do not apply.
  EXPECT_TRUE(contains(
      only_problem({"job._target_=generate", "train.amp.enabled=true"}, Purpose::what_if_plan),
      "train.amp applies to training; this plan is of a generate job, which is inference"));
  EXPECT_TRUE(contains(only_problem({"graph.enabled=false"}, Purpose::what_if_plan),
                       "eager execution has no plan"));
  EXPECT_TRUE(
      contains(only_problem({"train.cluster.device_slowdown=[1, 2]"}, Purpose::what_if_plan),
               "a what-if plan takes its devices from train.dist.device_speed"));
}

TEST(Unimplemented, CheckThrowsEveryProblem) {
  const Config cfg = load_libai_config(
      kDefault, {"train.amp.enabled=true", "train.activation_checkpoint.enabled=true"});
  const std::string message =
      error_message<Unsupported>([&] { check_implemented(cfg, Purpose::inference_job); });
  EXPECT_TRUE(contains(message,
                       "2 settings are not implemented for a run job:\n  "
                       "<command line>: key 'train.amp.enabled'"))
      << message;
  EXPECT_TRUE(contains(message, "\n  <command line>: key 'train.activation_checkpoint.enabled'"))
      << message;
  EXPECT_NO_THROW(check_implemented(load_libai_config(kDefault), Purpose::inference_job));
}

}  // namespace
}  // namespace libai::config
