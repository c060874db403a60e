// Synthetic stages of known cost, for the runtime's own tests and benchmarks: each action
// takes `seconds` (sleeping, to within microseconds (runtime's sleep_precisely_until), so that many
// stages fit on a few cores, or spinning, to load a
// core) and adds 1 to the packet's "x" tensor, so a test can check that every packet went
// through every stage once, in order.
//
//   auto compute = std::make_shared<SyntheticCompute>(0.002);   // 2 ms per micro-batch
//   // ... a LocalPipeline over it; then:
//   run_synthetic_job(pipeline.client(), layout, /*steps=*/1);  // every group, every step
#pragma once

#include <atomic>

#include "actors/pipeline.h"
#include "plan/timed_layers.h"

namespace libai::actors {

class SyntheticCompute : public StageCompute {
 public:
  enum class Wait { sleep, spin };
  explicit SyntheticCompute(double seconds, Wait wait = Wait::sleep) : seconds_(seconds), wait_(wait) {}
  models::TensorMap forward(int group, const models::TensorMap& inputs) override;
  void release(int) override { released_.fetch_add(1); }
  int released() const { return released_.load(); }

 private:
  double seconds_;
  Wait wait_;
  std::atomic<int> released_{0};
};

// Feeds every group of `layout` for `steps` steps (a group's step t + 1 enters when its step
// t came out of the last stage, as tokens do), then its done packet. Each packet carries "x"
// (f32 [elements]); returns the outputs' x[0] per (group, step), checked by tests.
std::vector<std::vector<float>> run_synthetic_job(PipelineClient& client, const PipelineLayout& layout,
                                                  int steps, int64_t elements = 1);

}  // namespace libai::actors
