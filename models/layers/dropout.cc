#include "models/layers/dropout.h"

#include "models/training_mode.h"
#include "ops/dropout.h"

namespace libai::models {

Dropout::Dropout(double p) : p_(p) {
  LIBAI_CHECK(p >= 0.0 && p < 1.0, "dropout: probability must be in [0, 1), got ", p);
}

bool Dropout::active() const { return p_ > 0.0 && training_mode().training; }

Tensor Dropout::forward(const Tensor& x, const DropoutShard& shard) const {
  if (!active()) return x;
  const TrainingMode& mode = training_mode();
  LIBAI_CHECK(x.dim() >= 1, "dropout ", path(), ": expected [batch, ...], got a scalar");
  ops::DropoutSlice slice;
  slice.starts.assign(size_t(x.dim()), 0);
  slice.logical_shape.assign(size_t(x.dim()), 0);
  slice.starts[0] = mode.sample_offset;
  if (shard.dim >= 0) {
    LIBAI_CHECK(shard.dim > 0 && shard.dim < x.dim(), "dropout ", path(), ": shard dim ", shard.dim,
                " is not a non-batch dim of x ", shape_str(x.shape()));
    slice.starts[size_t(shard.dim)] = shard.start;
    slice.logical_shape[size_t(shard.dim)] = shard.logical_size;
  }
  const RngKey key = derive(RngKey{mode.seed, stream_id(path())}, mode.step);
  return ops::dropout(x, p_, key, true, slice);
}

}  // namespace libai::models
