// `libai-actor plan` of a real model's training config (graph.enabled true, model.config): the
// training plan from the model's costs (plan/train_plan.h). The devices' timings are fixed by
// train.cluster.profiles, so the split is deterministic; the memory is checked against GPT-2's
// parameters counted from its architecture (16 bytes each: weight, gradient, AdamW's moments).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "tests/bin/cli_fixture.h"

namespace libai::testing {
namespace {

// A random GPT-2 of 8 layers, width 32, inner 64, 503 tokens, 64 positions, tied head.
constexpr int64_t kHidden = 32, kInner = 64, kVocab = 503, kPositions = 64;
// Per layer: attention (c_attn 3h x h + 3h, c_proj h x h + h), MLP (h x ff + ff, ff x h + h),
// two norms (2h each).
constexpr int64_t kLayerParams =
    (4 * kHidden * kHidden + 4 * kHidden) + (2 * kHidden * kInner + kInner + kHidden) + 4 * kHidden;
constexpr int64_t kEmbeddingParams = (kVocab + kPositions) * kHidden;  // wte, wpe
constexpr int64_t kHeadParams = 2 * kHidden + kVocab * kHidden;        // ln_f, the tied table

class TrainPlan : public ModelCommands {
 protected:
  // A training config of the model over two nodes, node 0's device `slow` times slower (its
  // profile fixed: a layer 1 ms forward, 2 ms backward at speed 1).
  std::string config(const std::string& dist, double slow = 2, const std::string& extra = "",
                     const std::string& node0_extra = "") {
    std::ofstream(scratch_.file("config.json"))
        << R"({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 8,
               "n_embd": 32, "n_head": 4, "n_inner": 64, "n_positions": 64, "vocab_size": 503,
               "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
               "initializer_range": 0.02, "bos_token_id": 2, "eos_token_id": 2,
               "tie_word_embeddings": true})";
    const std::string configs = LIBAI_SOURCE_DIR "/configs/common/";
    const std::string path = scratch_.file("train.yaml");
    auto device = [&](double s, const std::string& more) {
      return "{matmul_gflops: " + std::to_string(100 / s) +
             ", memory_bandwidth_gbs: " + std::to_string(10 / s) +
             ", layer_seconds: " + std::to_string(0.001 * s) +
             ", layer_step_seconds: " + std::to_string(0.002 * s) + more + "}";
    };
    std::ofstream(path) << "_base_: [" << configs << "train.yaml, " << configs << "optim.yaml, "
                        << configs << "graph.yaml]\n"
                        << "graph: {enabled: true}\n"
                        << "model: {config: " << scratch_.file("config.json") << "}\n"
                        << "data: {_target_: gpt, prefix: unused, seq_length: 16}\n"
                        << "train:\n  train_micro_batch_size: 2\n  num_accumulation_steps: 4\n"
                        << "  dist: " << dist << "\n"
                        << "  cluster: {nodes: 2, profiles: {node0:cpu:0: "
                        << device(slow, node0_extra) << ", node1:cpu:0: " << device(1, "") << "}}\n"
                        << extra;
    return path;
  }

  static int64_t layers_of(const json& stage) { return stage["layers"].get<int64_t>(); }
};

TEST_F(TrainPlan, MeasuredBalanceGivesTheFastDeviceMoreLayersAndCountsTheMemory) {
  const std::string path = config("{pipeline_parallel_size: 2, balance: measured}");
  const json plan = run_json("plan '" + path + "'");
  ASSERT_TRUE(plan.is_object());
  EXPECT_EQ(plan["workload"], "train");
  EXPECT_EQ(plan["schedule"], "1f1b");
  EXPECT_DOUBLE_EQ(plan["backward_factor"].get<double>(), 2.0);  // 2 ms / 1 ms, as timed
  EXPECT_TRUE(plan["backward_factor_measured"].get<bool>());
  const json& stages = plan["stages"];
  ASSERT_EQ(stages.size(), 2u);
  std::map<std::string, int64_t> layers_on;
  for (const json& s : stages) layers_on[s["devices"][0].get<std::string>()] = layers_of(s);
  EXPECT_EQ(layers_on["node0:cpu:0"] + layers_on["node1:cpu:0"], 8);
  EXPECT_GT(layers_on["node1:cpu:0"], layers_on["node0:cpu:0"]) << plan.dump(2);
  for (const json& s : stages)  // backward = 2 x forward everywhere
    EXPECT_NEAR(s["backward_seconds"].get<double>(), 2 * s["forward_seconds"].get<double>(), 1e-12);

  // Memory: weights as counted from the architecture (f32), gradients as much, AdamW twice.
  const json& memory = plan["memory"];
  ASSERT_EQ(memory.size(), 2u);
  for (int k = 0; k < 2; ++k) {
    const int64_t params = layers_of(stages[size_t(k)]) * kLayerParams +
                           (k == 0 ? kEmbeddingParams : 0) + (k == 1 ? kHeadParams : 0);
    EXPECT_DOUBLE_EQ(memory[size_t(k)]["weight_bytes"].get<double>(), 4.0 * double(params)) << k;
    EXPECT_DOUBLE_EQ(memory[size_t(k)]["gradient_bytes"].get<double>(), 4.0 * double(params));
    EXPECT_DOUBLE_EQ(memory[size_t(k)]["optimizer_bytes"].get<double>(), 8.0 * double(params));
  }
  // 1F1B over 2 stages: stage 0 stashes 2 micro-batches at its peak, stage 1 one; the same
  // bytes per layer and micro-batch on both.
  EXPECT_EQ(memory[0]["stashed_micro_batches"], 2);
  EXPECT_EQ(memory[1]["stashed_micro_batches"], 1);
  EXPECT_NEAR(memory[0]["activation_bytes"].get<double>() / (2.0 * double(layers_of(stages[0]))),
              memory[1]["activation_bytes"].get<double>() / double(layers_of(stages[1])), 1e-6);

  // The text: the split, forward and backward per stage, memory, timeline and bubble.
  const Result text = run("plan '" + path + "'");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  for (const char* expected :
       {"training plan: 8 layers of gpt2", "balance measured", " forward + ",
        " backward per micro-batch",
        "memory per rank (f32 params, grads and AdamW optimizer state, no ZeRO",
        "predicted timeline of one step", "predicted step time", "bubble ",
        "ideal (p-1)/(m+p-1) = 1/5 = 20.0%"})
    EXPECT_NE(text.out.find(expected), std::string::npos) << expected << "\nin:\n" << text.out;

  // Against the uniform split of the same devices: a shorter predicted step.
  const json uniform = run_json("plan '" + config("{pipeline_parallel_size: 2}") + "'");
  EXPECT_EQ(layers_of(uniform["stages"][0]), 4);
  EXPECT_LT(plan["step_seconds"].get<double>(), uniform["step_seconds"].get<double>());
}

// Under activation checkpointing a layer keeps only its input: tokens x hidden f32 per
// micro-batch, 2 x 16 x 32 x 4 = 4096 bytes.
TEST_F(TrainPlan, ActivationCheckpointingStashesEachLayersInput) {
  const json plan = run_json("plan '" +
                             config("{pipeline_parallel_size: 2, pipeline_schedule: gpipe}", 2,
                                    "  activation_checkpoint: {enabled: true}\n") +
                             "'");
  ASSERT_TRUE(plan.is_object());
  for (int k = 0; k < 2; ++k)  // GPipe: all 4 micro-batches stashed on every stage
    EXPECT_DOUBLE_EQ(plan["memory"][size_t(k)]["activation_bytes"].get<double>(),
                     4.0 * double(layers_of(plan["stages"][size_t(k)])) * 4096.0)
        << k;
}

TEST_F(TrainPlan, ADeviceWithoutTheMemoryIsNamed) {
  const std::string path =
      config("{pipeline_parallel_size: 2}", 2, "", ", free_memory_bytes: 100000");
  const Result r = run("plan '" + path + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("DOES NOT FIT"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("the training plan does not fit: pipeline rank 0"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("node0:cpu:0"), std::string::npos) << r.err;
}

// "204.38 KiB", "1.20 MiB": binary units to two decimals, as the plan prints bytes.
std::string kib(double bytes) {
  if (bytes == 0) return "0 B";
  const char* unit = bytes < 1024 * 1024 ? "KiB" : "MiB";
  char text[48];
  std::snprintf(text, sizeof text, "%.2f %s", bytes / (bytes < 1024 * 1024 ? 1024 : 1024 * 1024),
                unit);
  return text;
}

// ZeRO-1 at DP2 x PP2 (uniform: 4 layers a stage): each rank's model state by Note [ZeRO memory
// model], from the parameters counted here from the architecture: params 4 Psi, grads 4 Psi +
// 4 Psi / 2 (the whole gradients and the owned shard), optimizer 8 Psi / 2, and in flight the
// staging of one unit's reduce-scatter, 4 bytes an element of the largest unit.
TEST_F(TrainPlan, Zero1MemoryPerRankAtDp2Pp2) {
  const std::string path = config("{data_parallel_size: 2, pipeline_parallel_size: 2}", 2,
                                  "  zero_optimization: {enabled: true, stage: 1}\n");
  const json plan = run_json("plan '" + path + "'");
  ASSERT_TRUE(plan.is_object());
  EXPECT_EQ(plan["zero_stage"], 1);
  EXPECT_EQ(plan["dp"], 2);
  const double psi[2] = {double(4 * kLayerParams + kEmbeddingParams),
                         double(4 * kLayerParams + kHeadParams)};
  // The rest unit: the embedding (wte, wpe) on stage 0, the head (the tied table, ln_f) on
  // stage 1, each larger than a layer, so the largest unit.
  const double rest[2] = {double(kEmbeddingParams), double(kHeadParams)};
  ASSERT_GT(rest[1], double(kLayerParams));
  const json& memory = plan["memory"];
  ASSERT_EQ(memory.size(), 2u);
  for (int k = 0; k < 2; ++k) {
    const json& m = memory[size_t(k)];
    EXPECT_EQ(layers_of(plan["stages"][size_t(k)]), 4);
    EXPECT_EQ(m["devices"].size(), 2u) << "a stage runs on both replicas' devices";
    EXPECT_DOUBLE_EQ(m["parameters"].get<double>(), psi[k]) << k;
    EXPECT_DOUBLE_EQ(m["largest_layer"].get<double>(), double(kLayerParams)) << k;
    EXPECT_DOUBLE_EQ(m["rest_unit"].get<double>(), rest[k]) << k;
    EXPECT_DOUBLE_EQ(m["largest_unit"].get<double>(), rest[k]) << k;
    EXPECT_DOUBLE_EQ(m["weight_bytes"].get<double>(), 4 * psi[k]) << k;
    EXPECT_DOUBLE_EQ(m["gradient_bytes"].get<double>(), 4 * psi[k] + 4 * psi[k] / 2) << k;
    EXPECT_DOUBLE_EQ(m["optimizer_bytes"].get<double>(), 8 * psi[k] / 2) << k;
    EXPECT_DOUBLE_EQ(m["in_flight_bytes"].get<double>(), 4 * rest[k]) << k;
    EXPECT_DOUBLE_EQ(m["total_bytes"].get<double>(), 8 * psi[k] + 12 * psi[k] / 2 + 4 * rest[k] +
                                                         m["activation_bytes"].get<double>())
        << k;
  }

  const Result text = run("plan '" + path + "'");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("memory per rank (f32 params, grads and AdamW optimizer state, ZeRO-1 "
                          "over dp 2; in flight: the staging of one unit's reduce-scatter;"),
            std::string::npos)
      << text.out;
  for (int k = 0; k < 2; ++k) {
    const std::string line = "(stage " + std::to_string(k) +
                             "): " + kib(memory[size_t(k)]["total_bytes"].get<double>()) +
                             " = params " + kib(4 * psi[k]) + " + grads " + kib(6 * psi[k]) +
                             " + optimizer " + kib(4 * psi[k]) + " + in flight " +
                             kib(4 * rest[k]) + " + activations ";
    EXPECT_NE(text.out.find(line), std::string::npos) << line << "\nin:\n" << text.out;
  }
  EXPECT_NE(text.out.find("(ZeRO-1 over dp 2) each of"), std::string::npos) << text.out;
}

// ZeRO-3 keeps the rest (the embedding) gathered with its whole gradients beside a layer's
// gathered parameters, whole gradients and staging: max(8 R + 12 U, 12 R). Without ZeRO over
// dp 2 the all-reduce buckets are in flight, a copy of the gradients; over one replica ZeRO
// saves nothing: the same 16 bytes a parameter as no ZeRO, which has no buckets there, and
// what is in flight on top.
TEST_F(TrainPlan, Zero3CountsTheUnitInFlightAndDp1SavesNothing) {
  const json plan = run_json("plan '" +
                             config("{data_parallel_size: 2, pipeline_parallel_size: 2}", 2,
                                    "  zero_optimization: {enabled: true, stage: 3}\n") +
                             "'");
  ASSERT_TRUE(plan.is_object());
  const double psi0 = double(4 * kLayerParams + kEmbeddingParams);
  const double u = double(kLayerParams), r = double(kEmbeddingParams);
  const json& m = plan["memory"][0];
  EXPECT_DOUBLE_EQ(m["weight_bytes"].get<double>(), 4 * psi0 / 2);
  EXPECT_DOUBLE_EQ(m["in_flight_bytes"].get<double>(), std::max(8 * r + 12 * u, 12 * r));
  EXPECT_GT(8 * r + 12 * u, 12 * r) << "the layer term is the one checked";

  const json no_zero =
      run_json("plan '" + config("{data_parallel_size: 2, pipeline_parallel_size: 2}", 2) + "'");
  ASSERT_TRUE(no_zero.is_object());
  EXPECT_EQ(no_zero["zero_stage"], 0);
  EXPECT_DOUBLE_EQ(no_zero["memory"][0]["in_flight_bytes"].get<double>(), 4 * psi0);

  const std::string one_replica =
      config("{pipeline_parallel_size: 2}", 2, "  zero_optimization: {enabled: true, stage: 2}\n");
  const Result one = run("plan '" + one_replica + "'");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_NE(one.out.find("ZeRO-2 over dp 1: one data-parallel rank holds every shard, so ZeRO "
                         "saves nothing"),
            std::string::npos)
      << one.out;
  const json zero2 = run_json("plan '" + one_replica + "'");
  const json zero0 = run_json("plan '" + one_replica + "' train.zero_optimization.enabled=false");
  ASSERT_TRUE(zero2.is_object() && zero0.is_object());
  const double psi[2] = {psi0, double(4 * kLayerParams + kHeadParams)};
  const double rest[2] = {r, double(kHeadParams)};
  for (int k = 0; k < 2; ++k) {
    const json &z2 = zero2["memory"][size_t(k)], &z0 = zero0["memory"][size_t(k)];
    for (const json* z : {&z2, &z0})
      EXPECT_DOUBLE_EQ((*z)["weight_bytes"].get<double>() + (*z)["gradient_bytes"].get<double>() +
                           (*z)["optimizer_bytes"].get<double>(),
                       16 * psi[k])
          << k;
    EXPECT_DOUBLE_EQ(z0["in_flight_bytes"].get<double>(), 0) << "no buckets over one replica";
    EXPECT_DOUBLE_EQ(z2["in_flight_bytes"].get<double>(),
                     std::max(4 * rest[k] + 8 * u, 8 * rest[k]))
        << k;
    EXPECT_DOUBLE_EQ(z2["total_bytes"].get<double>() - z0["total_bytes"].get<double>(),
                     z2["in_flight_bytes"].get<double>())
        << k;
  }
}

// Without a model, train.dist.layer_memory is a layer's model state without ZeRO (16 bytes a
// parameter): 1 GiB a layer is 2^26 parameters, each layer a unit and no rest. ZeRO-3 over
// dp 4: 16 Psi / 4 + 12 U.
TEST_F(TrainPlan, WhatIfPlansShardTheLayerMemory) {
  const std::string path = scratch_.file("what_if_zero.yaml");
  std::ofstream(path) << "train:\n  dist: {pipeline_parallel_size: 2, data_parallel_size: 4, "
                         "pipeline_num_layers: 8, layer_memory: 1, device_memory: [2, 2]}\n"
                         "  zero_optimization: {enabled: true, stage: 3}\n";
  const Result r = run("plan '" + path + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  // 4 layers a stage: 4 GiB of model state over 4 ranks, and one layer's gathered parameters,
  // whole gradients and staging: 0.75 GiB; 1.75 GiB fits 2 GiB.
  EXPECT_NE(r.out.find("(stage 0): 1.75 GiB = params 256.00 MiB + grads 256.00 MiB + optimizer "
                       "512.00 MiB + in flight 768.00 MiB + activations 0 B (ZeRO-3 over dp 4) "
                       "each of 2.00 GiB"),
            std::string::npos)
      << r.out;
  // Without ZeRO the same layers need 4 GiB a stage: no fit.
  const Result zero0 = run("plan '" + path + "' train.zero_optimization.enabled=false");
  EXPECT_EQ(zero0.exit_code, 1) << zero0.out;
  EXPECT_NE(zero0.out.find("DOES NOT FIT"), std::string::npos) << zero0.out;

  // ZeRO applies to training only.
  const Result generate = run("plan '" + path + "' job._target_=generate");
  EXPECT_EQ(generate.exit_code, 1);
  EXPECT_NE(generate.err.find("key 'train.zero_optimization.enabled' = true: ZeRO shards "
                              "training's model state; this plan is of a generate job"),
            std::string::npos)
      << generate.err;
}

TEST_F(TrainPlan, JsonIsRefusedWhereItIsNotImplemented) {
  const std::string path = scratch_.file("what_if.yaml");
  std::ofstream(path) << "train: {dist: {pipeline_parallel_size: 2, pipeline_num_layers: 4}}\n";
  const Result r = run("plan '" + path + "' --json");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.err.find("--json is implemented for the training plans of models"), std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace libai::testing
