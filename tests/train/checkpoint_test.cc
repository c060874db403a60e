// Training checkpoints (train/checkpoint/gathered.h) on the tiny torch-trained fixtures of
// tools/make_training_fixtures.py:
// - resume: save, load into a fresh model + optimizer, and the following steps give bitwise the
//   losses and weights of the run that never stopped (GPT-2 with dropout on, so the RNG position
//   counts; ViT under the loss scaler, across its skipped steps; GPT-2 at tensor parallel size 2,
//   whose uneven vocabulary split is gathered and sliced back);
// - a writer SIGKILLed at every crash point of a save (each 64 KiB written, each rename) never
//   leaves a folder that last_checkpoint() returns unless it is complete and loads, and the
//   previous checkpoint stays loadable until the new one is in place;
// - max_to_keep, and one clear error per kind of damage;
// - export: `convert --format hf` of a checkpoint has the Hugging Face names and shapes of the
//   fixture's transformers-written model.safetensors, and load_model of the export gives the
//   checkpoint's logits.
//
// tools/check_hf_export.py closes the loop with transformers itself (not run here: tests never
// need Python). Run once on the checkpoint of ExportToHuggingFaceKeepsTheLogits (kept with
// LIBAI_KEEP_CHECKPOINT=DIR), exported by `libai-actor convert --from DIR --format hf`:
// transformers 5.25.0's GPT2LMHeadModel on the export vs `libai-actor forward --save` of the
// checkpoint, 2 rows of 8 tokens: max |logits difference| 8.9e-8 (docs/CHECKPOINTS.md).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "models/convert.h"
#include "runtime/comm/mesh.h"
#include "runtime/comm/spmd.h"
#include "tests/runtime/checkpoint_fixtures.h"
#include "train/checkpoint/gathered.h"
#include "training_fixtures.h"

namespace libai::train {
namespace {

namespace fs = std::filesystem;
using testing::TrainingFixture;
using testing::expect_error;

using checkpoint::testing::ScratchDir;

// The fixture's model folder with dropout switched on (GPT-2's three probabilities), so a
// resumed run only matches when the dropout masks follow the step and sample position.
fs::path with_dropout(const TrainingFixture& f, const fs::path& dir) {
  fs::create_directories(dir);
  for (const char* file : {"model.safetensors", "generation_config.json"})
    fs::copy_file(f.folder / file, dir / file);
  std::ifstream in(f.folder / "config.json");
  auto config = nlohmann::json::parse(in);
  for (const char* key : {"attn_pdrop", "embd_pdrop", "resid_pdrop"}) config[key] = 0.1;
  std::ofstream(dir / "config.json") << config.dump(2);
  return dir;
}

// One training run on one device (or one rank) with the fixture's setup.
struct TrainingRun {
  std::unique_ptr<models::Model> model;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<LrScheduler> schedule;
  std::unique_ptr<TrainStep> step;

  int dp = 1, dp_rank = 0;

  // groups.dp: this rank trains its share of each global batch (Note [Micro-batch order]).
  TrainingRun(const TrainingFixture& f, const fs::path& model_folder, ParallelGroups groups = {}) {
    models::LoadOptions load;
    load.tp = groups.tp;
    model = models::load_model(model_folder, load);
    model->set_requires_grad(true);
    optimizer =
        make_optimizer(default_param_groups(*model, f.group_options()), f.optimizer_options());
    schedule = std::make_unique<LrScheduler>(f.schedule_options());
    TrainStepOptions options = f.step_options();
    if (groups.dp) {
      dp = groups.dp->size();
      dp_rank = groups.dp->rank();
      options.num_accumulation_steps = f.accumulation / dp;
    }
    step = std::make_unique<TrainStep>(*model, *optimizer, schedule.get(), options, groups);
  }
  StepResult train(const TrainingFixture& f) {
    std::vector<models::TensorMap> mine;
    for (int64_t k = 0; k < f.accumulation / dp; ++k)
      mine.push_back(f.micro_batch(step->steps_done(), k * dp + dp_rank));
    return step->run(mine);
  }
  TrainingProgress progress(const TrainingFixture& f) const {
    TrainingProgress p;
    p.iteration = step->steps_done();
    p.consumed_samples = p.iteration * f.accumulation * int64_t(f.settings()["micro_batch_size"]);
    return p;
  }
  fs::path save(const TrainingFixture& f, const fs::path& dir, int max_to_keep = 0,
                ParallelGroups groups = {}) {
    return save_checkpoint(dir, checkpoint_name(step->steps_done()), *model, *optimizer,
                           step->scaler(), progress(f), max_to_keep,
                           {.schedule = schedule.get(), .groups = groups});
  }
  TrainingProgress resume(const fs::path& folder) {
    TrainingProgress p = load_checkpoint(folder, *model, *optimizer, step->scaler());
    step->set_steps_done(p.iteration);
    return p;
  }
};

std::vector<uint8_t> bytes_of(const Tensor& t) {
  Tensor c = t.is_contiguous() ? t : t.clone_raw();
  const auto* p = static_cast<const uint8_t*>(c.data_ptr());
  return {p, p + c.nbytes()};
}

void expect_same_weights(models::Model& a, models::Model& b) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    ASSERT_EQ(pa[i].first, pb[i].first);
    EXPECT_TRUE(bytes_of(*pa[i].second) == bytes_of(*pb[i].second)) << pa[i].first << " differs";
  }
}

TEST(Checkpoint, ResumedRunEqualsTheUninterruptedRunBitwise) {
  const TrainingFixture f("gpt2_adamw");
  ScratchDir scratch;
  const fs::path folder = with_dropout(f, scratch.path() / "gpt2_dropout");
  const fs::path out = scratch.path() / "out";
  TrainingRun uninterrupted(f, folder);
  std::vector<double> losses;
  for (int s = 0; s < 9; ++s) {
    if (s == 4) uninterrupted.save(f, out);
    losses.push_back(uninterrupted.train(f).loss);
  }
  // Dropout is on: the first step's loss is not the dropout-free reference's.
  EXPECT_NE(losses[0], double(f.step(0)["loss"]));

  auto found = last_checkpoint(out);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->filename(), "model_0000004");
  TrainingRun resumed(f, folder);
  const TrainingProgress p = resumed.resume(*found);
  EXPECT_EQ(p.iteration, 4);
  EXPECT_EQ(p.consumed_samples, 4 * f.accumulation * int64_t(f.settings()["micro_batch_size"]));
  EXPECT_EQ(resumed.optimizer->steps_taken(), 4);
  for (int s = 4; s < 9; ++s) EXPECT_EQ(resumed.train(f).loss, losses[size_t(s)]) << "step " << s;
  expect_same_weights(*resumed.model, *uninterrupted.model);

  // Control: the same weights with a fresh optimizer (no moments) part ways at the second step.
  TrainingRun weights_only(f, *found);
  weights_only.step->set_steps_done(4);
  EXPECT_EQ(weights_only.train(f).loss, losses[4]);
  EXPECT_NE(weights_only.train(f).loss, losses[5]);
}

TEST(Checkpoint, LossScalerStateResumesAcrossSkippedSteps) {
  const TrainingFixture f("vit_scaler");  // steps 4 and 5 overflow and are skipped
  ScratchDir scratch;
  TrainingRun uninterrupted(f, f.folder);
  std::vector<StepResult> results;
  for (int s = 0; s < 9; ++s) {
    if (s == 5) uninterrupted.save(f, scratch.path());  // between the two skipped steps
    results.push_back(uninterrupted.train(f));
  }
  TrainingRun resumed(f, f.folder);
  const TrainingProgress p = resumed.resume(scratch.path() / "model_0000005");
  ASSERT_TRUE(p.loss_scale.has_value());
  EXPECT_EQ(*p.loss_scale, double(f.step(4)["loss_scale"]));
  EXPECT_EQ(resumed.step->scaler()->scale(), double(f.step(4)["loss_scale"]));
  for (int s = 5; s < 9; ++s) {
    StepResult r = resumed.train(f);
    EXPECT_EQ(r.skipped, results[size_t(s)].skipped) << "step " << s;
    EXPECT_EQ(r.loss_scale, results[size_t(s)].loss_scale) << "step " << s;
    if (!r.skipped) {
      EXPECT_EQ(r.loss, results[size_t(s)].loss) << "step " << s;
    }
  }
  expect_same_weights(*resumed.model, *uninterrupted.model);
}

// A child process saves with a hook that SIGKILLs it at crash point `kill_at`; returns whether
// it died by SIGKILL.
bool save_killed_at(TrainingRun& run, const TrainingFixture& f, const fs::path& out, int kill_at) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    int seen = 0;
    set_checkpoint_write_hook([&](const std::string&) {
      if (seen++ == kill_at) ::raise(SIGKILL);
    });
    try {
      run.save(f, out, /*max_to_keep=*/1);
    } catch (...) {
      ::_exit(3);
    }
    ::_exit(0);
  }
  int status = 0;
  for (int waited = 0; waited < 3000; ++waited) {  // 30 s
    if (::waitpid(pid, &status, WNOHANG) == pid)
      return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  ADD_FAILURE() << "the saving child hung (crash point " << kill_at << ")";
  return false;
}

TEST(Checkpoint, AKillAtAnyPointOfASaveNeverLeavesAnIncompleteCheckpoint) {
  const TrainingFixture f("gpt2_adamw");
  ScratchDir scratch;
  TrainingRun run(f, f.folder);
  run.train(f);
  run.train(f);
  // The state saved as model_0000002, then one more step for the save that is killed.
  TrainingRun at_two(f, f.folder);
  at_two.train(f);
  at_two.train(f);
  run.train(f);

  // Every crash point of saving model_0000003 over model_0000002 with max_to_keep 1.
  std::vector<std::string> phases;
  {
    const fs::path counting = scratch.path() / "counting";
    at_two.save(f, counting, 1);
    set_checkpoint_write_hook([&](const std::string& phase) { phases.push_back(phase); });
    run.save(f, counting, 1);
    set_checkpoint_write_hook(nullptr);
  }
  const auto renamed = std::find(phases.begin(), phases.end(), "renamed");
  ASSERT_NE(renamed, phases.end());
  ASSERT_GT(phases.size(), 10u) << "model.safetensors alone is two 64 KiB chunks";
  const int renamed_at = int(renamed - phases.begin());
  std::printf("%zu crash points, the folder in place from the %dth\n", phases.size(),
              renamed_at + 1);

  const fs::path out = scratch.path() / "out";
  for (int k = 0; k < int(phases.size()); ++k) {
    SCOPED_TRACE("killed at " + phases[size_t(k)]);
    fs::remove_all(out);
    at_two.save(f, out, 1);
    ASSERT_TRUE(save_killed_at(run, f, out, k));
    auto found = last_checkpoint(out);
    ASSERT_TRUE(found.has_value());
    const int64_t expected = k >= renamed_at ? 3 : 2;
    EXPECT_EQ(found->filename(), checkpoint_name(expected));
    TrainingRun loaded(f, f.folder);
    EXPECT_EQ(loaded.resume(*found).iteration, expected);
    expect_same_weights(*loaded.model, expected == 3 ? *run.model : *at_two.model);
  }
  // The next save clears the leftovers of a killed one.
  run.save(f, out, 1);
  for (const auto& entry : fs::directory_iterator(out))
    EXPECT_NE(entry.path().filename().string()[0], '.') << entry.path().filename();
}

TEST(Checkpoint, KeepsMaxToKeepNumberedFoldersAndNeverBestOrFinal) {
  const TrainingFixture f("gpt2_adamw");
  ScratchDir scratch;
  TrainingRun run(f, f.folder);
  for (int i = 1; i <= 5; ++i) {
    run.step->set_steps_done(i);
    run.save(f, scratch.path(), 2);
    if (i == 3)
      save_checkpoint(scratch.path(), "model_best", *run.model, *run.optimizer, nullptr,
                      {.iteration = 3, .best_metric = 0.5, .has_best = true}, 2);
  }
  save_checkpoint(scratch.path(), "model_final", *run.model, *run.optimizer, nullptr,
                  run.progress(f), 2);
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(scratch.path()))
    names.insert(entry.path().filename());
  EXPECT_EQ(names, (std::set<std::string>{"last_checkpoint", "model_0000004", "model_0000005",
                                          "model_best", "model_final"}));
  std::ifstream pointer(scratch.path() / "last_checkpoint");
  std::string named;
  pointer >> named;
  EXPECT_EQ(named, "model_final");
  EXPECT_EQ(last_checkpoint(scratch.path())->filename(), "model_final");
  TrainingRun best(f, f.folder);
  const TrainingProgress p = best.resume(scratch.path() / "model_best");
  EXPECT_TRUE(p.has_best);
  EXPECT_EQ(p.best_metric, 0.5);
  EXPECT_EQ(p.iteration, 3);
}

TEST(Checkpoint, DamageGivesOneClearError) {
  const TrainingFixture f("gpt2_adamw");
  ScratchDir scratch;
  TrainingRun run(f, f.folder);
  run.train(f);
  const fs::path good = run.save(f, scratch.path() / "good");
  auto damaged = [&](const std::string& name) {
    const fs::path copy = scratch.path() / name / "model_0000001";
    fs::create_directories(copy.parent_path());
    fs::copy(good, copy, fs::copy_options::recursive);
    return copy;
  };
  auto load = [&](const fs::path& folder) {
    TrainingRun fresh(f, f.folder);
    fresh.resume(folder);
  };
  const fs::path missing = damaged("missing");
  fs::remove(missing / "optimizer.safetensors");
  expect_error<NotFound>([&] { load(missing); }, {"optimizer.safetensors"});
  EXPECT_FALSE(last_checkpoint(missing.parent_path()).has_value());

  const fs::path truncated = damaged("truncated");
  fs::resize_file(truncated / "model.safetensors",
                  fs::file_size(truncated / "model.safetensors") - 100);
  expect_error<CorruptInput>([&] { load(truncated); }, {"model.safetensors"});
  EXPECT_FALSE(last_checkpoint(truncated.parent_path()).has_value());

  const fs::path garbage = damaged("garbage");
  std::ofstream(garbage / "trainer.json") << "{\"format\": ";
  expect_error<CorruptInput>([&] { load(garbage); }, {"trainer.json", "not valid JSON"});

  // A tensor less, a tensor more.
  const auto weights = checkpoint::SafetensorsFile::open((good / "model.safetensors").string());
  checkpoint::NamedTensors fewer, more;
  for (const auto& name : weights.names()) {
    if (name != "layers.1.mlp.up.weight") fewer.emplace_back(name, weights.tensor(name));
    more.emplace_back(name, weights.tensor(name));
  }
  more.emplace_back("layers.2.mlp.up.weight", weights.tensor("layers.1.mlp.up.weight"));
  const checkpoint::Metadata libai{{"format", "libai"}, {"model_type", "gpt2"}};
  const fs::path less = damaged("less");
  checkpoint::save_safetensors((less / "model.safetensors").string(), fewer, libai);
  expect_error<CorruptInput>([&] { load(less); }, {"missing layers.1.mlp.up.weight"});
  const fs::path extra = damaged("extra");
  checkpoint::save_safetensors((extra / "model.safetensors").string(), more, libai);
  expect_error<CorruptInput>([&] { load(extra); }, {"layers.2.mlp.up.weight", "not parameters"});

  // An optimizer moment of the wrong shape.
  const auto state = checkpoint::SafetensorsFile::open((good / "optimizer.safetensors").string());
  checkpoint::NamedTensors bad_state;
  for (const auto& name : state.names())
    bad_state.emplace_back(
        name, name == "embed.weight.exp_avg" ? Tensor::zeros({3, 2}) : state.tensor(name));
  const fs::path shape = damaged("shape");
  checkpoint::save_safetensors((shape / "optimizer.safetensors").string(), bad_state);
  expect_error<CorruptInput>([&] { load(shape); }, {"embed.weight.exp_avg", "[3, 2]"});

  // Another model's config.
  auto config = run.model->config().json();
  config["n_layer"] = 1;
  auto other = models::create_model(models::HfConfig::from_json(config), {});
  auto other_optimizer = make_optimizer(default_param_groups(*other, f.group_options()), {});
  expect_error<InvalidArgument>([&] { load_checkpoint(good, *other, *other_optimizer, nullptr); },
                                {"not the model's config", "n_layer: checkpoint 2, model 1"});

  // A loss scaler the checkpoint does not have.
  GradScaler scaler({});
  expect_error<InvalidArgument>([&] { load_checkpoint(good, *run.model, *run.optimizer, &scaler); },
                                {"loss scaler"});
}

// The hf layout of a checkpoint: names and shapes as transformers wrote the fixture, and the
// same logits through load_model.
TEST(Checkpoint, ExportToHuggingFaceKeepsTheLogits) {
  const TrainingFixture f("gpt2_adamw");
  ScratchDir scratch;
  TrainingRun run(f, f.folder);
  for (int s = 0; s < 3; ++s) run.train(f);
  const fs::path saved = run.save(f, scratch.path() / "out");
  // For tools/check_hf_export.py: keep the run's output folder.
  if (const char* keep = std::getenv("LIBAI_KEEP_CHECKPOINT"))
    fs::copy(scratch.path() / "out", keep, fs::copy_options::recursive);
  const fs::path hf = scratch.path() / "hf";
  models::convert_model(saved, hf, models::CheckpointLayout::hf);

  const auto exported = checkpoint::SafetensorsFile::open((hf / "model.safetensors").string());
  const auto reference =
      checkpoint::SafetensorsFile::open((f.folder / "model.safetensors").string());
  std::map<std::string, Shape> exported_shapes, reference_shapes;
  for (const auto& n : exported.names()) exported_shapes[n] = exported.info(n).shape;
  for (const auto& n : reference.names()) reference_shapes[n] = reference.info(n).shape;
  EXPECT_EQ(exported_shapes, reference_shapes);
  EXPECT_TRUE(fs::exists(hf / "generation_config.json"));

  const Tensor ids = f.micro_batch(0, 0).at("input_ids");
  auto logits = [&](models::Model& m) { return m.forward({{"input_ids", ids}}).at("logits"); };
  auto from_checkpoint = models::load_model(saved);
  auto from_export = models::load_model(hf);
  const Tensor trained = logits(*run.model);
  EXPECT_TRUE(bytes_of(logits(*from_checkpoint)) == bytes_of(trained));
  auto a = logits(*from_export).to_vector<float>(), b = trained.to_vector<float>();
  ASSERT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, double(std::abs(a[i] - b[i])));
  EXPECT_LE(worst, 1e-5);
  // Trained weights, not the initial ones.
  auto initial = models::load_model(f.folder);
  EXPECT_FALSE(bytes_of(logits(*initial)) == bytes_of(trained));
}

// Note [Checkpoints under tensor parallelism]: a DP=2 x TP=2 run saves whole tensors (the
// vocabulary of 97 is split unevenly, 49 + 48 + a padding row) from one of its four ranks; a
// run of that layout resumed from them continues bitwise, and one device reads the same
// checkpoint.
TEST(Checkpoint, TensorParallelSaveGathersAndLoadSlices) {
  const TrainingFixture f("gpt2_adamw");
  ScratchDir scratch;
  const fs::path out = scratch.path() / "out";
  std::vector<double> losses(6), resumed_losses(6);
  auto in_tp2 = [&](const std::function<void(TrainingRun&, ParallelGroups, int)>& body) {
    const comm::DeviceMesh mesh{.dp = 2, .pp = 1, .tp = 2};
    comm::run_spmd_threads(mesh.size(), [&](comm::Communicator& world) {
      auto groups = comm::make_mesh_groups(world, mesh);
      ParallelGroups parallel{.tp = groups.tp, .dp = groups.dp};
      TrainingRun run(f, f.folder, parallel);
      body(run, parallel, world.rank());
    });
  };
  in_tp2([&](TrainingRun& run, ParallelGroups groups, int rank) {
    for (int s = 0; s < 6; ++s) {
      if (s == 3) run.save(f, out, 0, groups);
      const double loss = run.train(f).loss;
      if (rank == 0) losses[size_t(s)] = loss;
    }
  });
  in_tp2([&](TrainingRun& run, ParallelGroups, int rank) {
    run.resume(out / "model_0000003");
    for (int s = 3; s < 6; ++s) {
      const double loss = run.train(f).loss;
      if (rank == 0) resumed_losses[size_t(s)] = loss;
    }
  });
  for (int s = 3; s < 6; ++s)
    EXPECT_EQ(resumed_losses[size_t(s)], losses[size_t(s)]) << "step " << s;

  const auto weights =
      checkpoint::SafetensorsFile::open((out / "model_0000003" / "model.safetensors").string());
  EXPECT_EQ(weights.info("embed.weight").shape, (Shape{97, 32}));
  TrainingRun one_device(f, f.folder);
  one_device.resume(out / "model_0000003");
  for (int s = 3; s < 6; ++s) {
    const double loss = one_device.train(f).loss;
    EXPECT_NEAR(loss, losses[size_t(s)], 1e-5 * losses[size_t(s)]) << "step " << s;
  }
}

}  // namespace
}  // namespace libai::train
