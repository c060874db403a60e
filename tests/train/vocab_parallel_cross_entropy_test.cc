// ops::vocab_parallel_cross_entropy at tensor parallel sizes 2 and 4 (ranks on threads) against
// ops::cross_entropy on the whole logits: the loss and each rank's block of the gradient.
#include <gtest/gtest.h>

#include <random>

#include "ops/ops.h"
#include "ops/vocab_parallel_cross_entropy.h"
#include "runtime/autograd.h"
#include "runtime/comm/spmd.h"

namespace libai::ops {
namespace {

struct Layout {
  int tp;
  int64_t vocab;
  DType dtype;
  Reduction reduction;
  double smoothing;
};

Tensor random_logits(const Shape& shape, DType dtype, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal(0.0, 3.0);
  std::vector<double> v(size_t(shape_numel(shape)));
  for (auto& x : v) x = normal(gen);
  Tensor t = Tensor::empty(shape, dtype);
  t.copy_from(Tensor::from_vector(v, shape));
  return t;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(shape_str(a.shape()), shape_str(b.shape()));
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  double d = 0;
  for (size_t i = 0; i < x.size(); ++i) d = std::max(d, std::abs(x[i] - y[i]));
  return d;
}

class VocabParallelCrossEntropy : public ::testing::TestWithParam<Layout> {};

TEST_P(VocabParallelCrossEntropy, MatchesCrossEntropyOnGatheredLogits) {
  const Layout s = GetParam();
  const Shape shape{3, 5, s.vocab};
  const Tensor logits = random_logits(shape, s.dtype, 11);
  std::vector<int64_t> ids(15);
  std::mt19937 gen(12);
  for (auto& id : ids) id = std::uniform_int_distribution<int64_t>(0, s.vocab - 1)(gen);
  ids[2] = ids[9] = -100;
  ids[14] = s.vocab - 1;  // the last (possibly unevenly split) rank's last real column
  const Tensor target = Tensor::from_vector(ids, {3, 5});
  const CrossEntropyOptions options{.reduction = s.reduction, .label_smoothing = s.smoothing};
  // A non-uniform upstream gradient for reduction none.
  const Tensor weights =
      s.reduction == Reduction::none ? random_logits({3, 5}, s.dtype, 13) : Tensor();

  Tensor whole = logits.clone_raw().set_requires_grad(true);
  Tensor want = cross_entropy(whole, target, options);
  autograd::backward(weights.defined() ? sum_all(want * weights) : want);
  const Tensor want_grad = whole.grad();

  const int64_t columns = (s.vocab + s.tp - 1) / s.tp;
  std::vector<Tensor> losses(s.tp), grads(s.tp);
  comm::run_spmd_threads(s.tp, [&](comm::Communicator& c) {
    std::shared_ptr<comm::Communicator> group(&c, [](comm::Communicator*) {});
    // This rank's columns, padded with garbage past the vocabulary (the loss must mask it).
    const int64_t first = c.rank() * columns,
                  valid = std::clamp<int64_t>(s.vocab - first, 0, columns);
    Tensor shard = random_logits({3, 5, columns}, s.dtype, 100 + c.rank());
    if (valid > 0) narrow(shard, -1, 0, valid).copy_from(narrow(logits, -1, first, valid));
    shard.set_requires_grad(true);
    Tensor loss = vocab_parallel_cross_entropy(shard, target, s.vocab, group, options);
    autograd::backward(weights.defined() ? sum_all(loss * weights) : loss);
    losses[c.rank()] = loss.detach();
    grads[c.rank()] = shard.grad();
  });
  for (int r = 0; r < s.tp; ++r) {
    EXPECT_LE(max_abs_diff(losses[r], want.detach()), 1e-6) << "loss on rank " << r;
    const int64_t first = r * columns, valid = std::clamp<int64_t>(s.vocab - first, 0, columns);
    Tensor expected = Tensor::zeros({3, 5, columns}, s.dtype);  // padding columns get nothing
    if (valid > 0) narrow(expected, -1, 0, valid).copy_from(narrow(want_grad, -1, first, valid));
    EXPECT_LE(max_abs_diff(grads[r], expected), 1e-6) << "gradient on rank " << r;
  }
}

std::string layout_name(const ::testing::TestParamInfo<Layout>& info) {
  const Layout& s = info.param;
  const char* reduction = s.reduction == Reduction::mean  ? "mean"
                          : s.reduction == Reduction::sum ? "sum"
                                                          : "none";
  return "tp" + std::to_string(s.tp) + "_vocab" + std::to_string(s.vocab) + "_" +
         dtype_name(s.dtype) + "_" + reduction + (s.smoothing > 0 ? "_smoothed" : "");
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, VocabParallelCrossEntropy,
    ::testing::Values(
        Layout{2, 36, DType::f64, Reduction::mean, 0.0},  // even split
        Layout{2, 37, DType::f64, Reduction::mean, 0.0},  // uneven: one padding column
        Layout{4, 37, DType::f64, Reduction::mean, 0.1},  // 10 columns each, 3 padding
        Layout{4, 9, DType::f64, Reduction::sum, 0.0},    // 3 columns: rank 3 all padding
        Layout{4, 37, DType::f64, Reduction::none, 0.2},
        Layout{2, 37, DType::f32, Reduction::mean, 0.1},
        Layout{4, 37, DType::f32, Reduction::none, 0.0}),
    layout_name);

TEST(VocabParallelCrossEntropyErrors, ShardThatDoesNotMatchTheVocabularyIsRejected) {
  comm::run_spmd_threads(2, [&](comm::Communicator& c) {
    std::shared_ptr<comm::Communicator> group(&c, [](comm::Communicator*) {});
    Tensor shard = Tensor::zeros({4, 10});
    try {
      vocab_parallel_cross_entropy(shard, Tensor::zeros({4}, DType::i64), 37, group);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("19 columns per rank, but the shard has 10"),
                std::string::npos)
          << e.what();
    }
  });
}

TEST(VocabParallelCrossEntropyErrors, TargetOutsideTheVocabularyIsNamed) {
  comm::run_spmd_threads(2, [&](comm::Communicator& c) {
    std::shared_ptr<comm::Communicator> group(&c, [](comm::Communicator*) {});
    try {
      vocab_parallel_cross_entropy(Tensor::zeros({2, 19}), Tensor::from_vector<int64_t>({3, 37}),
                                   37, group);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("target 37 at position 1"), std::string::npos)
          << e.what();
    }
  });
}

}  // namespace
}  // namespace libai::ops
