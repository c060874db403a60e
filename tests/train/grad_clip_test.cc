// Global gradient norms and clipping against the norm of the one-device gradient computed
// here in f64, for parameters split over tensor-parallel ranks (evenly and padded), replicated
// over them, and held in disjoint shards by another group.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "runtime/comm/spmd.h"
#include "train/grad_clip.h"

namespace libai::train {
namespace {

// A module with one parameter split on dim 0 (padded when uneven), one split on dim 1 and one
// replicated.
class Toy : public models::Module {
 public:
  explicit Toy(const models::LayerContext& ctx) {
    rows_ = &add_parameter("rows", {7, 3}, ctx, 0, /*pad_uneven=*/true);
    cols_ = &add_parameter("cols", {2, 4}, ctx, 1);
    shared_ = &add_parameter("shared", {5}, ctx);
    for (Tensor* t : {rows_, cols_, shared_}) t->set_requires_grad(true);
  }
  Tensor *rows_, *cols_, *shared_;
};

std::vector<float> random_values(int64_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(gen);
  return v;
}

// Full (one-device) gradients of the three parameters.
struct FullGrads {
  std::vector<float> rows = random_values(21, 1), cols = random_values(8, 2),
                     shared = random_values(5, 3);
  double norm(double p) const {
    double total = 0;
    for (const auto* v : {&rows, &cols, &shared})
      for (float x : *v)
        total = std::isinf(p) ? std::max(total, std::abs(double(x)))
                              : total + std::pow(std::abs(double(x)), p);
    return std::isinf(p) ? total : std::pow(total, 1.0 / p);
  }
};

// Gives rank r of tp its shard of each full gradient (zero padding rows past the end).
void set_shards(Toy& toy, const FullGrads& full, int rank, int size) {
  const int64_t part = (7 + size - 1) / size;
  Tensor rows = Tensor::zeros({part, 3});
  for (int64_t i = 0; i < part; ++i)
    for (int64_t j = 0; j < 3 && rank * part + i < 7; ++j)
      rows.data<float>()[i * 3 + j] = full.rows[size_t((rank * part + i) * 3 + j)];
  const int64_t cols_part = 4 / size;
  Tensor cols = Tensor::zeros({2, cols_part});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < cols_part; ++j)
      cols.data<float>()[i * cols_part + j] = full.cols[size_t(i * 4 + rank * cols_part + j)];
  toy.rows_->set_grad(rows);
  toy.cols_->set_grad(cols);
  toy.shared_->set_grad(Tensor::from_vector(full.shared, {5}));
}

TEST(GradClip, OneDeviceNormsMatchF64) {
  Toy toy({});
  FullGrads full;
  set_shards(toy, full, 0, 1);
  for (double p : {2.0, 1.0, 3.0, kInfNorm})
    EXPECT_NEAR(global_grad_norm(toy.parameter_infos(), p), full.norm(p), 1e-6 * full.norm(p)) << p;
}

TEST(GradClip, TensorParallelCountsEachElementOnce) {
  FullGrads full;
  for (int tp : {2, 4}) {
    std::vector<double> norms(size_t(tp) * 2);
    comm::run_spmd_threads(tp, [&](comm::Communicator& comm) {
      std::shared_ptr<comm::Communicator> group(&comm, [](comm::Communicator*) {});
      Toy toy({.tp = group});
      set_shards(toy, full, comm.rank(), tp);
      norms[size_t(comm.rank()) * 2] = global_grad_norm(toy.parameter_infos(), 2.0, {.tp = group});
      norms[size_t(comm.rank()) * 2 + 1] =
          global_grad_norm(toy.parameter_infos(), kInfNorm, {.tp = group});
    });
    for (int r = 0; r < tp; ++r) {
      EXPECT_NEAR(norms[size_t(r) * 2], full.norm(2.0), 1e-6) << "tp " << tp << " rank " << r;
      EXPECT_EQ(norms[size_t(r) * 2 + 1], full.norm(kInfNorm)) << "tp " << tp << " rank " << r;
    }
  }
}

TEST(GradClip, ShardedGroupsSumDataParallelReplicasDoNot) {
  FullGrads full;
  // Two ranks holding disjoint halves: rank 0 the "rows" gradient, rank 1 the others.
  std::vector<double> norms(2);
  comm::run_spmd_threads(2, [&](comm::Communicator& comm) {
    std::shared_ptr<comm::Communicator> group(&comm, [](comm::Communicator*) {});
    Toy toy({});
    set_shards(toy, full, 0, 1);
    if (comm.rank() == 0) {
      toy.cols_->zero_grad();
      toy.shared_->zero_grad();
    } else {
      toy.rows_->zero_grad();
    }
    norms[size_t(comm.rank())] = global_grad_norm(toy.parameter_infos(), 2.0, {.sharded = {group}});
  });
  EXPECT_NEAR(norms[0], full.norm(2.0), 1e-6);
  EXPECT_NEAR(norms[1], full.norm(2.0), 1e-6);
}

TEST(GradClip, ClipsLikeTorchAndOnlyDownwards) {
  FullGrads full;
  Toy toy({});
  set_shards(toy, full, 0, 1);
  const double norm = full.norm(2.0);
  EXPECT_NEAR(clip_grad_norm(toy.parameter_infos(), 0.5, 2.0), norm, 1e-6);
  const float coefficient = 0.5f / (float(norm) + 1e-6f);
  EXPECT_FLOAT_EQ(toy.shared_->grad().data<float>()[2], full.shared[2] * coefficient);
  EXPECT_NEAR(global_grad_norm(toy.parameter_infos(), 2.0), 0.5, 1e-6);
  // Below the bound: untouched.
  set_shards(toy, full, 0, 1);
  clip_grad_norm(toy.parameter_infos(), 100.0, 2.0);
  EXPECT_EQ(toy.shared_->grad().data<float>()[2], full.shared[2]);
}

TEST(GradClip, NonFiniteNormLeavesGradientsAndBadArgumentsAreErrors) {
  FullGrads full;
  full.shared[1] = NAN;
  Toy toy({});
  set_shards(toy, full, 0, 1);
  EXPECT_TRUE(std::isnan(clip_grad_norm(toy.parameter_infos(), 1.0, 2.0)));
  EXPECT_TRUE(std::isnan(global_grad_norm(toy.parameter_infos(), kInfNorm)));
  EXPECT_EQ(toy.rows_->grad().data<float>()[0], full.rows[0]);
  EXPECT_THROW(clip_grad_norm(toy.parameter_infos(), 0.0, 2.0), InvalidArgument);
  EXPECT_THROW(global_grad_norm(toy.parameter_infos(), 0.5), InvalidArgument);
}

}  // namespace
}  // namespace libai::train
