#include "plan/timed_layers.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <thread>
#include <vector>

#include "models/hf_config.h"
#include "models/stages/stage.h"
#include "runtime/autograd.h"
#include "runtime/device_profile.h"
#include "runtime/error.h"
#include "runtime/tensor.h"
#include "runtime/threads.h"

namespace libai::plan {

namespace mp = models::stages;

std::optional<LayerTiming> time_model_layer(const std::filesystem::path& folder, Device device,
                                            double slowdown, int64_t rows, int64_t tokens,
                                            int64_t context, int repetitions,
                                            const ops::WeightPrecision& precision) {
  LIBAI_CHECK(rows >= 1 && tokens >= 1 && repetitions >= 1, "time_model_layer: rows ", rows,
              ", tokens ", tokens, " and repetitions ", repetitions, " must be at least 1");
  const auto hf = models::HfConfig::load(folder);
  const int layers = mp::pipeline_num_layers(hf);
  if (layers < 3 || mp::is_encoder_decoder(hf)) return std::nullopt;
  const bool decoder = mp::is_decoder_only(hf);
  const int64_t hidden = int64_t(mp::layer_costs(hf, 1)[1].output_bytes_per_token) / 4;
  context = std::max(context, int64_t(1));
  models::LoadOptions options;
  options.pack_weights = true;  // as inference stages load it
  options.pack_dtype = precision.pack_dtype;
  options.quantize = precision.quantize;
  auto stage =
      mp::load_stage(folder, {.first_layer = 1, .last_layer = 2, .num_layers = layers}, options);

  LayerTiming timing{.forward_seconds = 1e30, .step_seconds = decoder ? 1e30 : 0.0};
  std::exception_ptr error;
  // On a thread of its own with `device` current, as a stage's pinned thread computes.
  std::thread measure([&] {
    try {
      set_current_cpu_device(device);
      autograd::NoGradGuard no_grad;
      // A stage streams its layers' weights from memory, one layer after the other; the same
      // layer timed again would find them in the last-level cache (a 12 MB GPT-2 layer took
      // half the time it takes in a 6-layer stage). So the caches are flushed before each run.
      std::vector<char> flush(size_t(96) << 20);
      char stamp = 0;
      const EmulatedSpeed speed(slowdown);
      auto timed = [&](const mp::Activations& in, mp::StageState& state) {
        std::fill(flush.begin(), flush.end(), ++stamp);
        return speed.run([&] { stage->forward(in, state); });
      };
      auto inputs = [&](int64_t n, int64_t past) {
        return mp::Activations{{"hidden_states", Tensor::zeros({rows, n, hidden})},
                               {"attention_mask", Tensor::ones({rows, past + n}, DType::i64)}};
      };
      {
        auto warm = stage->new_state();  // first-call costs (buffers, BLAS threads) apart
        stage->forward(inputs(tokens, 0), *warm);
      }
      for (int r = 0; r < repetitions; ++r) {
        auto state = stage->new_state();
        timing.forward_seconds = std::min(timing.forward_seconds, timed(inputs(tokens, 0), *state));
        if (!decoder) continue;
        auto cached = stage->new_state();
        if (context > 1) stage->forward(inputs(context - 1, 0), *cached);
        timing.step_seconds = std::min(timing.step_seconds, timed(inputs(1, context - 1), *cached));
      }
    } catch (...) {
      error = std::current_exception();
    }
  });
  measure.join();
  if (error) std::rethrow_exception(error);
  return timing;
}

double time_synthetic_layer(double layer_seconds, double slowdown, int repetitions) {
  LIBAI_CHECK(repetitions >= 1, "time_synthetic_layer: repetitions must be at least 1");
  const EmulatedSpeed speed(slowdown);
  const Tensor x = Tensor::zeros({1}, DType::f32);
  // What a synthetic stage does with a packet (actors/synthetic.h): sleeps its time, adds one.
  auto layer = [&] {
    sleep_precisely_until(std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(layer_seconds)));
    Tensor y = x.clone_raw();
    y.data<float>()[0] += 1.0f;
  };
  double fastest = 1e30;
  for (int i = 0; i < repetitions; ++i) fastest = std::min(fastest, speed.run(layer));
  return fastest;
}

}  // namespace libai::plan
