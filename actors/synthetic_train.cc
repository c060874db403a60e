#include "actors/synthetic_train.h"

#include <chrono>

#include "runtime/device_profile.h"
#include "runtime/error.h"

namespace libai::actors {

namespace {

void sleep_for(double seconds) {
  if (seconds <= 0) return;
  sleep_precisely_until(std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(seconds)));
}

float id_of(int step, int micro_batch) { return float(step * 100000 + micro_batch); }

// The packet's x, checked: x[0] must be `count` and x[1] name (step, micro-batch).
Tensor checked_x(const models::TensorMap& tensors, const char* what, int step, int chunk,
                 int micro_batch, float count) {
  auto it = tensors.find("x");
  LIBAI_CHECK(it != tensors.end(), "synthetic training: the ", what, " of micro-batch ",
              micro_batch, " chunk ", chunk, " step ", step, " has no tensor 'x'");
  const float* x = it->second.data<float>();
  LIBAI_CHECK(x[1] == id_of(step, micro_batch) && x[0] == count, "synthetic training: the ", what,
              " of micro-batch ", micro_batch, " chunk ", chunk, " step ", step, " carries (", x[0],
              ", ", x[1], "), expected (", count, ", ", id_of(step, micro_batch), ")");
  return it->second;
}

}  // namespace

SyntheticTrainCompute::SyntheticTrainCompute(Options options) : options_(options) {
  LIBAI_CHECK(options_.elements >= 2, "synthetic training: packets need at least 2 elements");
  LIBAI_CHECK(options_.devices >= 1 && options_.chunks >= 1 && options_.device >= 0 &&
                  options_.device < options_.devices,
              "synthetic training: device ", options_.device, " of ", options_.devices);
  for (const auto* per_chunk : {&options_.chunk_forward_seconds, &options_.chunk_backward_seconds})
    LIBAI_CHECK(per_chunk->empty() || int(per_chunk->size()) == options_.chunks,
                "synthetic training: ", per_chunk->size(), " per-chunk costs for ",
                options_.chunks, " chunks");
}

models::TensorMap SyntheticTrainCompute::forward(int step, int chunk, int micro_batch,
                                                 const models::TensorMap& inputs) {
  const int v = virtual_stage(chunk);
  if (options_.fail_forward_at == std::pair{step, micro_batch})
    LIBAI_THROW(InvalidArgument, "synthetic failure in forward of micro-batch ", micro_batch,
                " step ", step);
  LIBAI_CHECK(stash_.insert({step, chunk, micro_batch}).second, "synthetic training: forward of "
              "micro-batch ", micro_batch, " chunk ", chunk, " step ", step, " ran twice");
  peak_stash_ = std::max(peak_stash_, int(stash_.size()));
  ++forwards_;
  Tensor x = Tensor::zeros({options_.elements}, DType::f32);
  if (v == 0) {
    LIBAI_CHECK(inputs.empty(), "synthetic training: the first virtual stage got inputs");
    x.data<float>()[1] = id_of(step, micro_batch);
  } else {
    x = checked_x(inputs, "activation", step, chunk, micro_batch, float(v)).clone_raw();
  }
  sleep_for(seconds(options_.chunk_forward_seconds, options_.forward_seconds, chunk));
  x.data<float>()[0] += 1.0f;
  if (v + 1 == virtual_stages()) {
    loss_sum_ += x.data<float>()[0] - 1.0f;
    ++loss_count_;
  }
  return {{"x", x}};
}

models::TensorMap SyntheticTrainCompute::backward(int step, int chunk, int micro_batch,
                                                  const models::TensorMap& output_grads) {
  const int v = virtual_stage(chunk);
  LIBAI_CHECK(stash_.erase({step, chunk, micro_batch}) == 1, "synthetic training: backward of "
              "micro-batch ", micro_batch, " chunk ", chunk, " step ", step,
              " without its forward's stash");
  ++backwards_;
  Tensor g = Tensor::zeros({options_.elements}, DType::f32);
  if (v + 1 == virtual_stages()) {
    LIBAI_CHECK(output_grads.empty(), "synthetic training: the last virtual stage got gradients");
    g.data<float>()[1] = id_of(step, micro_batch);
  } else {
    g = checked_x(output_grads, "gradient", step, chunk, micro_batch,
                  float(virtual_stages() - 1 - v)).clone_raw();
  }
  sleep_for(seconds(options_.chunk_backward_seconds, options_.backward_seconds, chunk));
  g.data<float>()[0] += 1.0f;
  return {{"x", g}};
}

StepSummary SyntheticTrainCompute::end_step(int step) {
  LIBAI_CHECK(stash_.empty() && forwards_ == backwards_, "synthetic training: step ", step,
              " ended with ", stash_.size(), " micro-batches stashed (", forwards_, " forwards, ",
              backwards_, " backwards)");
  StepSummary summary;
  summary.loss_sum = loss_sum_;
  summary.loss_count = loss_count_;
  summary.extra = {{"forwards", double(forwards_)},
                   {"backwards", double(backwards_)},
                   {"peak_stash", double(peak_stash_)}};
  forwards_ = backwards_ = peak_stash_ = 0;
  loss_sum_ = 0;
  loss_count_ = 0;
  return summary;
}

std::vector<TrainStepResult> run_synthetic_training(TrainClient& client, int steps, int first_step) {
  std::vector<TrainStepResult> results;
  for (int k = 0; k < steps; ++k) results.push_back(client.run_step(first_step + k));
  return results;
}

}  // namespace libai::actors
