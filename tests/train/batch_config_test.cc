// LiBai's batch-size rules (global = micro x accumulation x data parallel).
#include <gtest/gtest.h>

#include "runtime/error.h"
#include "train/batch_config.h"

namespace libai::train {
namespace {

TEST(BatchConfig, InfersTheMissingOne) {
  BatchConfig b = reconcile_batch({.micro = 8, .global = 64}, 2);
  EXPECT_EQ(b.accumulation, 4);
  b = reconcile_batch({.micro = 8, .accumulation = 3}, 2);
  EXPECT_EQ(b.global, 48);
  b = reconcile_batch({.micro = 8}, 4);
  EXPECT_EQ(b.accumulation, 1);
  EXPECT_EQ(b.global, 32);
  b = reconcile_batch({.global = 64, .accumulation = 2}, 4);
  EXPECT_EQ(b.micro, 8);
  b = reconcile_batch({.micro = 2, .global = 16, .accumulation = 4}, 2);
  EXPECT_EQ(b.micro * b.accumulation * b.data_parallel, b.global);
}

TEST(BatchConfig, DisagreementNamesTheKeys) {
  try {
    reconcile_batch({.micro = 8, .global = 64, .accumulation = 3}, 2);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("train.train_micro_batch_size"), std::string::npos) << m;
    EXPECT_NE(m.find("train.num_accumulation_steps"), std::string::npos) << m;
    EXPECT_NE(m.find("train.global_batch_size"), std::string::npos) << m;
    EXPECT_NE(m.find("data_parallel_size 2"), std::string::npos) << m;
  }
  EXPECT_THROW(reconcile_batch({.micro = 3, .global = 64}, 2), InvalidArgument);
  EXPECT_THROW(reconcile_batch({.global = 10, .accumulation = 4}, 1), InvalidArgument);
  EXPECT_THROW(reconcile_batch({}, 1), InvalidArgument);
  EXPECT_THROW(reconcile_batch({.micro = 0}, 1), InvalidArgument);
}

}  // namespace
}  // namespace libai::train
