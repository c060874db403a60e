#include "ops/vocab_parallel_cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/view.h"
#include "runtime/autograd.h"

namespace libai::ops {
namespace {

// A host vector reduced over the group on the device the group works on (NCCL reduces device
// memory): copied there and back when that is not the host.
void all_reduce_host(std::vector<double>& values, comm::Communicator& group, comm::ReduceOp op,
                     Device device) {
  Tensor host = Tensor::from_vector(values);
  Tensor buffer = device.is_cpu() ? host : Tensor::empty(host.shape(), DType::f64, device);
  if (!device.is_cpu()) buffer.copy_from(host);
  group.all_reduce(buffer, op);
  if (!device.is_cpu()) host.copy_from(buffer);
  values = host.to_vector<double>();
}

// What the backward keeps from the forward: the host logits, targets and row statistics.
struct Saved {
  std::vector<double> logits;   // [rows, columns] this rank's shard, row-major
  std::vector<int64_t> target;  // [rows] global ids or ignore_index
  std::vector<double> lse;      // [rows] over the whole vocabulary
  Shape shape;                  // the shard's
  int64_t rows = 0, columns = 0, first = 0, valid = 0, vocab = 0;
};

}  // namespace

Tensor vocab_parallel_cross_entropy(const Tensor& shard, const Tensor& target, int64_t vocab,
                                    const std::shared_ptr<comm::Communicator>& group,
                                    const CrossEntropyOptions& options) {
  LIBAI_CHECK(shard.dim() >= 1 && shard.size(-1) > 0,
              "vocab_parallel_cross_entropy: shard must be [..., rows] with rows > 0, got shape ",
              shape_str(shard.shape()));
  const int size = group ? group->size() : 1;
  const int64_t columns = shard.size(-1);
  // Tables split over the group pad to ceil(vocab / size) rows per rank.
  LIBAI_CHECK(vocab > 0 && (vocab + size - 1) / size == columns,
              "vocab_parallel_cross_entropy: a vocabulary of ", vocab, " split over ", size,
              " ranks gives ", (vocab + size - 1) / std::max(size, 1),
              " columns per rank, but the shard has ", columns, " (shape ",
              shape_str(shard.shape()), ")");
  if (size == 1) {
    Tensor whole = columns == vocab ? shard : narrow(shard, -1, 0, vocab);
    return cross_entropy(whole, target, options);
  }
  LIBAI_CHECK(is_floating(shard.dtype()),
              "vocab_parallel_cross_entropy: shard must be floating, got ", shard.dtype());
  LIBAI_CHECK(target.dtype() == DType::i64 || target.dtype() == DType::i32,
              "vocab_parallel_cross_entropy: target must be i64 (or i32), got ", target.dtype());
  const Shape batch_shape(shard.shape().begin(), shard.shape().end() - 1);
  LIBAI_CHECK(target.shape() == batch_shape, "vocab_parallel_cross_entropy: target of shape ",
              shape_str(target.shape()), " does not match the shard ", shape_str(shard.shape()),
              "; expected ", shape_str(batch_shape));
  LIBAI_CHECK(options.label_smoothing >= 0.0 && options.label_smoothing <= 1.0,
              "vocab_parallel_cross_entropy: label_smoothing must be in [0, 1], got ",
              options.label_smoothing);

  auto saved = std::make_shared<Saved>();
  Saved& s = *saved;
  s.shape = shard.shape();
  s.rows = target.numel();
  s.columns = columns;
  s.vocab = vocab;
  s.first = int64_t(group->rank()) * columns;
  s.valid = std::clamp<int64_t>(vocab - s.first, 0, columns);  // the rest is padding
  {
    Tensor host = Tensor::empty(shard.shape(), DType::f64);
    host.copy_from(shard.detach());
    s.logits = host.to_vector<double>();
    Tensor host_target = Tensor::empty(target.shape(), DType::i64);
    host_target.copy_from(target);
    s.target = host_target.to_vector<int64_t>();
  }
  const double eps = options.label_smoothing;
  int64_t count = 0;
  for (int64_t i = 0; i < s.rows; ++i) {
    const int64_t t = s.target[i];
    if (t == options.ignore_index) continue;
    LIBAI_CHECK(t >= 0 && t < vocab, "vocab_parallel_cross_entropy: target ", t, " at position ", i,
                " is outside the vocabulary of ", vocab);
    ++count;
  }

  // Note [Vocab-parallel cross-entropy]: the max, then one packed sum.
  std::vector<double> max(s.rows, -std::numeric_limits<double>::infinity());
  for (int64_t i = 0; i < s.rows; ++i)
    for (int64_t c = 0; c < s.valid; ++c) max[i] = std::max(max[i], s.logits[i * columns + c]);
  all_reduce_host(max, *group, comm::ReduceOp::max, shard.device());
  std::vector<double> sums(3 * s.rows, 0.0);  // Σ exp(x - M), x_target, Σ x
  for (int64_t i = 0; i < s.rows; ++i) {
    const double* x = &s.logits[i * columns];
    for (int64_t c = 0; c < s.valid; ++c) {
      sums[i] += std::exp(x[c] - max[i]);
      sums[2 * s.rows + i] += x[c];
    }
    const int64_t local = s.target[i] - s.first;
    if (s.target[i] != options.ignore_index && local >= 0 && local < s.valid)
      sums[s.rows + i] = x[local];
  }
  all_reduce_host(sums, *group, comm::ReduceOp::sum, shard.device());

  s.lse.assign(s.rows, 0.0);
  std::vector<double> losses(s.rows, 0.0);
  double total = 0.0;
  for (int64_t i = 0; i < s.rows; ++i) {
    if (s.target[i] == options.ignore_index) continue;
    s.lse[i] = max[i] + std::log(sums[i]);
    losses[i] =
        s.lse[i] - (1.0 - eps) * sums[s.rows + i] - eps / double(vocab) * sums[2 * s.rows + i];
    total += losses[i];
  }
  double mean_scale = 1.0;
  Tensor host_out;
  if (options.reduction == Reduction::none) {
    host_out = Tensor::from_vector(losses, batch_shape);
  } else {
    if (options.reduction == Reduction::mean) mean_scale = count > 0 ? 1.0 / double(count) : 0.0;
    host_out = Tensor::from_vector(std::vector<double>{total * mean_scale}, Shape{});
  }
  Tensor out = Tensor::empty(host_out.shape(), shard.dtype(), shard.device());
  out.copy_from(host_out);

  const DType dtype = shard.dtype();
  const Device device = shard.device();
  const bool per_row = options.reduction == Reduction::none;
  return autograd::record(
      out, "vocab_parallel_cross_entropy", {shard},
      [saved, mean_scale, per_row, options, dtype, device](const Tensor& g) {
        const Saved& s = *saved;
        Tensor host_g = Tensor::empty(g.shape(), DType::f64);
        host_g.copy_from(g);
        const std::vector<double> grad_out = host_g.to_vector<double>();
        const double eps = options.label_smoothing;
        std::vector<double> grad(s.logits.size(), 0.0);  // padding columns and ignored rows: 0
        for (int64_t i = 0; i < s.rows; ++i) {
          if (s.target[i] == options.ignore_index) continue;
          const double w = mean_scale * (per_row ? grad_out[i] : grad_out[0]);
          const int64_t local = s.target[i] - s.first;
          for (int64_t c = 0; c < s.valid; ++c) {
            const double p = std::exp(s.logits[i * s.columns + c] - s.lse[i]);
            grad[i * s.columns + c] =
                w * (p - (c == local ? 1.0 - eps : 0.0) - eps / double(s.vocab));
          }
        }
        Tensor host = Tensor::from_vector(grad, s.shape);
        Tensor result = Tensor::empty(host.shape(), dtype, device);
        result.copy_from(host);
        return std::vector<Tensor>{result};
      });
}

}  // namespace libai::ops
