// Data parallelism: gradients averaged over the data-parallel group in buckets, each bucket
// launched as an asynchronous all-reduce as soon as the backward pass has produced all of its
// gradients (the per-leaf gradient-ready hooks), so the reduction overlaps the rest of the
// backward pass (PyTorch DDP's and Megatron's scheme).
//
//   GradientReducer reducer(model, dp_group, {.bucket_bytes = 25 << 20});
//   autograd::backward(loss);   // buckets start reducing while backward runs
//   reducer.finish();           // waits; every .grad now holds the average over the group
//   // gradient accumulation: reducer.set_enabled(false) for all but the last micro-batch
//
// Buckets hold parameters in reverse registration order (the order in which backward
// produces them) and are launched strictly in bucket order, so every rank issues the same
// sequence of collectives whatever the timing. A parameter that got no gradient this step
// contributes zeros.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "models/module.h"
#include "runtime/comm/communicator.h"

namespace libai::models {

struct GradientReducerOptions {
  int64_t bucket_bytes = 25 << 20;
  bool average = true;  // divide by the group size (mean losses); false: sum
};

class GradientReducer {
 public:
  GradientReducer(Module& module, std::shared_ptr<comm::Communicator> group,
                  GradientReducerOptions options = {});
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Off: hooks do nothing (accumulate locally). On by default.
  void set_enabled(bool enabled);
  // Launches what is left, waits for every bucket and writes the reduced gradients back.
  void finish();
  int64_t bucket_count() const;
  // How many buckets had been launched when backward returned, at the last finish()
  // (> 0 shows the overlap).
  int64_t launched_before_finish() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace libai::models
