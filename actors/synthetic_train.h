// A synthetic training stage of known cost, for the runtime's own tests and benchmarks:
// forward sleeps `forward_seconds` and backward `backward_seconds` (to within microseconds,
// sleep_precisely_until), and the packets carry an "x" tensor that checks the order: its
// x[0] counts the virtual stages it went through (forward) or back through (backward), and
// x[1] names (step, micro-batch). Each stage checks what it receives and keeps a stash per
// micro-batch from forward to backward; a wrong, repeated or missing packet throws, naming it.
//
//   auto compute = std::make_shared<SyntheticTrainCompute>(SyntheticTrainCompute::Options{
//       .forward_seconds = 0.002, .backward_seconds = 0.004, .device = 1, .devices = 4});
//   // ... a LocalTrainPipeline over it; then:
//   auto results = run_synthetic_training(pipeline.client(), /*steps=*/3);
#pragma once

#include <optional>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "actors/train_pipeline.h"

namespace libai::actors {

class SyntheticTrainCompute : public TrainStageCompute {
 public:
  struct Options {
    double forward_seconds = 0;
    double backward_seconds = 0;
    // Per model chunk, when chunks cost differently (a planned split: the chunk's layers x
    // the layer's seconds); empty: forward_seconds and backward_seconds for every chunk.
    std::vector<double> chunk_forward_seconds, chunk_backward_seconds;
    int device = 0, devices = 1, chunks = 1;  // where it sits: virtual stage c * devices + device
    int64_t elements = 2;                     // floats per packet (at least 2)
    std::optional<std::pair<int, int>> fail_forward_at;  // (step, micro-batch): forward throws
  };
  explicit SyntheticTrainCompute(Options options);

  models::TensorMap forward(int step, int chunk, int micro_batch, const models::TensorMap& inputs) override;
  models::TensorMap backward(int step, int chunk, int micro_batch, const models::TensorMap& output_grads) override;
  // Checks that every forward had its backward; loss_sum: the micro-batches' x[0] on the last
  // virtual stage (each (virtual stages - 1)), loss_count: their number; extra: "forwards",
  // "backwards", "peak_stash" (the most micro-batches stashed at once on this device).
  StepSummary end_step(int step) override;

 private:
  int virtual_stage(int chunk) const { return chunk * options_.devices + options_.device; }
  int virtual_stages() const { return options_.chunks * options_.devices; }
  double seconds(const std::vector<double>& per_chunk, double all, int chunk) const {
    return per_chunk.empty() ? all : per_chunk[size_t(chunk)];
  }
  Options options_;
  std::set<std::tuple<int, int, int>> stash_;  // (step, chunk, micro-batch)
  int forwards_ = 0, backwards_ = 0, peak_stash_ = 0;
  double loss_sum_ = 0;
  int64_t loss_count_ = 0;
};

// Runs `steps` training steps through `client` (steps first_step, first_step + 1, ...).
std::vector<TrainStepResult> run_synthetic_training(TrainClient& client, int steps, int first_step = 0);

}  // namespace libai::actors
