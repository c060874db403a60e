// Collectives as differentiable ops: what a tensor-parallel layer puts around its local
// computation (Megatron's f and g operators, LiBai's SBP conversions).
//
//   Tensor x_in = ops::copy_to_group(x, tp);     // forward identity, backward all-reduce
//   Tensor y = ops::linear(x_in, w_shard);       // column-parallel: y is split on the last dim
//   Tensor z = ops::reduce_from_group(p, tp);    // forward all-reduce, backward identity
//   Tensor full = ops::gather_last_dim(y, tp);   // forward all-gather, backward own slice
//   Tensor mine = ops::split_last_dim(full, tp); // forward own slice, backward all-gather
//
// In SBP terms: copy_to_group turns broadcast into broadcast whose gradient is partial-sum;
// reduce_from_group turns partial-sum into broadcast; gather_last_dim / split_last_dim
// convert split(-1) <-> broadcast. With a null communicator or a group of one, each is the
// identity (so the same layer code runs on one device).
#pragma once

#include <memory>

#include "runtime/comm/communicator.h"
#include "runtime/tensor.h"

namespace libai::ops {

using CommunicatorPtr = std::shared_ptr<comm::Communicator>;

Tensor copy_to_group(const Tensor& x, const CommunicatorPtr& group);
Tensor reduce_from_group(const Tensor& x, const CommunicatorPtr& group);
Tensor gather_last_dim(const Tensor& x, const CommunicatorPtr& group);
Tensor split_last_dim(const Tensor& x, const CommunicatorPtr& group);

}  // namespace libai::ops
