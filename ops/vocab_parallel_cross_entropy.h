// Cross-entropy over logits split by vocabulary over a tensor-parallel group (Megatron's
// ParallelCrossEntropy): the loss of a vocab-parallel LM head without gathering the logits.
//
//   // each rank: shard [batch, seq, rows] = h · (its rows of the tied table)ᵀ
//   Tensor loss = ops::vocab_parallel_cross_entropy(shard, labels, vocab, tp);  // [] on every rank
//   backward(loss);   // each rank gets d loss / d shard, its columns only
//
// shard: this rank's columns [..., rows] of the logits over the whole vocabulary; rank r holds
// vocabulary ids [r * rows, (r + 1) * rows), and ids >= vocab are padding (a table split
// unevenly, see Module::add_parameter's pad_uneven) that the loss masks out. target: [...]
// i64 (or i32) global ids in [0, vocab) or ignore_index, the same on every rank. Options and
// reduction are cross_entropy's (ops/loss.h), label smoothing included; the result is the same
// on every rank and equals cross_entropy on the gathered logits.
//
// Note [Vocab-parallel cross-entropy]: per row i, three reductions over the group replace the
// gather: the max M_i (all-reduce max), then one packed all-reduce sum of Σ_c exp(x_ic - M_i),
// the target's logit (only its owner contributes it) and Σ_c x_ic (for label smoothing):
//   lse_i = M_i + log Σ exp(x_ic - M_i)
//   loss_i = lse_i - (1 - ε) x_it - ε/V Σ_c x_ic
// The gradient w.r.t. this rank's columns, w_i (softmax_ic - (1 - ε) [c = t_i] - ε/V), needs
// no communication: lse is kept from the forward. Two collectives of [rows] numbers per step
// instead of a gather of [rows, vocab]. Computed in f64 on the host (a device's logits are
// copied there and the gradient back).
#pragma once

#include <cstdint>
#include <memory>

#include "ops/loss.h"
#include "runtime/comm/communicator.h"
#include "runtime/tensor.h"

namespace libai::ops {

// With a null group or a group of one this is cross_entropy(narrow(shard, -1, 0, vocab), ...).
Tensor vocab_parallel_cross_entropy(const Tensor& shard, const Tensor& target, int64_t vocab,
                                    const std::shared_ptr<comm::Communicator>& group,
                                    const CrossEntropyOptions& options = {});

}  // namespace libai::ops
