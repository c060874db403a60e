// The block of a one-device tensor that a tensor-parallel rank holds, for tests that compare
// each rank's parameters or gradients with one device's.
#pragma once

#include <algorithm>

#include "models/module.h"
#include "ops/ops.h"

namespace libai::testing {

// The single-device tensor's block that `info` describes: this rank's part of the split dim,
// padded to a multiple of tp_size with zero rows (an uneven vocabulary).
// A partly replicated parameter (models/module.h): the rows its description lists, in order
// (tests/models/llama_tensor_parallel_test.cc checks that description against the layout).
inline Tensor expected_shard(const Tensor& full, const models::ParameterInfo& info) {
  if (info.split_dim < 0 || info.tp_size == 1) return full;
  if (!info.rows.empty()) {
    std::vector<Tensor> parts;
    for (const models::TpRows& r : info.rows[size_t(info.tp_rank)])
      parts.push_back(ops::narrow(full, 0, r.start, r.length));
    return ops::contiguous(ops::cat(parts, 0));
  }
  const int d = info.split_dim;
  const int64_t part = (info.logical_shape[d] + info.tp_size - 1) / info.tp_size;
  const int64_t start = info.tp_rank * part;
  const int64_t length = std::clamp<int64_t>(info.logical_shape[d] - start, 0, part);
  Shape shape = full.shape();
  shape[d] = part;
  Tensor out = Tensor::zeros(shape);
  if (length > 0) ops::narrow(out, d, 0, length).copy_from(ops::narrow(full, d, start, length));
  return out;
}

}  // namespace libai::testing
