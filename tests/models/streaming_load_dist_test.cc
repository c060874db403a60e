// Note [Streaming packed loads] (models/model.cc): a load that packs and releases its f32
// weights packs each Linear as soon as its weight is read, so its peak memory is about the
// packed model's, not the f32 model's. Measured in a forked child each (peak RSS growth over
// the load, /proc/self/status VmHWM after clear_refs), against the same load keeping its f32
// weights, which must hold them all: the measurement sees the difference.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "models/convert.h"
#include "models/layers/linear.h"
#include "models/model.h"
#include "runtime/memory_stats.h"
#include "tests/common/child_process.h"

namespace libai::models {
namespace {

namespace fs = std::filesystem;

// A GPT-2 of 6 layers of width 512 (75 MB of f32 Linear weights), random normal weights.
void write_gpt2(const fs::path& dir) {
  fs::create_directories(dir);
  const nlohmann::json config{{"model_type", "gpt2"}, {"architectures", {"GPT2LMHeadModel"}},
                              {"vocab_size", 2048},   {"n_embd", 512},
                              {"n_head", 8},          {"n_layer", 6},
                              {"n_positions", 256},   {"eos_token_id", 0}};
  std::ofstream(dir / "config.json") << config.dump(2);
  auto model = create_model(HfConfig::load(dir), {});
  std::mt19937 gen(3);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (auto& [name, t] : model->named_parameters()) {
    float* p = t->data<float>();
    for (int64_t i = 0; i < t->numel(); ++i) p[i] = normal(gen);
  }
  save_model_weights(*model, dir, CheckpointLayout::hf);
}

// The peak RSS growth of loading `dir` with `options`, in MB, measured in a child; and the
// f32 bytes of its Linear weights.
std::pair<double, double> load_peak_mb(const fs::path& dir, const LoadOptions& options) {
  const fs::path out = dir / "peak.txt";
  fs::remove(out);
  const int status = testing::run_in_child([&] {
    reset_process_peak_rss();
    const int64_t base = process_status_kb("VmRSS:");
    auto model = load_model(dir, options);
    const int64_t peak = process_status_kb("VmHWM:");
    double linear = 0;
    for (auto& [name, m] : model->named_modules())
      if (auto* l = dynamic_cast<Linear*>(m)) linear += double(l->weight().numel()) * 4;
    std::ofstream(out) << double(peak - base) * 1024.0 / 1e6 << " " << linear / 1e6;
  });
  EXPECT_EQ(status, 0);
  double peak = 0, linear = 0;
  std::ifstream(out) >> peak >> linear;
  return {peak, linear};
}

TEST(StreamingPackedLoad, PeakIsThePackedModelsNotTheF32Models) {
  const fs::path dir = fs::temp_directory_path() / ("libai_streaming_" + std::to_string(::getpid()));
  ASSERT_EQ(testing::run_in_child([&] { write_gpt2(dir); }), 0);
  const auto [kept, linear] =
      load_peak_mb(dir, {.pack_weights = true, .quantize = {ops::Quantization::q4},
                         .keep_f32_weights = true});
  const auto [streamed, linear_again] =
      load_peak_mb(dir, {.pack_weights = true, .quantize = {ops::Quantization::q4}});
  const auto [bf16, linear_bf16] =
      load_peak_mb(dir, {.pack_weights = true, .pack_dtype = DType::bf16});
  EXPECT_EQ(linear_again, linear);
  EXPECT_EQ(linear_bf16, linear);
  RecordProperty("f32_linear_mb", std::to_string(linear));
  RecordProperty("kept_peak_mb", std::to_string(kept));
  RecordProperty("streamed_q4_peak_mb", std::to_string(streamed));
  RecordProperty("streamed_bf16_peak_mb", std::to_string(bf16));
  std::printf("f32 Linear weights %.1f MB; peak RSS growth: keeping f32 %.1f MB, streamed q4 "
              "%.1f MB, streamed bf16 %.1f MB\n", linear, kept, streamed, bf16);
  EXPECT_GT(linear, 70.0);
  EXPECT_GT(kept, linear);           // every f32 weight held at once
  EXPECT_LT(streamed, 0.5 * linear);  // q4 copies (about a seventh) and one layer in f32
  EXPECT_LT(bf16, 0.8 * linear);      // bf16 copies (a half) and one layer in f32
  fs::remove_all(dir);
}

}  // namespace
}  // namespace libai::models
