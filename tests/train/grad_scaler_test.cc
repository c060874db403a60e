// The loss scaler's state machine against PyTorch's GradScaler rules (torch/amp/grad_scaler.py:
// _amp_update_scale_), and the found-inf flag agreed over ranks.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/comm/spmd.h"
#include "train/grad_scaler.h"

namespace libai::train {
namespace {

class One : public models::Module {
 public:
  One() { w_ = &add_parameter("w", {3}, {}); }
  Tensor* w_;
};

TEST(GradScaler, UnscalesInF32AndFindsNonFinite) {
  One m;
  GradScaler scaler({.init_scale = 1024.0});
  m.w_->set_grad(Tensor::from_vector<float>({1024.0f, -3.0f, 0.5f}, {3}));
  EXPECT_TRUE(scaler.unscale(m.parameter_infos()));
  EXPECT_EQ(m.w_->grad().data<float>()[0], 1.0f);
  EXPECT_EQ(m.w_->grad().data<float>()[1], -3.0f / 1024.0f);
  m.w_->set_grad(Tensor::from_vector<float>({1.0f, INFINITY, 0.5f}, {3}));
  EXPECT_FALSE(scaler.unscale(m.parameter_infos()));
  m.w_->set_grad(Tensor::from_vector<float>({NAN, 1.0f, 0.5f}, {3}));
  EXPECT_FALSE(scaler.unscale(m.parameter_infos()));
}

TEST(GradScaler, BacksOffOnOverflowGrowsAfterTheInterval) {
  GradScaler scaler(
      {.init_scale = 65536.0, .growth_factor = 2.0, .backoff_factor = 0.5, .growth_interval = 3});
  // An independent replay of torch's rule over a pattern of overflows.
  const std::vector<bool> overflow = {false, false, false, true,  false,
                                      true,  false, false, false, false};
  double scale = 65536.0;
  int tracker = 0;
  for (bool inf : overflow) {
    if (inf) {
      scale *= 0.5;
      tracker = 0;
    } else if (++tracker == 3) {
      scale *= 2.0;
      tracker = 0;
    }
    scaler.update(inf);
    EXPECT_EQ(scaler.scale(), scale);
    EXPECT_EQ(scaler.growth_tracker(), tracker);
  }
  EXPECT_EQ(scaler.scale(), 65536.0 * 2 * 0.5 * 0.5 * 2);
}

TEST(GradScaler, NeverGrowsToInfinity) {
  GradScaler scaler({.init_scale = 3.0e38, .growth_interval = 1});
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), double(3.0e38f));
}

TEST(GradScaler, RanksAgreeOnAnOverflowSeenByOne) {
  std::vector<int> finite(2);
  comm::run_spmd_threads(2, [&](comm::Communicator& comm) {
    std::shared_ptr<comm::Communicator> group(&comm, [](comm::Communicator*) {});
    One m;
    GradScaler scaler({});
    const float bad = comm.rank() == 1 ? INFINITY : 1.0f;
    m.w_->set_grad(Tensor::from_vector<float>({1.0f, bad, 0.5f}, {3}));
    finite[size_t(comm.rank())] = scaler.unscale(m.parameter_infos(), {group});
  });
  EXPECT_EQ(finite[0], 0);
  EXPECT_EQ(finite[1], 0);
}

TEST(GradScaler, BadOptionsAreErrors) {
  EXPECT_THROW(GradScaler({.init_scale = 0.0}), InvalidArgument);
  EXPECT_THROW(GradScaler({.growth_factor = 1.0}), InvalidArgument);
  EXPECT_THROW(GradScaler({.backoff_factor = 1.5}), InvalidArgument);
  EXPECT_THROW(GradScaler({.growth_interval = 0}), InvalidArgument);
}

}  // namespace
}  // namespace libai::train
