// The eager SPMD pipeline (train/pipeline_eager.h over train::StageStep, ranks on threads,
// local communicators) against one device: a random 8-layer GPT-2 with dropout on trains 20
// steps at PP2 and PP4 under GPipe, 1F1B and interleaved 1F1B, DP2 x PP2, TP2 x PP2 and
// DP2 x TP2 x PP2, with activation checkpointing, AdamW and clipping active (a small max norm).
// Every layout runs 4 micro-batches per step (accumulation 4, or 2 per replica at DP2), and the
// reference is train::TrainStep on one device with ONE micro-batch 4x as large: every step's
// loss and gradient norm within 1e-5 relative on every rank; every parameter after the 20
// steps within 2e-5 of one device accumulating the 4 micro-batches (tied embedding copies on
// the first and last stage included).
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "../models/random_models.h"
#include "ops/ops.h"
#include "runtime/comm/spmd.h"
#include "train/pipeline_eager.h"

namespace libai::train {
namespace {

namespace fs = std::filesystem;

constexpr int kLayers = 8, kSteps = 20, kMicro = 2, kSeq = 8, kMicroBatches = 4;

fs::path random_gpt2() {
  static const fs::path dir = [] {
    for (auto f : testing::families()) {
      if (f.name != "gpt2") continue;
      f.config["n_layer"] = kLayers;
      f.config["embd_pdrop"] = 0.1;
      f.config["attn_pdrop"] = 0.1;
      f.config["resid_pdrop"] = 0.1;
      f.name += "_pipeline";
      return testing::save_random_model(f);
    }
    return fs::path();
  }();
  return dir;
}

// The global batch of step s: kMicroBatches x kMicro sequences.
Tensor global_batch(int step) {
  return testing::ids_tensor({kMicroBatches * kMicro, kSeq}, 100 + uint32_t(step), 37);
}
models::TensorMap micro_batch(int step, int k) {
  return {{"input_ids", ops::contiguous(ops::narrow(global_batch(step), 0, k * kMicro, kMicro))}};
}

ParamGroupOptions group_options() { return {.lr = 1e-2, .weight_decay = 0.01}; }
// AdamW with eps 1e-6: some gradients are zero in exact arithmetic (the attention key bias:
// softmax ignores a shift shared by a row's scores) and only rounding noise in f32, which
// eps 1e-8 would blow up to full-size, layout-dependent updates; 1e-6 keeps them ~1e-7.
OptimizerOptions optimizer_options() { return {.eps = 1e-6}; }
LrSchedulerOptions schedule_options() {
  return {.kind = LrSchedule::warmup_cosine, .max_iter = kSteps, .warmup_iter = 2};
}
TrainStepOptions step_options(int accumulation, bool checkpoint, int zero = 0) {
  return {.num_accumulation_steps = accumulation,
          .clip_grad_max_norm = 0.05,  // below every step's norm: clipping always acts
          .activation_checkpoint = checkpoint,
          .dropout = true,
          .seed = 77,
          .zero_stage = zero};
}

struct Run {
  std::vector<std::vector<std::pair<double, double>>> figures;  // per rank: (loss, grad norm)
  // Per rank: every parameter it holds, with its tensor-parallel layout.
  std::vector<std::vector<std::pair<models::ParameterInfo, Tensor>>> params;
};

// One device: one micro-batch of the whole global batch, or the 4 micro-batches accumulated.
Run one_device(bool accumulate) {
  auto model = models::load_model(random_gpt2());
  model->set_requires_grad(true);
  auto optimizer =
      make_optimizer(default_param_groups(*model, group_options()), optimizer_options());
  LrScheduler schedule(schedule_options());
  TrainStep step(*model, *optimizer, &schedule,
                 step_options(accumulate ? kMicroBatches : 1, false));
  Run run;
  run.figures.resize(1);
  run.params.resize(1);
  for (int s = 0; s < kSteps; ++s) {
    std::vector<models::TensorMap> batches;
    if (accumulate)
      for (int k = 0; k < kMicroBatches; ++k) batches.push_back(micro_batch(s, k));
    else
      batches.push_back({{"input_ids", global_batch(s)}});
    StepResult r = step.run(batches);
    run.figures[0].push_back({r.loss, r.grad_norm});
  }
  for (auto& info : model->parameter_infos())
    run.params[0].push_back({info, info.tensor->detach()});
  return run;
}

struct Layout {
  int dp = 1, pp = 2, tp = 1;
  std::string schedule = "1f1b";
  int chunks = 1;
  bool checkpoint = true;
  int zero = 0;  // ZeRO stage (train/zero.h)
  bool f16 = false;  // f16 autocast with dynamic loss scaling
};

std::string describe(const Layout& l) {
  return "dp " + std::to_string(l.dp) + " pp " + std::to_string(l.pp) + " tp " +
         std::to_string(l.tp) + " " + l.schedule + (l.chunks > 1 ? " v2" : "") +
         (l.checkpoint ? " checkpointing" : "") +
         (l.zero ? " zero " + std::to_string(l.zero) : "");
}

Run pipeline(const Layout& l) {
  const comm::DeviceMesh mesh{.dp = l.dp, .pp = l.pp, .tp = l.tp};
  Run run;
  run.figures.resize(size_t(mesh.size()));
  run.params.resize(size_t(mesh.size()));
  comm::run_spmd_threads(mesh.size(), [&](comm::Communicator& world_ref) {
    std::shared_ptr<comm::Communicator> world(&world_ref, [](comm::Communicator*) {});
    const PipelineRankSetup setup = make_pipeline_rank(world, mesh);
    const int stage = setup.coordinates.pp, replica = setup.coordinates.dp;
    const auto specs = virtual_stage_parts(kLayers, l.pp * l.chunks);
    std::vector<std::unique_ptr<models::Model>> owned;
    std::vector<models::Model*> parts;
    for (int c = 0; c < l.chunks; ++c) {
      owned.push_back(models::load_model(
          random_gpt2(), {.tp = setup.groups.tp, .part = specs[size_t(c * l.pp + stage)]}));
      owned.back()->set_requires_grad(true);
      parts.push_back(owned.back().get());
    }
    auto optimizer =
        make_optimizer(stage_param_groups(parts, group_options()), optimizer_options());
    LrScheduler schedule(schedule_options());
    const int accumulation = kMicroBatches / l.dp;
    const StageLayout layout{.pp = l.pp,
                             .stage = stage,
                             .num_chunks = l.chunks,
                             .dp = l.dp,
                             .dp_rank = replica,
                             .micro_batch_size = kMicro};
    TrainStepOptions options = step_options(accumulation, l.checkpoint, l.zero);
    if (l.f16) {
      options.autocast = DType::f16;
      options.loss_scale = GradScalerOptions{.init_scale = 1048576.0, .growth_interval = 4};
    }
    StageStep step(parts, *optimizer, &schedule, options, layout, setup.groups);
    EagerPipelineRank rank(
        step, pipeline_program(l.schedule, l.pp, accumulation, l.chunks)[size_t(stage)], layout,
        setup.groups.pp);
    const size_t me = size_t(world->rank());
    for (int s = 0; s < kSteps; ++s) {
      std::vector<models::TensorMap> mine;
      for (int k = 0; k < accumulation; ++k)
        mine.push_back(micro_batch(s, k * l.dp + replica));  // Note [Micro-batch order]
      StepResult r = rank.run(mine);
      run.figures[me].push_back({r.loss, r.grad_norm});
    }
    if (step.zero()) step.zero()->fetch_all();  // ZeRO-3 keeps only shards between uses
    for (auto* part : parts)
      for (auto& info : part->parameter_infos())
        run.params[me].push_back({info, info.tensor->detach()});
  });
  return run;
}

double relative(double got, double want) { return std::abs(got - want) / std::abs(want); }

// The reference's slice of `whole` that a tensor-parallel shard holds (padding dropped).
std::pair<Tensor, Tensor> comparable(const models::ParameterInfo& info, const Tensor& shard,
                                     const Tensor& whole) {
  if (info.split_dim < 0 || info.tp_size == 1) return {shard, whole};
  const int d = info.split_dim;
  const int64_t size = shard.size(d), start = info.tp_rank * size;
  const int64_t length = std::min(size, info.logical_shape[size_t(d)] - start);
  return {ops::contiguous(ops::narrow(shard, d, 0, length)),
          ops::contiguous(ops::narrow(whole, d, start, length))};
}

// Losses and norms against `want`; parameters against `want_params`.
void expect_equal(const Run& want, const Run& want_params, const Run& got,
                  const std::string& what) {
  double worst_loss = 0, worst_param = 0;
  std::string worst_name;
  std::map<std::string, Tensor> reference;
  for (auto& [info, t] : want_params.params[0]) reference[info.name] = t;
  for (size_t rank = 0; rank < got.figures.size(); ++rank) {
    ASSERT_EQ(got.figures[rank].size(), size_t(kSteps)) << what;
    for (int s = 0; s < kSteps; ++s) {
      const auto [loss, norm] = got.figures[rank][size_t(s)];
      const auto [want_loss, want_norm] = want.figures[0][size_t(s)];
      worst_loss = std::max({worst_loss, relative(loss, want_loss), relative(norm, want_norm)});
      EXPECT_LT(relative(loss, want_loss), 1e-5) << what << ": rank " << rank << " step " << s;
      EXPECT_LT(relative(norm, want_norm), 1e-5) << what << ": rank " << rank << " step " << s;
    }
    for (auto& [info, t] : got.params[rank]) {
      ASSERT_TRUE(reference.contains(info.name)) << what << ": " << info.name;
      auto [mine, theirs] = comparable(info, t, reference.at(info.name));
      auto a = mine.to_vector<float>(), b = theirs.to_vector<float>();
      ASSERT_EQ(a.size(), b.size()) << what << ": " << info.name;
      for (size_t i = 0; i < a.size(); ++i)
        if (double(std::abs(a[i] - b[i])) > worst_param) {
          worst_param = double(std::abs(a[i] - b[i]));
          worst_name = info.name + "[" + std::to_string(i) + "]";
        }
    }
  }
  EXPECT_LT(worst_param, 2e-5) << what << ": " << worst_name;
  std::printf("%s: worst relative loss/norm error %.2e, worst parameter difference %.2e\n",
              what.c_str(), worst_loss, worst_param);
}

const Run& reference() {
  static const Run run = one_device(false);
  return run;
}
const Run& accumulated() {
  static const Run run = one_device(true);
  return run;
}

class PipelineLayouts : public ::testing::TestWithParam<Layout> {};

TEST_P(PipelineLayouts, LossesNormsAndParametersEqualOneDeviceWithA4xBatch) {
  const Layout l = GetParam();
  expect_equal(reference(), accumulated(), pipeline(l), describe(l));
}

INSTANTIATE_TEST_SUITE_P(Threads, PipelineLayouts,
                         ::testing::Values(Layout{.pp = 2, .schedule = "gpipe"},
                                           Layout{.pp = 2, .schedule = "1f1b"},
                                           Layout{.pp = 2, .schedule = "1f1b", .checkpoint = false},
                                           Layout{.pp = 2, .schedule = "interleaved", .chunks = 2},
                                           Layout{.pp = 4, .schedule = "gpipe"},
                                           Layout{.pp = 4, .schedule = "1f1b"},
                                           Layout{.pp = 4, .schedule = "interleaved", .chunks = 2},
                                           Layout{.dp = 2, .pp = 2}, Layout{.pp = 2, .tp = 2},
                                           Layout{.dp = 2, .pp = 2, .tp = 2, .schedule = "gpipe"}),
                         [](const ::testing::TestParamInfo<Layout>& info) {
                           std::string name = describe(info.param);
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

// ZeRO 1, 2 and 3 (train/zero.h): the same figures with the optimizer state, the gradients and
// the parameters sharded over the data-parallel ranks, alone and with pipeline and tensor
// parallelism.
INSTANTIATE_TEST_SUITE_P(
    Zero, PipelineLayouts,
    ::testing::Values(Layout{.dp = 2, .pp = 1, .zero = 1}, Layout{.dp = 2, .pp = 1, .zero = 2},
                      Layout{.dp = 2, .pp = 1, .zero = 3}, Layout{.dp = 4, .pp = 1, .zero = 1},
                      Layout{.dp = 4, .pp = 1, .zero = 2}, Layout{.dp = 4, .pp = 1, .zero = 3},
                      Layout{.dp = 2, .pp = 2, .zero = 1}, Layout{.dp = 2, .pp = 2, .zero = 2},
                      Layout{.dp = 2, .pp = 2, .zero = 3},
                      Layout{.dp = 2, .pp = 2, .tp = 2, .schedule = "gpipe", .zero = 1},
                      Layout{.dp = 2, .pp = 2, .tp = 2, .schedule = "gpipe", .zero = 2},
                      Layout{.dp = 2, .pp = 2, .tp = 2, .schedule = "gpipe", .zero = 3},
                      Layout{.dp = 2, .pp = 2, .schedule = "interleaved", .chunks = 2, .zero = 3},
                      Layout{.dp = 2, .pp = 2, .checkpoint = false, .zero = 3}),
    [](const ::testing::TestParamInfo<Layout>& info) {
      std::string name = describe(info.param);
      for (char& c : name)
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      return name;
    });

// ZeRO under f16 autocast with dynamic loss scaling (from 2^20, growing every 4 steps, so steps
// whose gradients overflow are skipped): the shards' unscaling, overflow agreement and skipped
// steps give the figures of the same layout without ZeRO: the same steps skipped (a non-finite
// norm), losses and norms within 2e-4. ZeRO-1 is within 1e-5; stages 2 and 3 sum each
// micro-batch's gradients as they come (another f32 order), and f16 products, rounded at
// 2^-11, carry such differences into the next steps (measured up to 6e-5).
TEST(ZeroShards, LossScaledF16EqualsTheSameLayoutWithoutZero) {
  const train::Run plain = pipeline({.dp = 2, .pp = 2, .f16 = true});
  int skipped = 0;
  for (const auto& [loss, norm] : plain.figures[0]) skipped += !std::isfinite(norm);
  EXPECT_GT(skipped, 0) << "no step overflowed: the test would not see skipping";
  for (int zero = 1; zero <= 3; ++zero) {
    const train::Run sharded = pipeline({.dp = 2, .pp = 2, .zero = zero, .f16 = true});
    for (size_t rank = 0; rank < sharded.figures.size(); ++rank)
      for (int s = 0; s < kSteps; ++s) {
        const auto [loss, norm] = sharded.figures[rank][size_t(s)];
        const auto [want_loss, want_norm] = plain.figures[rank][size_t(s)];
        const double bound = zero == 1 ? 1e-5 : 2e-4;
        EXPECT_LT(relative(loss, want_loss), bound) << "zero " << zero << " step " << s;
        if (std::isfinite(want_norm))
          EXPECT_LT(relative(norm, want_norm), bound) << "zero " << zero << " step " << s;
        else
          EXPECT_FALSE(std::isfinite(norm)) << "zero " << zero << " step " << s;
      }
  }
}

// The references: one device accumulating the 4 micro-batches equals its 4x batch (losses and
// norms within 1e-5; parameters drift apart by ~1e-4 over 20 AdamW steps, f32 sums in another
// order amplified where Adam divides tiny gradients by their tiny second moments, so the
// layouts' parameters are compared with the accumulating run, which they follow closely).
TEST(PipelineReference, AccumulationOfFourEqualsTheFourTimesBatch) {
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_LT(relative(accumulated().figures[0][size_t(s)].first,
                       reference().figures[0][size_t(s)].first),
              1e-5)
        << "step " << s;
    EXPECT_LT(relative(accumulated().figures[0][size_t(s)].second,
                       reference().figures[0][size_t(s)].second),
              1e-5)
        << "step " << s;
  }
}

// What each ZeRO stage keeps, after one step at DP2 (2 micro-batches per replica): the
// optimizer state of half the parameters per rank; gradients reduce-scattered per unit (at the
// step's end, or after every micro-batch's backward from stage 2 on) and never all-reduced;
// from stage 2 no whole gradient left; at stage 3 no layer's parameters left in memory between
// steps, and each layer gathered for its forward and again for its backward.
TEST(ZeroShards, EachStageShardsWhatItSays) {
  for (int zero = 1; zero <= 3; ++zero) {
    comm::run_spmd_threads(2, [&](comm::Communicator& world_ref) {
      std::shared_ptr<comm::Communicator> world(&world_ref, [](comm::Communicator*) {});
      const PipelineRankSetup setup = make_pipeline_rank(world, {.dp = 2, .pp = 1, .tp = 1});
      auto model = models::load_model(random_gpt2(), {.part = virtual_stage_parts(kLayers, 1)[0]});
      model->set_requires_grad(true);
      std::vector<models::Model*> parts{model.get()};
      auto optimizer =
          make_optimizer(stage_param_groups(parts, group_options()), optimizer_options());
      const StageLayout layout{.dp = 2, .dp_rank = setup.coordinates.dp, .micro_batch_size = kMicro};
      StageStep step(parts, *optimizer, nullptr, step_options(2, true, zero), layout, setup.groups);
      EagerPipelineRank rank(step, pipeline_program("1f1b", 1, 2, 1)[0], layout, nullptr);
      ASSERT_NE(step.zero(), nullptr);
      const int64_t total = model->parameter_count(), units = step.zero()->unit_count();
      EXPECT_EQ(units, kLayers + 1);  // the layers and the rest (embeddings, final norm)
      EXPECT_LE(step.zero()->owned_elements(), total / 2 + units);
      const comm::CommStats before = setup.groups.dp->stats();
      rank.run({micro_batch(0, setup.coordinates.dp), micro_batch(0, 2 + setup.coordinates.dp)});
      const comm::CommStats after = setup.groups.dp->stats();
      int64_t state = 0;
      for (auto& [key, t] : step.zero()->optimizer().state_tensors())
        if (key.ends_with(".exp_avg")) state += t.numel();
      EXPECT_GE(state, total / 2 - units) << "stage " << zero;
      EXPECT_LE(state, total / 2 + units) << "stage " << zero;
      EXPECT_EQ(after.reduce_scatter_calls - before.reduce_scatter_calls,
                zero == 1 ? units : 2 * units) << "stage " << zero;
      // The dp group's only all-reduce is the step's loss, shared by the last stage.
      EXPECT_LE(after.all_reduce_elements - before.all_reduce_elements, 8) << "stage " << zero;
      const int64_t gathers = after.all_gather_calls - before.all_gather_calls;
      // Stage 3: per micro-batch each layer for its forward and its backward, the rest around
      // both; stage 1 and 2: every unit once, after the update.
      EXPECT_EQ(gathers, zero == 3 ? 2 * 2 * units : units) << "stage " << zero;
      for (auto& [name, p] : model->named_parameters()) {
        if (zero >= 2) {
          EXPECT_FALSE(p->grad().defined()) << name;
        }
        if (zero == 3) {
          EXPECT_EQ(p->storage()->data, nullptr) << name << " stayed gathered";
        } else {
          EXPECT_NE(p->storage()->data, nullptr) << name;
        }
      }
    });
  }
}

// Misuse is one clear error.
TEST(PipelineSetup, BadSchedulesAndCutsNameWhatIsWrong) {
  EXPECT_THROW(pipeline_program("zigzag", 2, 4, 1), InvalidArgument);
  EXPECT_THROW(pipeline_program("1f1b", 2, 4, 2), InvalidArgument);
  EXPECT_THROW(pipeline_program("interleaved", 2, 3, 2), InvalidArgument);
  EXPECT_THROW(virtual_stage_parts(3, 4), InvalidArgument);
  auto specs = virtual_stage_parts(7, 3);
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_EQ(specs[0], (models::StageSpec{0, 3, 7}));
  EXPECT_EQ(specs[2], (models::StageSpec{5, 7, 7}));
}

}  // namespace
}  // namespace libai::train
