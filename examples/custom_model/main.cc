// A model and a task pipeline from outside the library (docs/BRING_YOUR_OWN_MODEL.md): this
// program declares the byte encoder family (byte_encoder.h) and a text classification pipeline
// (text_classification.h), registers the family, and runs both as a user would, against the
// PyTorch reference that tools/make_custom_model_fixture.py wrote:
//
//   1. the model on one device: logits and every hidden state
//   2. the model at TP = 2 (two ranks on threads), and through pipeline stage actors: PP = 2,
//      PP = 2 x TP = 2, DP = 2
//   3. the task pipeline on one device and on PP = 2 x TP = 2: the same answers
//   4. four training steps (AdamW, clipping, 2 micro-batches each) on one device, at TP = 2, at
//      PP = 2 (1F1B over the eager SPMD pipeline) and at DP = 2: every step's loss and
//      gradient norm, and the weights after training on one device
//
//   custom_model [DATA_DIR]     # default: the data/ folder beside this file
//
// Prints each comparison with its error and exits 1 when one is over its tolerance.
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "actors/jobs/distributed_model.h"
#include "byte_encoder.h"
#include "models/stages/stage.h"
#include "models/weights.h"
#include "ops/ops.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/comm/mesh.h"
#include "runtime/comm/spmd.h"
#include "text_classification.h"
#include "train/optimizer.h"
#include "train/pipeline_eager.h"
#include "train/train_step.h"

#ifndef CUSTOM_MODEL_DATA
#define CUSTOM_MODEL_DATA "data"
#endif

namespace {

using namespace libai;
using json = nlohmann::json;
namespace fs = std::filesystem;

// Comparisons, printed as they are made; failed() when one was over its tolerance.
class Checks {
 public:
  void add(const std::string& what, double error, double tolerance) {
    const bool ok = error <= tolerance;
    failures_ += ok ? 0 : 1;
    std::printf("  %-58s %9.2e  (tolerance %.0e)%s\n", what.c_str(), error, tolerance,
                ok ? "" : "  FAILED");
    std::fflush(stdout);
  }
  bool failed() const { return failures_ > 0; }

 private:
  int failures_ = 0;
};

// max |a - b| / max |b|.
double relative_error(const Tensor& got, const Tensor& want) {
  if (got.shape() != want.shape()) return INFINITY;
  const auto a = got.to_vector<double>(), b = want.to_vector<double>();
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / scale;
}

struct Reference {
  fs::path folder;  // the model
  checkpoint::SafetensorsFile tensors;
  json facts;

  explicit Reference(const fs::path& data)
      : folder(data / "byte_encoder"),
        tensors(checkpoint::SafetensorsFile::open((data / "reference.safetensors").string())) {
    std::ifstream in(data / "reference.json");
    LIBAI_CHECK(in.good(), "cannot open ", (data / "reference.json").string());
    facts = json::parse(in);
  }
  Tensor operator[](const std::string& name) const { return tensors.tensor(name); }
  models::TensorMap inputs() const {
    return {{"input_ids", tensors.tensor("input_ids")},
            {"attention_mask", tensors.tensor("attention_mask")}};
  }
  int steps() const { return facts["training"]["steps"].get<int>(); }
  int accumulation() const { return facts["training"]["accumulation"].get<int>(); }
  models::TensorMap micro_batch(int step, int k) const {
    const std::string p = "s" + std::to_string(step) + ".m" + std::to_string(k) + ".";
    return {{"input_ids", tensors.tensor(p + "input_ids")},
            {"attention_mask", tensors.tensor(p + "attention_mask")},
            {"labels", tensors.tensor(p + "labels")}};
  }
};

// 1 and 2: the model's outputs, eager and spread.
void check_model(const Reference& ref, Checks& checks) {
  std::printf("the model (logits and hidden states against PyTorch):\n");
  models::pipelines::EagerRunner eager(models::load_model(ref.folder));
  const models::TensorMap out = eager.forward(ref.inputs());
  for (const auto& [name, t] : out)
    checks.add("one device: " + name, relative_error(t, ref[name]), 1e-5);

  std::vector<Tensor> tp_logits(2);
  comm::run_spmd_threads(2, [&](comm::Communicator& comm) {
    std::shared_ptr<comm::Communicator> tp(&comm, [](comm::Communicator*) {});
    models::pipelines::EagerRunner rank(models::load_model(ref.folder, {.tp = tp}));
    tp_logits[size_t(comm.rank())] = rank.forward(ref.inputs()).at("logits");
  });
  for (int r = 0; r < 2; ++r)
    checks.add("TP 2, rank " + std::to_string(r) + ": logits", relative_error(tp_logits[size_t(r)], ref["logits"]),
               1e-5);

  for (const actors::LayoutSizes sizes : {actors::LayoutSizes{.dp = 1, .pp = 2, .tp = 1},
                                          actors::LayoutSizes{.dp = 1, .pp = 2, .tp = 2},
                                          actors::LayoutSizes{.dp = 2, .pp = 1, .tp = 1}}) {
    actors::DistributedModel spread(ref.folder, {.sizes = sizes});
    const models::TensorMap got = spread.forward(ref.inputs());
    const std::string layout = "stage actors DP " + std::to_string(sizes.dp) + " x PP " +
                               std::to_string(sizes.pp) + " x TP " + std::to_string(sizes.tp);
    for (const std::string name : {"logits", "last_hidden_state"})
      checks.add(layout + ": " + name, relative_error(got.at(name), ref[name]), 1e-5);
  }
}

// 3: the task pipeline, the same on one device and spread.
void check_pipeline(const Reference& ref, Checks& checks) {
  std::printf("the text classification pipeline (scores against PyTorch's softmax):\n");
  const auto texts = ref.facts["texts"];
  const auto score_error = [&](const json& answers) {
    double worst = 0;
    for (size_t i = 0; i < texts.size(); ++i)
      for (const auto& entry : answers.at(i))
        worst = std::max(worst, std::abs(entry["score"].get<double>() -
                                         ref.facts["answers"][i]["scores"][entry["label"].get<std::string>()]
                                             .get<double>()));
    return worst;
  };
  models::pipelines::EagerRunner eager(models::load_model(ref.folder));
  examples::TextClassification on_one(eager);
  const json one = on_one(texts);
  checks.add("one device: every label's score", score_error(one), 1e-6);
  const json top = on_one(texts[0], {{"top_k", 1}});
  std::printf("    \"%s\" -> %s\n", texts[0].get<std::string>().c_str(), top.dump().c_str());

  actors::DistributedModel spread(ref.folder, {.sizes = {.dp = 1, .pp = 2, .tp = 2}});
  examples::TextClassification on_four(spread);
  const json four = on_four(texts);
  checks.add("stage actors PP 2 x TP 2: every label's score", score_error(four), 1e-6);
  double worst = 0;
  for (size_t i = 0; i < texts.size(); ++i)
    for (size_t j = 0; j < one[i].size(); ++j) {
      worst = std::max(worst, std::abs(one[i][j]["score"].get<double>() - four[i][j]["score"].get<double>()));
      if (one[i][j]["label"] != four[i][j]["label"]) worst = INFINITY;
    }
  checks.add("PP 2 x TP 2 against one device: labels and scores", worst, 1e-6);
  try {
    on_one(texts[0], {{"temperature", 2}});
    checks.add("an unknown parameter is refused", 1, 0);
  } catch (const Error& e) {
    std::printf("    an unknown parameter: %s\n", e.what());
  }
}

// The optimizer and step of the reference: AdamW with LiBai's groups, constant lr, clipping.
std::unique_ptr<train::Optimizer> optimizer_of(const Reference& ref,
                                               const std::vector<train::ParamGroup>& groups) {
  const json& t = ref.facts["training"];
  return train::make_optimizer(groups, {.kind = train::OptimizerKind::adamw,
                                        .beta1 = t["betas"][0].get<double>(),
                                        .beta2 = t["betas"][1].get<double>(),
                                        .eps = t["eps"].get<double>()});
}
train::ParamGroupOptions group_options(const Reference& ref) {
  return {.lr = ref.facts["training"]["lr"].get<double>(),
          .weight_decay = ref.facts["training"]["weight_decay"].get<double>()};
}
train::TrainStepOptions step_options(const Reference& ref, int64_t accumulation) {
  return {.num_accumulation_steps = accumulation,
          .clip_grad_max_norm = ref.facts["training"]["clip_grad_max_norm"].get<double>()};
}

using Figures = std::vector<std::vector<std::pair<double, double>>>;  // per rank, per step

// Training at dp x tp (no pipeline): TrainStep on each rank. Rank 0 of a one-device run
// exports its weights under the checkpoint's names into `final_weights`.
Figures train_flat(const Reference& ref, int dp, int tp, checkpoint::NamedTensors* final_weights) {
  const comm::DeviceMesh mesh{.dp = dp, .pp = 1, .tp = tp};
  Figures figures(size_t(mesh.size()));
  comm::run_spmd_threads(mesh.size(), [&](comm::Communicator& world) {
    const comm::MeshGroups groups = comm::make_mesh_groups(world, mesh);
    auto model = models::load_model(ref.folder, {.tp = tp > 1 ? groups.tp : nullptr});
    model->set_requires_grad(true);
    auto optimizer = optimizer_of(ref, train::default_param_groups(*model, group_options(ref)));
    const int64_t accumulation = ref.accumulation() / dp;
    train::TrainStep step(*model, *optimizer, nullptr, step_options(ref, accumulation),
                          {.tp = tp > 1 ? groups.tp : nullptr, .dp = dp > 1 ? groups.dp : nullptr});
    for (int s = 0; s < ref.steps(); ++s) {
      std::vector<models::TensorMap> mine;
      for (int64_t k = 0; k < accumulation; ++k)  // Note [Micro-batch order] in train_step.h
        mine.push_back(ref.micro_batch(s, int(k * dp + groups.coordinates.dp)));
      const train::StepResult r = step.run(mine);
      figures[size_t(world.rank())].push_back({r.loss, r.grad_norm});
    }
    if (final_weights && mesh.size() == 1)
      *final_weights = models::export_parameters(*model, model->weight_map());
  });
  return figures;
}

// Training at PP = 2 x tp: the eager SPMD pipeline, 1F1B, each rank holding its stage's part.
Figures train_pipeline(const Reference& ref, int tp) {
  const comm::DeviceMesh mesh{.dp = 1, .pp = 2, .tp = tp};
  const int layers = models::stages::pipeline_num_layers(models::HfConfig::load(ref.folder));
  const std::vector<models::StageSpec> specs = train::virtual_stage_parts(layers, mesh.pp);
  Figures figures(size_t(mesh.size()));
  comm::run_spmd_threads(mesh.size(), [&](comm::Communicator& world_ref) {
    std::shared_ptr<comm::Communicator> world(&world_ref, [](comm::Communicator*) {});
    const train::PipelineRankSetup setup = train::make_pipeline_rank(world, mesh);
    const int stage = setup.coordinates.pp;
    auto part = models::load_model(ref.folder, {.tp = setup.groups.tp, .part = specs[size_t(stage)]});
    part->set_requires_grad(true);
    const std::vector<models::Model*> parts{part.get()};
    auto optimizer = optimizer_of(ref, train::stage_param_groups(parts, group_options(ref)));
    const int accumulation = ref.accumulation();
    const train::StageLayout layout{.pp = mesh.pp, .stage = stage, .micro_batch_size =
                                        ref.micro_batch(0, 0).at("labels").size(0)};
    train::StageStep step(parts, *optimizer, nullptr, step_options(ref, accumulation), layout,
                          setup.groups);
    train::EagerPipelineRank rank(
        step, train::pipeline_program("1f1b", mesh.pp, accumulation, 1)[size_t(stage)], layout,
        setup.groups.pp);
    for (int s = 0; s < ref.steps(); ++s) {
      std::vector<models::TensorMap> mine;
      for (int k = 0; k < accumulation; ++k) mine.push_back(ref.micro_batch(s, k));
      const train::StepResult r = rank.run(mine);
      figures[size_t(world->rank())].push_back({r.loss, r.grad_norm});
    }
  });
  return figures;
}

// 4: training.
void check_training(const Reference& ref, Checks& checks) {
  std::printf("training, %d steps of %d micro-batches (each step's loss and gradient norm against PyTorch):\n",
              ref.steps(), ref.accumulation());
  const auto compare = [&](const std::string& layout, const Figures& figures) {
    double worst = 0;
    for (const auto& rank : figures)
      for (int s = 0; s < ref.steps(); ++s) {
        const auto& want = ref.facts["steps"][size_t(s)];
        const double loss = want["loss"].get<double>(), norm = want["grad_norm"].get<double>();
        worst = std::max({worst, std::abs(rank.at(size_t(s)).first - loss) / loss,
                          std::abs(rank.at(size_t(s)).second - norm) / norm});
      }
    checks.add(layout + ": losses and gradient norms, every rank", worst, 1e-5);
  };
  checkpoint::NamedTensors final_weights;
  compare("one device", train_flat(ref, 1, 1, &final_weights));
  double worst = 0;
  for (const auto& [name, t] : final_weights) {
    worst = std::max(worst, relative_error(t, ref["final." + name]));
    if (std::getenv("CUSTOM_MODEL_VERBOSE"))
      std::printf("    %-32s %.2e\n", name.c_str(), relative_error(t, ref["final." + name]));
  }
  checks.add("one device: the weights after training", worst, 1e-5);
  compare("TP 2", train_flat(ref, 1, 2, nullptr));
  compare("DP 2", train_flat(ref, 2, 1, nullptr));
  compare("PP 2 (1F1B)", train_pipeline(ref, 1));
  compare("PP 2 x TP 2 (1F1B)", train_pipeline(ref, 2));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const fs::path data = argc > 1 ? fs::path(argv[1]) : fs::path(CUSTOM_MODEL_DATA);
    examples::register_byte_encoder();  // the one line that makes the library know the family
    const Reference ref(data);
    Checks checks;
    check_model(ref, checks);
    check_pipeline(ref, checks);
    check_training(ref, checks);
    std::printf(checks.failed() ? "custom_model: some results differ from PyTorch\n"
                                : "custom_model: every result equals PyTorch's within its tolerance\n");
    return checks.failed() ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_model: %s\n", e.what());
    return 1;
  }
}
