// Sharded checkpoints (train/checkpoint/sharded.h) on the tiny GPT-2 of tests/data/training:
// - several fake layouts (ranks as threads, run_spmd_threads) each write the pieces they would
//   own: tensor-parallel blocks split along dim 0 (the vocabulary of 97 over 2 and 3 ranks,
//   32-element vectors over 3: uneven, padded), and each block's flat range split over the
//   data-parallel ranks as ZeRO would; the reader gives back every parameter and optimizer
//   state tensor bitwise as the one-device run holds them, and a one-device run resumed from
//   any of them continues with the uninterrupted run's losses bitwise;
// - damage (a missing shard, overlapping pieces, a truncated shard, a bad layout.json) is one
//   error naming the file and what is wrong; last_checkpoint() skips an incomplete folder;
// - merge: the Hugging Face folder of either format loads with models::load_model and gives
//   the trained model's logits.
#include <gtest/gtest.h>

#include <fstream>

#include "models/convert.h"
#include "ops/ops.h"
#include "runtime/autograd.h"
#include "runtime/comm/spmd.h"
#include "tests/runtime/checkpoint_fixtures.h"
#include "train/checkpoint/sharded.h"
#include "training_fixtures.h"

namespace libai::train {
namespace {

namespace fs = std::filesystem;
using checkpoint::testing::ScratchDir;
using testing::TrainingFixture;
using testing::expect_error;

struct OneDeviceRun {
  std::unique_ptr<models::Model> model;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<LrScheduler> schedule;
  std::unique_ptr<TrainStep> step;
  explicit OneDeviceRun(const TrainingFixture& f) {
    model = models::load_model(f.folder);
    model->set_requires_grad(true);
    optimizer =
        make_optimizer(default_param_groups(*model, f.group_options()), f.optimizer_options());
    schedule = std::make_unique<LrScheduler>(f.schedule_options());
    step = std::make_unique<TrainStep>(*model, *optimizer, schedule.get(), f.step_options());
  }
  double train(const TrainingFixture& f) { return step->run(f.micro_batches(step->steps_done())).loss; }
  TrainingProgress progress() const {
    TrainingProgress p;
    p.iteration = step->steps_done();
    p.consumed_samples = p.iteration * 4;
    return p;
  }
};

std::vector<uint8_t> bytes_of(const Tensor& t) {
  Tensor c = t.is_contiguous() ? t : t.clone_raw();
  const auto* p = static_cast<const uint8_t*>(c.data_ptr());
  return {p, p + c.nbytes()};
}

// What world rank (tp_rank, dp_rank) of a fake layout owns: every parameter's tp block (split
// along dim 0 over `tp`, padded like models::ParameterInfo says), its flat range cut over `dp`.
std::vector<OwnedSlice> fake_slices(OneDeviceRun& run, int tp, int tp_rank, int dp, int dp_rank) {
  std::map<std::string, Tensor> state = run.optimizer->state_tensors();
  std::vector<OwnedSlice> out;
  for (auto& whole_info : run.model->parameter_infos()) {
    models::ParameterInfo info = whole_info;
    Shape block_shape = info.logical_shape;
    if (tp > 1) {
      info.split_dim = 0;
      info.tp_rank = tp_rank;
      info.tp_size = tp;
      block_shape[0] = (block_shape[0] + tp - 1) / tp;
    }
    auto flat = [&](const Tensor& whole) {
      return ops::reshape(ops::contiguous(tp_block(whole, info, block_shape)), {shape_numel(block_shape)});
    };
    const int64_t n = shape_numel(block_shape);
    const int64_t begin = n * dp_rank / dp, end = n * (dp_rank + 1) / dp;
    if (begin == end) continue;
    OwnedSlice slice{.info = info, .local_shape = block_shape, .begin = begin, .end = end};
    slice.values = ops::narrow(flat(*whole_info.tensor), 0, begin, end - begin);
    for (const char* key : {"exp_avg", "exp_avg_sq"})
      slice.state[key] = ops::narrow(flat(state.at(info.name + "." + key)), 0, begin, end - begin);
    slice.state["step"] = state.at(info.name + ".step");
    out.push_back(std::move(slice));
  }
  return out;
}

fs::path save_fake(OneDeviceRun& run, const fs::path& out, int tp, int dp, int max_to_keep = 0) {
  const std::string name = checkpoint_name(run.step->steps_done());
  comm::run_spmd_threads(tp * dp, [&](comm::Communicator& world) {
    const int tp_rank = world.rank() / dp, dp_rank = world.rank() % dp;
    save_sharded_checkpoint(out, name, fake_slices(run, tp, tp_rank, dp, dp_rank), &world,
                            {.dp = dp, .tp = tp, .zero_stage = dp > 1 ? 1 : 0}, *run.model,
                            *run.optimizer, run.optimizer->steps_taken(), run.step->scaler(),
                            run.progress(), max_to_keep, {.schedule = run.schedule.get()});
  });
  return out / name;
}

TEST(ShardedCheckpoint, FakeLayoutsReadBackBitwiseAndResume) {
  const TrainingFixture f("gpt2_adamw");
  ScratchDir scratch;
  OneDeviceRun run(f);
  std::vector<double> losses;
  for (int s = 0; s < 3; ++s) losses.push_back(run.train(f));
  std::map<std::string, Tensor> state = run.optimizer->state_tensors();
  const std::pair<int, int> layouts[] = {{1, 1}, {2, 2}, {3, 1}, {1, 3}};  // (tp, dp)
  std::vector<fs::path> folders;
  for (const auto& [tp, dp] : layouts) {
    const fs::path folder =
        save_fake(run, scratch.path() / ("tp" + std::to_string(tp) + "dp" + std::to_string(dp)), tp, dp);
    folders.push_back(folder);
    const auto reader = CheckpointReader::open(folder);
    ASSERT_TRUE(reader.sharded());
    EXPECT_EQ(reader.saved_layout().tp, tp);
    EXPECT_EQ(reader.optimizer_steps(), 3);
    EXPECT_EQ(reader.progress().iteration, 3);
    size_t count = 0;
    for (auto& [name, tensor] : run.model->named_parameters()) {
      ++count;
      const Tensor got = reader.parameter(name);
      ASSERT_EQ(got.shape(), tensor->shape()) << name;
      EXPECT_TRUE(bytes_of(got) == bytes_of(*tensor)) << name << " at tp " << tp << " dp " << dp;
      for (const char* key : {"exp_avg", "exp_avg_sq", "step"})
        EXPECT_TRUE(bytes_of(reader.state(name, key)) == bytes_of(state.at(name + "." + key)))
            << name << "." << key << " at tp " << tp << " dp " << dp;
    }
    EXPECT_EQ(reader.parameter_names().size(), count);
  }
  // The uninterrupted run's next steps, and a fresh run resumed from each folder.
  for (int s = 3; s < 5; ++s) losses.push_back(run.train(f));
  for (const fs::path& folder : folders) {
    OneDeviceRun resumed(f);
    const TrainingProgress p =
        load_checkpoint(folder, *resumed.model, *resumed.optimizer, resumed.step->scaler());
    resumed.step->set_steps_done(p.iteration);
    for (int s = 3; s < 5; ++s)
      EXPECT_EQ(resumed.train(f), losses[size_t(s)]) << folder << " step " << s;
  }
}

TEST(ShardedCheckpoint, DamagedFoldersGiveOneClearError) {
  const TrainingFixture f("gpt2_adamw");
  ScratchDir scratch;
  OneDeviceRun run(f);
  run.train(f);
  const fs::path good = save_fake(run, scratch.path() / "good", 2, 2);
  ASSERT_NO_THROW(CheckpointReader::open(good));
  int copies = 0;
  auto copy = [&] {
    const fs::path dir = scratch.path() / ("damaged" + std::to_string(copies++)) / good.filename();
    fs::create_directories(dir.parent_path());
    fs::copy(good, dir, fs::copy_options::recursive);
    return dir;
  };

  const fs::path missing = copy();
  fs::remove(missing / "shards/rank_00001.safetensors");
  expect_error<NotFound>([&] { CheckpointReader::open(missing); },
                         {"rank_00001.safetensors", "missing"});

  const fs::path truncated = copy();
  fs::resize_file(truncated / "shards/rank_00002.safetensors",
                  fs::file_size(truncated / "shards/rank_00002.safetensors") / 2);
  expect_error<CorruptInput>([&] { CheckpointReader::open(truncated); }, {"rank_00002.safetensors"});

  const fs::path bad_json = copy();
  std::ofstream(bad_json / "layout.json") << "{\"format\": ";
  expect_error<CorruptInput>([&] { CheckpointReader::open(bad_json); },
                             {"layout.json", "not valid JSON"});

  // Two pieces of one tp block moved onto each other: sizes still match their tensors.
  const fs::path overlapping = copy();
  nlohmann::json layout;
  std::ifstream(overlapping / "layout.json") >> layout;
  auto& pieces = layout["parameters"]["embed.weight"]["pieces"];
  ASSERT_EQ(pieces.size(), 4u);  // 2 tp blocks x 2 dp ranges
  for (auto& p : pieces)
    if (p["begin"].get<int64_t>() > 0) {
      p["begin"] = p["begin"].get<int64_t>() - 1;
      p["end"] = p["end"].get<int64_t>() - 1;
    }
  std::ofstream(overlapping / "layout.json") << layout.dump();
  expect_error<CorruptInput>([&] { CheckpointReader::open(overlapping); },
                             {"embed.weight", "overlap", "shards/rank_"});

  // A piece outside its tensor's block.
  const fs::path outside = copy();
  std::ifstream(outside / "layout.json") >> layout;
  layout["parameters"]["embed.weight"]["pieces"][0]["end"] = 1 << 30;
  std::ofstream(outside / "layout.json") << layout.dump();
  expect_error<CorruptInput>([&] { CheckpointReader::open(outside); }, {"embed.weight", "outside"});

  // last_checkpoint: a newer folder with a missing shard is not complete.
  const fs::path out = scratch.path() / "out";
  fs::create_directories(out);
  fs::copy(good, out / "model_0000001", fs::copy_options::recursive);
  fs::copy(missing, out / "model_0000009", fs::copy_options::recursive);
  fs::copy(truncated, out / "model_0000008", fs::copy_options::recursive);
  std::ofstream(out / "last_checkpoint") << "model_0000009\n";
  EXPECT_EQ(last_checkpoint(out), out / "model_0000001");
  fs::copy(good, out / "model_0000010", fs::copy_options::recursive);
  EXPECT_EQ(last_checkpoint(out), out / "model_0000010");
}

// save_sharded_checkpoint publishes like save_checkpoint: last_checkpoint names the newest,
// max_to_keep prunes, no temp folder is left.
TEST(ShardedCheckpoint, PublishesAtomicallyAndPrunes) {
  const TrainingFixture f("gpt2_adamw");
  ScratchDir scratch;
  OneDeviceRun run(f);
  const fs::path out = scratch.path() / "out";
  for (int s = 0; s < 3; ++s) {
    run.train(f);
    save_fake(run, out, 1, 2, /*max_to_keep=*/2);
  }
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(out)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"last_checkpoint", "model_0000002", "model_0000003"}));
  EXPECT_EQ(last_checkpoint(out), out / "model_0000003");
}

TEST(ShardedCheckpoint, MergeOfEitherFormatLoadsWithTheTrainedLogits) {
  const TrainingFixture f("gpt2_adamw");
  ScratchDir scratch;
  OneDeviceRun run(f);
  for (int s = 0; s < 2; ++s) run.train(f);
  const fs::path sharded = save_fake(run, scratch.path() / "sharded", 2, 2);
  const fs::path whole = save_checkpoint(scratch.path() / "whole", "model_0000002", *run.model,
                                         *run.optimizer, nullptr, run.progress(), 0);
  const Tensor ids = f.micro_batch(0, 0).at("input_ids");
  autograd::NoGradGuard no_grad;
  const auto expected = run.model->forward({{"input_ids", ids}}).at("logits").to_vector<float>();
  for (const fs::path& folder : {sharded, whole}) {
    const fs::path hf = scratch.path() / ("hf_" + folder.parent_path().filename().string());
    merge_checkpoint(folder, hf);
    // The family's own names, as convert's hf layout writes them.
    const fs::path converted = scratch.path() / "converted";
    models::convert_model(whole, converted, models::CheckpointLayout::hf);
    EXPECT_EQ(checkpoint::SafetensorsFile::open((hf / "model.safetensors").string()).names(),
              checkpoint::SafetensorsFile::open((converted / "model.safetensors").string()).names());
    auto merged = models::load_model(hf);
    const auto got = merged->forward({{"input_ids", ids}}).at("logits").to_vector<float>();
    ASSERT_EQ(got.size(), expected.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, double(std::abs(got[i] - expected[i])));
    EXPECT_LE(worst, 1e-6) << folder;
  }
}

}  // namespace
}  // namespace libai::train
