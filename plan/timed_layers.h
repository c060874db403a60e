// The layer times a device reports when it joins a job (Note [Timed layers] in plan/run_job.cc):
// one layer of the job's model, or one synthetic layer, timed on the device at its emulated
// slow-down. The plans calibrate their rooflines by them.
//
//   auto t = time_model_layer("gpt2/", Device::cpu(0), /*slowdown=*/1, rows, tokens, context);
//   if (t) profile.layer_seconds = t->forward_seconds, profile.layer_step_seconds = t->step_seconds;
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

#include "ops/packed_linear.h"
#include "runtime/device.h"

namespace libai::plan {

// One layer of a job's model timed on a device (Note [Timed layers] in plan/run_job.cc).
struct LayerTiming {
  double forward_seconds = 0;  // rows x tokens through the layer (a micro-batch, a prefill)
  double step_seconds = 0;     // one decoding step of `rows` rows over `context` positions
                               // (decoder-only models; 0 for encoders)
};
// Times layer 1 of the model in `folder` (a stage of that layer alone, loaded from the
// checkpoint) on `device` with its thread budget, at emulated slow-down `slowdown`: the fastest
// of `repetitions`. nullopt for a model it does not time: fewer than 3 layers (every layer
// would come with the embedding or the head) or an encoder-decoder (T5's layers differ).
// The layer packed in `precision` (model.quantize, or a stage's precision), as the job's
// stages load it.
std::optional<LayerTiming> time_model_layer(const std::filesystem::path& folder, Device device,
                                            double slowdown, int64_t rows, int64_t tokens,
                                            int64_t context, int repetitions = 3,
                                            const ops::WeightPrecision& precision = {});

// Times one synthetic layer of `layer_seconds` on a device of slow-down `slowdown` as a stage
// runs it (the stage's emulated slow-down included): the fastest of `repetitions`, in seconds
// (a loaded host only ever delays a sleeper's wake-up, so the minimum is the cost). What a
// synthetic job's devices report as their measured layer time.
double time_synthetic_layer(double layer_seconds, double slowdown, int repetitions = 9);

}  // namespace libai::plan
