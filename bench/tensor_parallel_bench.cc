// Tensor parallelism on this host: sharded loading (peak resident memory per rank against its
// shard) and GPT-2 forward at TP=2 against TP=1, with the share of time the activation
// all-reduces take. Ranks are forked processes over UCX on loopback (run_spmd_processes).
//
//   bench_tensor_parallel --make-gpt2 DIR [--layers 12 --hidden 768 --heads 12 --vocab 50257]
//   bench_tensor_parallel --load DIR --tp 4          # one JSON line per rank
//   bench_tensor_parallel --forward DIR --tp 2 --batch 8 --seq 128 --reps 3
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "models/convert.h"
#include "models/model.h"
#include "ops/ops.h"
#include "runtime/autograd.h"
#include "runtime/comm/spmd.h"
#include "runtime/memory_stats.h"
#include "runtime/threads.h"
#include <thread>

using namespace libai;
namespace fs = std::filesystem;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void make_gpt2(const fs::path& dir, int layers, int hidden, int heads, int vocab) {
  fs::create_directories(dir);
  nlohmann::json config{{"model_type", "gpt2"}, {"architectures", {"GPT2LMHeadModel"}}, {"vocab_size", vocab},
                        {"n_embd", hidden},     {"n_head", heads},                     {"n_layer", layers},
                        {"n_positions", 1024},  {"eos_token_id", 0}};
  std::ofstream(dir / "config.json") << config.dump(2);
  auto model = models::create_model(models::HfConfig::load(dir), {});
  std::mt19937 gen(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (auto& [name, t] : model->named_parameters()) {
    float* p = t->data<float>();
    for (int64_t i = 0; i < t->numel(); ++i) p[i] = normal(gen);
  }
  models::save_model_weights(*model, dir, models::CheckpointLayout::hf);
  std::printf("wrote %s: %.1f M parameters\n", dir.c_str(), double(model->parameter_count()) / 1e6);
}

void load_ranks(const fs::path& dir, int tp) {
  // The file read time, for scale: every byte once, through the page cache.
  const double t0 = now();
  {
    std::ifstream in(dir / "model.safetensors", std::ios::binary);
    std::vector<char> buffer(1 << 20);
    while (in.read(buffer.data(), std::streamsize(buffer.size())) || in.gcount() > 0) {}
  }
  const double read_s = now() - t0;
  const auto file_bytes = fs::file_size(dir / "model.safetensors");
  comm::run_spmd_processes(tp, [&](comm::Communicator& c) {
    std::shared_ptr<comm::Communicator> group(&c, [](comm::Communicator*) {});
    reset_process_peak_rss();
    const int64_t base_kb = process_status_kb("VmRSS:");
    const double start = now();
    auto model = models::load_model(dir, {.tp = group});
    const double load_s = now() - start;
    int64_t shard = 0;
    for (auto& [name, t] : model->named_parameters()) shard += int64_t(t->nbytes());
    const int64_t peak_kb = process_status_kb("VmHWM:");
    const double peak = double(peak_kb - base_kb) * 1024.0;
    std::printf(
        "{\"rank\": %d, \"tp\": %d, \"file_mb\": %.1f, \"shard_mb\": %.1f, \"peak_rss_growth_mb\": %.1f, "
        "\"peak_over_shard\": %.3f, \"load_s\": %.3f, \"file_read_s\": %.3f}\n",
        c.rank(), tp, double(file_bytes) / 1e6, double(shard) / 1e6, peak / 1e6, peak / double(shard), load_s,
        read_s);
    std::fflush(stdout);
  });
}

void forward_ranks(const fs::path& dir, int tp, int batch, int seq, int reps) {
  const int cores = int(std::thread::hardware_concurrency());
  comm::run_spmd_processes(tp, [&](comm::Communicator& c) {
    std::shared_ptr<comm::Communicator> group(&c, [](comm::Communicator*) {});
    // The host's cores are shared by the ranks: each process computes with its part.
    set_thread_budget(Device::cpu(), std::max(1, cores / tp));
    auto model = models::load_model(dir, {.tp = tp > 1 ? group : nullptr});
    autograd::NoGradGuard no_grad;
    const int64_t hidden = model->config().get_int("n_embd", 768);
    Tensor ids = Tensor::zeros({batch, seq}, DType::i64);
    for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int64_t>()[i] = (i * 7919) % 50000 % model->config().get_int("vocab_size", 50257);
    model->forward({{"input_ids", ids}});  // warm-up
    std::vector<double> times;
    for (int r = 0; r < reps; ++r) {
      c.barrier();
      const double t = now();
      model->forward({{"input_ids", ids}});
      times.push_back(now() - t);
    }
    std::sort(times.begin(), times.end());
    // The all-reduces one forward makes (2 per layer + the embedding), timed alone.
    double reduce_s = 0;
    const int64_t layers = model->config().get_int("n_layer", 12);
    if (tp > 1) {
      Tensor act = Tensor::zeros({batch, seq, hidden});
      c.barrier();
      const double t = now();
      for (int64_t i = 0; i < 2 * layers + 1; ++i) c.all_reduce(act);
      reduce_s = now() - t;
    }
    if (c.rank() == 0)
      std::printf("{\"tp\": %d, \"batch\": %d, \"seq\": %d, \"forward_median_s\": %.4f, \"forward_min_s\": %.4f, "
                  "\"allreduce_s\": %.4f, \"comm_share\": %.3f}\n",
                  tp, batch, seq, times[times.size() / 2], times[0], reduce_s, reduce_s / times[times.size() / 2]);
    std::fflush(stdout);
  });
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode, dir;
  int tp = 2, batch = 8, seq = 128, reps = 3, layers = 12, hidden = 768, heads = 12, vocab = 50257;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--make-gpt2" || a == "--load" || a == "--forward") mode = a.substr(2), dir = next();
    else if (a == "--tp") tp = std::stoi(next());
    else if (a == "--batch") batch = std::stoi(next());
    else if (a == "--seq") seq = std::stoi(next());
    else if (a == "--reps") reps = std::stoi(next());
    else if (a == "--layers") layers = std::stoi(next());
    else if (a == "--hidden") hidden = std::stoi(next());
    else if (a == "--heads") heads = std::stoi(next());
    else if (a == "--vocab") vocab = std::stoi(next());
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  try {
    if (mode == "make-gpt2") make_gpt2(dir, layers, hidden, heads, vocab);
    else if (mode == "load") load_ranks(dir, tp);
    else if (mode == "forward") forward_ranks(dir, tp, batch, seq, reps);
    else {
      std::fprintf(stderr, "usage: bench_tensor_parallel (--make-gpt2 | --load | --forward) DIR [--tp N]\n");
      return 2;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
