// Training a Llama with more tensor-parallel ranks than key/value heads (8 query heads over 2
// key/value heads at TP 4 and 8: each key/value head copied on 2 or 4 ranks, Note [Partly
// replicated parameters] in models/module.h) against one device: every step's loss and
// clipped gradient norm, and the trained parameters, equal one device's; the checkpoint saved
// under TP, whole or sharded, holds each key/value head once and loads under another TP size
// (and on one device) with one device's logits.
#include <gtest/gtest.h>

#include "models/model.h"
#include "ops/ops.h"
#include "runtime/comm/mesh.h"
#include "runtime/comm/spmd.h"
#include "runtime/checkpoint/safetensors.h"
#include "tests/models/parity_util.h"
#include "tests/models/random_models.h"
#include "train/checkpoint/gathered.h"
#include "train/checkpoint/sharded.h"
#include "train/train_step.h"

namespace libai::train {
namespace {

namespace fs = std::filesystem;

testing::Family llama8() {
  return {"llama8_kv2",
          nlohmann::json{{"model_type", "llama"}, {"vocab_size", 37}, {"hidden_size", 32},
                         {"num_attention_heads", 8}, {"num_key_value_heads", 2},
                         {"num_hidden_layers", 2}, {"intermediate_size", 48},
                         {"attention_bias", true}, {"tie_word_embeddings", false},
                         {"eos_token_id", 0}}};
}

models::TensorMap batch(int64_t step) {
  return {{"input_ids", testing::ids_tensor({2, 6}, uint32_t(40 + step), 37)}};
}

struct TrainRun {
  std::vector<StepResult> steps;
  std::map<std::string, Tensor> whole;  // the trained parameters (one device's shapes)
};

constexpr int64_t kSteps = 3;

// Trains kSteps steps at `tp` ranks (1: one device); saves at the end to `out` when given
// (whole format) and to `sharded` (the sharded format, tp x dp ranks: the flat blocks cut over
// `dp` as ZeRO would).
TrainRun train(const fs::path& dir, int tp, const fs::path& out = {}, const fs::path& sharded = {},
          int dp = 1) {
  TrainRun run;
  std::mutex mutex;
  comm::run_spmd_threads(tp, [&](comm::Communicator& c) {
    std::shared_ptr<comm::Communicator> group;
    if (tp > 1) group.reset(&c, [](comm::Communicator*) {});
    auto model = models::load_model(dir, {.tp = group});
    model->set_requires_grad(true);
    auto optimizer = make_optimizer(default_param_groups(*model, {.lr = 1e-2}), {});
    TrainStepOptions options;
    options.clip_grad_max_norm = 0.5;  // the norm is above it: clipping applies
    TrainStep step(*model, *optimizer, nullptr, options, {.tp = group});
    std::vector<StepResult> results;
    for (int64_t s = 0; s < kSteps; ++s) results.push_back(step.run({batch(s)}));
    if (!out.empty()) {
      TrainingProgress progress;
      progress.iteration = kSteps;
      save_checkpoint(out, "model_final", *model, *optimizer, nullptr, progress, 0,
                      {.groups = {.tp = group}});
    }
    std::lock_guard lock(mutex);
    if (c.rank() == 0) run.steps = results;
    if (tp == 1)
      for (auto& [name, t] : model->named_parameters()) run.whole[name] = t->detach().clone_raw();
  });
  if (sharded.empty()) return run;
  // The sharded format from the trained ranks' blocks: rank (t, d) of a tp x dp world writes
  // its share d of tp block t. Trained again at tp so each world rank holds its block.
  comm::run_spmd_threads(tp * dp, [&](comm::Communicator& world) {
    const comm::DeviceMesh mesh{.dp = dp, .pp = 1, .tp = tp};
    auto groups = comm::make_mesh_groups(world, mesh);
    auto model = models::load_model(dir, {.tp = tp > 1 ? groups.tp : nullptr});
    model->set_requires_grad(true);
    auto optimizer = make_optimizer(default_param_groups(*model, {.lr = 1e-2}), {});
    TrainStepOptions options;
    options.clip_grad_max_norm = 0.5;
    TrainStep step(*model, *optimizer, nullptr, options, {.tp = tp > 1 ? groups.tp : nullptr});
    for (int64_t s = 0; s < kSteps; ++s) step.run({batch(s)});
    const auto state = optimizer->state_tensors();
    const int d = groups.coordinates.dp;
    std::vector<OwnedSlice> slices;
    for (auto& info : model->parameter_infos()) {
      const int64_t n = info.tensor->numel();
      const int64_t begin = n * d / dp, end = n * (d + 1) / dp;
      OwnedSlice slice{.info = info, .local_shape = info.tensor->shape(), .begin = begin, .end = end};
      auto flat = [&](const Tensor& t) {
        return ops::narrow(ops::reshape(ops::contiguous(t), {n}), 0, begin, end - begin);
      };
      slice.values = flat(*info.tensor);
      for (const char* key : {"exp_avg", "exp_avg_sq"})
        slice.state[key] = flat(state.at(info.name + "." + key));
      slice.state["step"] = state.at(info.name + ".step");
      slices.push_back(std::move(slice));
    }
    TrainingProgress progress;
    progress.iteration = kSteps;
    save_sharded_checkpoint(sharded, "model_0000003", slices, &world, {.dp = dp, .tp = tp},
                            *model, *optimizer, optimizer->steps_taken(), nullptr, progress, 0);
  });
  return run;
}

// Logits of a fixed batch, the checkpoint loaded at `tp` ranks (rank 0's).
Tensor logits_at(const fs::path& checkpoint, int tp, bool sharded) {
  Tensor out;
  comm::run_spmd_threads(tp, [&](comm::Communicator& c) {
    std::shared_ptr<comm::Communicator> group;
    if (tp > 1) group.reset(&c, [](comm::Communicator*) {});
    auto model = models::create_model(models::HfConfig::load(checkpoint), {.tp = group});
    const CheckpointReader reader = CheckpointReader::open(checkpoint);
    EXPECT_EQ(reader.sharded(), sharded);
    for (auto& info : model->parameter_infos())
      info.tensor->copy_from(tp_block(reader.parameter(info.name), info, info.tensor->shape()));
    Tensor logits = model->forward(batch(7)).at("logits");
    if (c.rank() == 0) out = logits.detach();
  });
  return out;
}

TEST(ReplicatedKeyValueHeads, TrainingAndCheckpointsEqualOneDevice) {
  const fs::path dir = testing::save_random_model(llama8());
  const fs::path scratch = dir / "runs";
  const TrainRun single = train(dir, 1, scratch / "one");
  ASSERT_GT(single.steps[0].grad_norm, 0.5);
  auto one_device = models::load_model(scratch / "one" / "model_final");
  const Tensor expected_logits = one_device->forward(batch(7)).at("logits").detach();
  for (int tp : {4, 8}) {
    const std::string at = "tp" + std::to_string(tp);
    const TrainRun run = train(dir, tp, scratch / at, scratch / (at + "_sharded"), /*dp=*/2);
    for (int64_t s = 0; s < kSteps; ++s) {
      EXPECT_NEAR(run.steps[size_t(s)].loss, single.steps[size_t(s)].loss,
                  1e-5 * single.steps[size_t(s)].loss)
          << at << " step " << s;
      EXPECT_NEAR(run.steps[size_t(s)].grad_norm, single.steps[size_t(s)].grad_norm,
                  1e-5 * single.steps[size_t(s)].grad_norm)
          << at << " step " << s;
    }
    // The whole checkpoint: the one-device parameters, each key/value head once.
    auto saved = models::load_model(scratch / at / "model_final");
    for (auto& [name, t] : saved->named_parameters())
      EXPECT_LE(testing::relative_error(*t, single.whole.at(name)), 1e-5) << at << " " << name;
    const fs::path sharded = scratch / (at + "_sharded") / "model_0000003";
    for (const auto& [folder, is_sharded] :
         {std::pair{scratch / at / "model_final", false}, std::pair{sharded, true}})
      for (int load_tp : {1, 2, 4}) {
        EXPECT_LE(testing::relative_error(logits_at(folder, load_tp, is_sharded), expected_logits),
                  1e-5)
            << at << " loaded at tp " << load_tp << (is_sharded ? " (sharded)" : "");
      }
    // The shards hold each row of a fused q/k/v projection once.
    int64_t written = 0;
    for (const auto& entry : fs::directory_iterator(sharded / "shards")) {
      const auto file = checkpoint::SafetensorsFile::open(entry.path().string());
      for (const auto& key : file.names())
        if (key.rfind("p/", 0) == 0 && key.ends_with("/layers.0.attention.qkv.weight"))
          written += shape_numel(file.info(key).shape);
    }
    EXPECT_EQ(written, (8 + 2 * 2) * 4 * 32) << at;
    const CheckpointReader reader = CheckpointReader::open(sharded);
    for (const auto& name : reader.parameter_names())
      EXPECT_LE(testing::relative_error(reader.parameter(name), single.whole.at(name)), 1e-5)
          << at << " sharded " << name;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace libai::train
