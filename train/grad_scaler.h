// Dynamic loss scaling for f16 training, with PyTorch's GradScaler semantics (which LiBai
// uses): the loss is multiplied by the scale before backward; before clipping and the
// optimizer step the gradients are multiplied by 1/scale (computed in f64, applied in f32) and
// checked for inf/nan; a step with a non-finite gradient on any rank is skipped; after each
// step the scale halves on overflow, or doubles after `growth_interval` clean steps in a row.
//
//   GradScaler scaler({});                             // init 65536, x2, x0.5, every 2000
//   autograd::backward(loss * scaler.scale());
//   bool finite = scaler.unscale(params, {.tp = tp});  // same answer on every rank
//   if (finite) optimizer.step();                      // else the step is skipped
//   scaler.update(!finite);
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "models/module.h"
#include "runtime/comm/communicator.h"

namespace libai::train {

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class GradScaler {
 public:
  explicit GradScaler(const GradScalerOptions& options);
  double scale() const { return scale_; }
  // Multiplies the gradients by 1/scale and returns whether all are finite on every rank of
  // `groups` (a MAX reduction of the found-inf flag: ranks holding different shards agree).
  bool unscale(const std::vector<models::ParameterInfo>& params,
               const std::vector<std::shared_ptr<comm::Communicator>>& groups = {});
  // After the step: backoff on overflow, growth after growth_interval clean steps.
  void update(bool found_inf);
  int64_t growth_tracker() const { return growth_tracker_; }
  // For checkpoints.
  void set_state(double scale, int64_t growth_tracker);

 private:
  GradScalerOptions options_;
  float scale_;  // torch keeps the scale as an f32 tensor
  int64_t growth_tracker_ = 0;
};

}  // namespace libai::train
