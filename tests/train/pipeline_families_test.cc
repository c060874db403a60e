// The eager SPMD pipeline (train/pipeline_eager.h over train::StageStep, ranks on threads) for
// the families other than GPT-2, against one device: random 4-layer BERT (masked LM and
// pretraining heads), T5 (2 encoder + 2 decoder layers, tied and untied head) and ViT with
// dropout on train 20 steps at TP2 x PP2 and DP2 x PP2, with activation checkpointing, AdamW
// and clipping active. T5 is cut at the encoder / decoder boundary and inside either stack
// (its relative-position bias table then lives on both stages). Every layout runs 4
// micro-batches per step; the reference is train::TrainStep on one device accumulating the
// same 4 micro-batches (masked and padded batches hold different target counts, so the
// mean-per-micro-batch loss is the one to compare): every step's loss and gradient norm
// within 1e-5 relative on every rank, every parameter after the 20 steps within 2e-5 (tied
// copies on the first and last stage included).
//
// The side inputs come from each rank's copy of the micro-batch: labels and masks on the last
// stage, T5's decoder_input_ids (made from labels) and ViT's pixel_values on the first.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>

#include "../models/random_models.h"
#include "tests/common/shards.h"
#include "models/stages/stage.h"
#include "ops/ops.h"
#include "runtime/comm/spmd.h"
#include "train/pipeline_eager.h"

namespace libai::train {
namespace {

namespace fs = std::filesystem;

constexpr int kSteps = 20, kMicro = 2, kSeq = 8, kTarget = 6, kMicroBatches = 4, kVocab = 37;

// Random models with 4 pipeline layers and dropout on, saved once per process.
fs::path random_model(const std::string& name) {
  static std::map<std::string, fs::path> saved;
  if (auto it = saved.find(name); it != saved.end()) return it->second;
  const std::string base = name == "bert_pretraining" ? "bert" : name;
  if (name == "swin")  // not among the random families: its inputs are images of 32 x 32
    return saved[name] = testing::save_random_model(
               {"swin_pipeline",
                {{"model_type", "swin"}, {"architectures", {"SwinForImageClassification"}},
                 {"image_size", 32}, {"patch_size", 4}, {"embed_dim", 16}, {"depths", {2, 2}},
                 {"num_heads", {2, 4}}, {"window_size", 4}, {"mlp_ratio", 2.0},
                 {"num_labels", 3}, {"drop_path_rate", 0.0}, {"hidden_dropout_prob", 0.1},
                 {"attention_probs_dropout_prob", 0.1}}});
  for (auto f : testing::families()) {
    if (f.name != base) continue;
    if (base == "t5" || base == "t5_tied") {
      f.config["num_layers"] = 2;
      f.config["num_decoder_layers"] = 2;
      f.config["dropout_rate"] = 0.1;
    } else if (base == "llama" || base == "qwen2") {
      f.config["num_hidden_layers"] = 4;
      f.config["attention_dropout"] = 0.1;  // the family's only dropout
    } else {
      f.config["num_hidden_layers"] = 4;
      f.config["hidden_dropout_prob"] = 0.1;
      f.config["attention_probs_dropout_prob"] = 0.1;
    }
    if (name == "bert_pretraining") f.config["architectures"] = {"BertForPreTraining"};
    f.name = name + "_pipeline";
    return saved[name] = testing::save_random_model(f);
  }
  ADD_FAILURE() << "no random model " << name;
  return {};
}

// Micro-batch k of step s for the family: random, with padding and ignored targets.
models::TensorMap micro_batch(const std::string& name, int step, int k) {
  const uint32_t seed = 1000 + uint32_t(step) * 16 + uint32_t(k);
  std::mt19937 gen(seed);
  auto ints = [&](const Shape& shape, int64_t low, int64_t high) {
    std::uniform_int_distribution<int64_t> pick(low, high);
    Tensor t = Tensor::empty(shape, DType::i64);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<int64_t>()[i] = pick(gen);
    return t;
  };
  // The second sample's last k + 1 positions are padding: masks differ between micro-batches.
  auto padding_mask = [&](int64_t length) {
    Tensor m = Tensor::full({kMicro, length}, 1.0, DType::i64);
    for (int64_t j = length - 1 - k; j < length; ++j) m.data<int64_t>()[length + j] = 0;
    return m;
  };
  // Targets on some positions only (-100 elsewhere, and on padding).
  auto sparse_labels = [&](const Tensor& mask, int keep_one_in) {
    Tensor labels = ints(mask.shape(), 2, kVocab - 1);
    for (int64_t i = 0; i < labels.numel(); ++i)
      if (mask.data<int64_t>()[i] == 0 || int64_t(gen() % uint32_t(keep_one_in)) != 0)
        labels.data<int64_t>()[i] = -100;
    labels.data<int64_t>()[0] = 5;  // at least one target
    return labels;
  };
  if (name == "vit")
    return {{"pixel_values", testing::normal_tensor({kMicro, 3, 16, 16}, seed)},
            {"labels", ints({kMicro}, 0, 2)}};
  if (name == "swin")
    return {{"pixel_values", testing::normal_tensor({kMicro, 3, 32, 32}, seed)},
            {"labels", ints({kMicro}, 0, 2)}};
  if (name == "t5" || name == "t5_tied") {
    Tensor labels = sparse_labels(padding_mask(kTarget), 1);
    return {{"input_ids", ints({kMicro, kSeq}, 2, kVocab - 1)},
            {"attention_mask", padding_mask(kSeq)},
            {"labels", labels}};
  }
  Tensor mask = padding_mask(kSeq);
  models::TensorMap batch{{"input_ids", ints({kMicro, kSeq}, 2, kVocab - 1)},
                          {"attention_mask", mask},
                          {"token_type_ids", ints({kMicro, kSeq}, 0, 1)},
                          {"labels", sparse_labels(mask, 3)}};
  if (name == "bert_pretraining") batch["next_sentence_label"] = ints({kMicro}, 0, 1);
  if (name == "llama" || name == "qwen2") batch.erase("token_type_ids");
  return batch;
}

ParamGroupOptions group_options() { return {.lr = 1e-2, .weight_decay = 0.01}; }
// eps 1e-6 as in pipeline_eager_test.cc: gradients that are zero in exact arithmetic stay
// rounding noise instead of full-size, layout-dependent updates.
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
  std::vector<std::vector<std::pair<models::ParameterInfo, Tensor>>> params;  // per rank
};

Run one_device(const std::string& name) {
  auto model = models::load_model(random_model(name));
  model->set_requires_grad(true);
  auto optimizer =
      make_optimizer(default_param_groups(*model, group_options()), optimizer_options());
  LrScheduler schedule(schedule_options());
  TrainStep step(*model, *optimizer, &schedule, step_options(kMicroBatches, false));
  Run run;
  run.figures.resize(1);
  run.params.resize(1);
  for (int s = 0; s < kSteps; ++s) {
    std::vector<models::TensorMap> batches;
    for (int k = 0; k < kMicroBatches; ++k) batches.push_back(micro_batch(name, s, k));
    StepResult r = step.run(batches);
    run.figures[0].push_back({r.loss, r.grad_norm});
  }
  for (auto& info : model->parameter_infos())
    run.params[0].push_back({info, info.tensor->detach()});
  return run;
}

struct Case {
  std::string model;
  int dp = 1, tp = 1;
  int cut = 0;  // layers on the first of the 2 stages; 0: virtual_stage_parts' even cut
  bool checkpoint = true;
  int zero = 0;  // ZeRO stage over the data-parallel ranks
};

std::string describe(const Case& c) {
  return c.model + " dp " + std::to_string(c.dp) + " tp " + std::to_string(c.tp) + " pp 2" +
         (c.cut ? " cut " + std::to_string(c.cut) : "") + (c.checkpoint ? " checkpointing" : "") +
         (c.zero ? " zero " + std::to_string(c.zero) : "");
}

void PrintTo(const Case& c, std::ostream* os) { *os << describe(c); }

Run pipeline(const Case& c) {
  const comm::DeviceMesh mesh{.dp = c.dp, .pp = 2, .tp = c.tp};
  const fs::path dir = random_model(c.model);
  const int layers = models::stages::pipeline_num_layers(models::HfConfig::load(dir));
  std::vector<models::StageSpec> specs = virtual_stage_parts(layers, mesh.pp);
  if (c.cut) specs = {{0, c.cut, layers}, {c.cut, layers, layers}};
  Run run;
  run.figures.resize(size_t(mesh.size()));
  run.params.resize(size_t(mesh.size()));
  comm::run_spmd_threads(mesh.size(), [&](comm::Communicator& world_ref) {
    std::shared_ptr<comm::Communicator> world(&world_ref, [](comm::Communicator*) {});
    const PipelineRankSetup setup = make_pipeline_rank(world, mesh);
    const int stage = setup.coordinates.pp, replica = setup.coordinates.dp;
    auto part = models::load_model(dir, {.tp = setup.groups.tp, .part = specs[size_t(stage)]});
    part->set_requires_grad(true);
    std::vector<models::Model*> parts{part.get()};
    auto optimizer =
        make_optimizer(stage_param_groups(parts, group_options()), optimizer_options());
    LrScheduler schedule(schedule_options());
    const int accumulation = kMicroBatches / c.dp;
    const StageLayout layout{
        .pp = mesh.pp, .stage = stage, .dp = c.dp, .dp_rank = replica, .micro_batch_size = kMicro};
    StageStep step(parts, *optimizer, &schedule, step_options(accumulation, c.checkpoint, c.zero), layout,
                   setup.groups);
    EagerPipelineRank rank(step, pipeline_program("1f1b", mesh.pp, accumulation, 1)[size_t(stage)],
                           layout, setup.groups.pp);
    const size_t me = size_t(world->rank());
    for (int s = 0; s < kSteps; ++s) {
      std::vector<models::TensorMap> mine;
      for (int k = 0; k < accumulation; ++k)
        mine.push_back(micro_batch(c.model, s, k * c.dp + replica));  // Note [Micro-batch order]
      StepResult r = rank.run(mine);
      run.figures[me].push_back({r.loss, r.grad_norm});
    }
    if (step.zero()) step.zero()->fetch_all();  // ZeRO-3 keeps only shards between uses
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
  if (info.partly_replicated())  // its listed rows of the whole (models/module.h)
    return {shard, testing::expected_shard(whole, info)};
  const int d = info.split_dim;
  const int64_t size = shard.size(d), start = info.tp_rank * size;
  const int64_t length = std::min(size, info.logical_shape[size_t(d)] - start);
  return {ops::contiguous(ops::narrow(shard, d, 0, length)),
          ops::contiguous(ops::narrow(whole, d, start, length))};
}

void expect_equal(const Run& want, const Run& got, const std::string& what) {
  double worst_loss = 0, worst_param = 0;
  std::string worst_name;
  std::map<std::string, Tensor> reference;
  for (auto& [info, t] : want.params[0]) reference[info.name] = t;
  std::set<std::string> seen;
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
      seen.insert(info.name);
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
  EXPECT_EQ(seen.size(), reference.size()) << what << ": the parts hold every parameter";
  EXPECT_LT(worst_param, 2e-5) << what << ": " << worst_name;
  std::printf("%s: worst relative loss/norm error %.2e, worst parameter difference %.2e\n",
              what.c_str(), worst_loss, worst_param);
}

const Run& reference(const std::string& model) {
  static std::map<std::string, Run> runs;
  if (!runs.contains(model)) runs[model] = one_device(model);
  return runs.at(model);
}

// Note [Weights shared by middle stages]: T5 over 4 stages of one layer each puts the encoder's
// relative position bias table on stages 0 and 1 and the decoder's on 2 and 3: not tied by the
// boundary exchange, so the layout is refused on every rank, naming a weight (the first in
// name order), instead of letting the copies drift.
TEST(PipelineSharedWeights, AWeightOnTwoMiddleStagesIsRefusedNamingIt) {
  const comm::DeviceMesh mesh{.dp = 1, .pp = 4, .tp = 1};
  const fs::path dir = random_model("t5");
  const int layers = models::stages::pipeline_num_layers(models::HfConfig::load(dir));
  ASSERT_EQ(layers, 4);
  const std::vector<models::StageSpec> specs = virtual_stage_parts(layers, mesh.pp);
  std::vector<std::string> errors(size_t(mesh.size()));
  comm::run_spmd_threads(mesh.size(), [&](comm::Communicator& world_ref) {
    std::shared_ptr<comm::Communicator> world(&world_ref, [](comm::Communicator*) {});
    const PipelineRankSetup setup = make_pipeline_rank(world, mesh);
    const int stage = setup.coordinates.pp;
    auto part = models::load_model(dir, {.part = specs[size_t(stage)]});
    part->set_requires_grad(true);
    std::vector<models::Model*> parts{part.get()};
    auto optimizer =
        make_optimizer(stage_param_groups(parts, group_options()), optimizer_options());
    const StageLayout layout{.pp = mesh.pp, .stage = stage, .micro_batch_size = kMicro};
    try {
      StageStep step(parts, *optimizer, nullptr, step_options(1, false), layout, setup.groups);
    } catch (const Error& e) {
      errors[size_t(world->rank())] = e.what();
    }
  });
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("decoder.relative_bias.weight"), std::string::npos) << e;
    EXPECT_NE(e.find("virtual stages 2, 3 of 4"), std::string::npos) << e;
  }
}

class PipelineFamilies : public ::testing::TestWithParam<Case> {};

TEST_P(PipelineFamilies, LossesNormsAndParametersEqualOneDevice) {
  const Case c = GetParam();
  expect_equal(reference(c.model), pipeline(c), describe(c));
}

INSTANTIATE_TEST_SUITE_P(
    Threads, PipelineFamilies,
    ::testing::Values(Case{.model = "bert", .tp = 2}, Case{.model = "bert", .dp = 2},
                      Case{.model = "bert_pretraining", .tp = 2, .checkpoint = false},
                      Case{.model = "bert_pretraining", .dp = 2},
                      Case{.model = "t5", .tp = 2},                 // at the boundary
                      Case{.model = "t5", .dp = 2, .cut = 1},       // inside the encoder
                      Case{.model = "t5_tied", .tp = 2, .cut = 3},  // inside the decoder
                      Case{.model = "t5_tied", .dp = 2, .checkpoint = false},
                      Case{.model = "vit", .tp = 2}, Case{.model = "vit", .dp = 2},
                      Case{.model = "swin", .tp = 2},
                      Case{.model = "swin", .dp = 2},   // 2 | 2: the merge with stage 0
                      Case{.model = "swin", .cut = 1},  // inside stage 0
                      Case{.model = "llama", .tp = 2}, Case{.model = "llama", .dp = 2},
                      Case{.model = "llama", .tp = 4},  // key/value heads copied on 2 ranks
                      Case{.model = "qwen2", .tp = 2}, Case{.model = "qwen2", .dp = 2},
                      // ZeRO's units and shards over the copied key/value rows (each counted
                      // once in the norm), and the tied head's unit
                      Case{.model = "llama", .dp = 2, .tp = 4, .zero = 2},
                      Case{.model = "llama", .dp = 2, .tp = 4, .zero = 3},
                      Case{.model = "qwen2", .dp = 2, .tp = 2, .zero = 3}),
    [](const ::testing::TestParamInfo<Case>& info) {
      std::string name = describe(info.param);
      for (char& ch : name)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return name;
    });

}  // namespace
}  // namespace libai::train
