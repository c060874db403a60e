// Sharded checkpoint save and load throughput against the disk, in one run: a GPT-2-shaped
// model trained one step at dp ranks on threads with ZeRO-1 (so every rank owns a shard of the
// optimizer state and rank 0 the parameters), saved with train::save_sharded_checkpoint (every
// rank writes its shard, fsynced; rank 0 writes layout.json and publishes the folder) and
// loaded back with train::load_stage_checkpoint (the reader assembles whole tensors, each rank
// keeps its shard). The peer: the same bytes written as dp files by dp threads at once, each
// fsynced, and read back, in the same folder. Bytes are the shard files' sizes.
//
//   bench_checkpoint_io [--dir DIR] [--layers 12] [--hidden 768] [--vocab 8192] [--dp 2] [--reps 3]
#include <CLI/CLI.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <vector>

#include "bench/summary.h"
#include "models/init.h"
#include "runtime/comm/spmd.h"
#include "runtime/threads.h"
#include "train/pipeline_eager.h"
#include "train/checkpoint/sharded.h"

namespace libai {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string dir = "checkpoint_io_bench";
  int layers = 12, hidden = 768, vocab = 8192, dp = 2, reps = 3;
};

// Drops the page cache so that reads come from the disk (root only; false where refused, and
// the reads are then warm for the checkpoint and the peer alike).
bool drop_page_cache() {
  ::sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  f << "1\n";
  f.flush();
  return bool(f);
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The disk: `sizes[i]` bytes written to file i by thread i (each fsynced), then read back.
std::pair<double, double> raw_disk(const fs::path& dir, const std::vector<size_t>& sizes) {
  fs::create_directories(dir);
  std::vector<std::thread> threads;
  const auto t0 = Clock::now();
  for (size_t i = 0; i < sizes.size(); ++i)
    threads.emplace_back([&, i] {
      std::vector<char> buffer(size_t(8) << 20, char(i));
      const int fd = ::open((dir / ("raw_" + std::to_string(i))).c_str(),
                            O_WRONLY | O_CREAT | O_TRUNC, 0644);
      for (size_t done = 0; done < sizes[i];) {
        const size_t n = std::min(buffer.size(), sizes[i] - done);
        if (::write(fd, buffer.data(), n) != ssize_t(n)) std::perror("write");
        done += n;
      }
      ::fsync(fd);
      ::close(fd);
    });
  for (auto& t : threads) t.join();
  const double write = seconds_since(t0);
  threads.clear();
  drop_page_cache();
  const auto t1 = Clock::now();
  for (size_t i = 0; i < sizes.size(); ++i)
    threads.emplace_back([&, i] {
      std::vector<char> buffer(size_t(8) << 20);
      const int fd = ::open((dir / ("raw_" + std::to_string(i))).c_str(), O_RDONLY);
      while (::read(fd, buffer.data(), buffer.size()) > 0) {
      }
      ::close(fd);
    });
  for (auto& t : threads) t.join();
  const double read = seconds_since(t1);
  for (size_t i = 0; i < sizes.size(); ++i) fs::remove(dir / ("raw_" + std::to_string(i)));
  return {write, read};
}

}  // namespace
}  // namespace libai

int main(int argc, char** argv) {
  using namespace libai;
  Options o;
  CLI::App app{"Sharded checkpoint save / load throughput against the disk"};
  app.add_option("--dir", o.dir, "a folder on the disk to measure (created, then removed)");
  app.add_option("--layers", o.layers);
  app.add_option("--hidden", o.hidden);
  app.add_option("--vocab", o.vocab);
  app.add_option("--dp", o.dp);
  app.add_option("--reps", o.reps);
  CLI11_PARSE(app, argc, argv);
  const fs::path dir = fs::absolute(o.dir);
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::vector<double> save_s, load_s, write_s, read_s;
  double bytes = 0;
  bool cold = false;
  comm::run_spmd_threads(o.dp, [&](comm::Communicator& c) {
    set_thread_budget(Device::cpu(0), 1);
    std::shared_ptr<comm::Communicator> world(&c, [](comm::Communicator*) {});
    auto config = models::HfConfig::from_json({{"model_type", "gpt2"},
                                               {"architectures", {"GPT2LMHeadModel"}},
                                               {"vocab_size", o.vocab},
                                               {"n_embd", o.hidden},
                                               {"n_head", 12},
                                               {"n_layer", o.layers},
                                               {"n_positions", 16}});
    auto model = models::create_model(config, {}, train::virtual_stage_parts(o.layers, 1)[0]);
    models::init_parameters(*model, 7);
    model->set_requires_grad(true);
    const auto setup = train::make_pipeline_rank(world, {.dp = o.dp, .pp = 1, .tp = 1});
    std::vector<models::Model*> parts{model.get()};
    auto optimizer = train::make_optimizer(train::stage_param_groups(parts, {.lr = 1e-4}), {});
    const train::StageLayout layout{.dp = o.dp, .dp_rank = setup.coordinates.dp,
                                    .micro_batch_size = 1};
    train::StageStep step(parts, *optimizer, nullptr,
                          {.num_accumulation_steps = 1, .dropout = false, .zero_stage = 1}, layout,
                          setup.groups);
    train::EagerPipelineRank rank(step, train::pipeline_program("1f1b", 1, 1, 1)[0], layout,
                                  nullptr);
    std::vector<int64_t> ids(16);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(i * 31 % size_t(o.vocab));
    rank.run({{{"input_ids", Tensor::from_vector(ids, {1, 16})}}});
    const train::ShardedLayout saved{.dp = o.dp, .zero_stage = 1};
    for (int r = 0; r < o.reps; ++r) {
      c.barrier();
      auto t0 = Clock::now();
      const fs::path folder = train::save_sharded_checkpoint(
          dir / "out", train::checkpoint_name(r + 1), step.owned_slices(), world.get(), saved,
          *model, *optimizer, step.optimizer_steps(), nullptr, {.iteration = r + 1},
          /*max_to_keep=*/0);
      c.barrier();
      const double save = seconds_since(t0);
      if (c.rank() == 0) cold = drop_page_cache();
      c.barrier();
      t0 = Clock::now();
      train::load_stage_checkpoint(train::CheckpointReader::open(folder), parts, step);
      c.barrier();
      const double load = seconds_since(t0);
      if (c.rank() != 0) continue;
      std::vector<size_t> sizes;
      bytes = 0;
      for (const auto& entry : fs::directory_iterator(folder / "shards")) {
        sizes.push_back(size_t(entry.file_size()));
        bytes += double(entry.file_size());
      }
      const auto [write, read] = raw_disk(dir / "raw", sizes);
      fs::remove_all(folder);  // outside the timings (a save with max_to_keep prunes it)
      save_s.push_back(save);
      load_s.push_back(load);
      write_s.push_back(write);
      read_s.push_back(read);
      std::fprintf(stderr, "[checkpoint_io] rep %d/%d: save %.2f s, load %.2f s\n", r + 1, o.reps,
                   save, load);
    }
  });
  fs::remove_all(dir);
  auto rate = [&](const std::vector<double>& s) { return bytes / bench::summarize(s).median / 1e6; };
  std::printf("GPT-2 shape: %d layers, hidden %d, vocab %d; ZeRO-1 at dp %d on threads; %.1f MB "
              "of shards (parameters + AdamW state); median of %d\n\n",
              o.layers, o.hidden, o.vocab, o.dp, bytes / 1e6, o.reps);
  std::printf("| what | checkpoint MB/s | disk MB/s (same bytes, %d files, same run) | ratio |\n"
              "|---|---|---|---|\n",
              o.dp);
  std::printf("| save (write + fsync + publish) | %.0f | %.0f | %.2f |\n", rate(save_s),
              rate(write_s), rate(save_s) / rate(write_s));
  std::printf("| load (read + assemble + shard), %s | %.0f | %.0f | %.2f |\n",
              cold ? "page cache dropped" : "page cache warm (dropping it was refused)",
              rate(load_s), rate(read_s), rate(load_s) / rate(read_s));
  return 0;
}
