#include "runtime/tensor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>

#include "runtime/allocator.h"
#include "runtime/device_copy.h"
#include "runtime/rng.h"
#include "runtime/threads.h"

namespace libai {
namespace {

TEST(Tensor, FactoriesShapeAndStrides) {
  Tensor t = Tensor::zeros({2, 3, 4});
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % kCpuAlignment, 0u);
  Tensor v = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(v.data<float>()[4], 5.0f);
  EXPECT_THROW(v.data<double>(), InvalidArgument);
  EXPECT_THROW(Tensor::from_vector<float>({1, 2}, {3}), InvalidArgument);
}

TEST(Tensor, StridedViewsShareStorageAndCopyConverts) {
  Tensor v = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor transposed = v.as_strided({3, 2}, {1, 3}, 0);
  EXPECT_FALSE(transposed.is_contiguous());
  EXPECT_TRUE(transposed.shares_storage(v));
  EXPECT_EQ(transposed.to_vector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  Tensor as_f64 = to_dtype(transposed, DType::f64);
  EXPECT_EQ(as_f64.to_vector<double>(), (std::vector<double>{1, 4, 2, 5, 3, 6}));
  Tensor dst = Tensor::zeros({3, 2}, DType::bf16);
  dst.copy_from(transposed);
  EXPECT_EQ(dst.to_vector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

// Strided copies by contiguous runs (a KV cache's live positions into a bigger buffer and
// back): every element lands where an element-by-element copy puts it; views of one storage
// (which may overlap) still copy as through a buffer.
TEST(Tensor, StridedCopiesByRunsMatchElementwise) {
  std::vector<float> values(2 * 3 * 40 * 20);
  for (size_t i = 0; i < values.size(); ++i) values[i] = float(i);
  Tensor big = Tensor::from_vector(values, {2, 3, 40, 20});
  // [2, 3, 10, 20] starting at position 5: runs of 10 x 20 floats, 40 x 20 apart.
  Tensor window = big.as_strided({2, 3, 10, 20}, big.strides(), 5 * 20);
  Tensor dense = Tensor::zeros({2, 3, 10, 20});
  dense.copy_from(window);
  std::vector<float> expected;
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t p = 5; p < 15; ++p)
        for (int64_t d = 0; d < 20; ++d) expected.push_back(values[size_t(((a * 3 + b) * 40 + p) * 20 + d)]);
  EXPECT_EQ(dense.to_vector<float>(), expected);
  Tensor other = Tensor::zeros({2, 3, 40, 20});
  Tensor target = other.as_strided({2, 3, 10, 20}, other.strides(), 30 * 20);
  target.copy_from(dense);
  EXPECT_EQ(target.to_vector<float>(), expected);
  EXPECT_EQ(other.to_vector<float>()[0], 0.0f);
  // Overlapping views of one storage: positions [0, 30) take [5, 35) of the same rows.
  Tensor front = big.as_strided({2, 3, 30, 20}, big.strides(), 0);
  Tensor later = big.as_strided({2, 3, 30, 20}, big.strides(), 5 * 20);
  const std::vector<float> before = later.to_vector<float>();
  front.copy_from(later);
  EXPECT_EQ(front.to_vector<float>(), before);
}

TEST(Dtype, HalfFormatsRoundToNearestEven) {
  EXPECT_EQ(float(bf16(1.0f)), 1.0f);
  EXPECT_EQ(bf16(1.00390625f).bits, bf16(1.0f).bits);  // tie rounds to even
  EXPECT_EQ(float(f16(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(float(f16(70000.0f))));
  EXPECT_EQ(float(f16(5.960464477539063e-08f)), 5.960464477539063e-08f);  // smallest subnormal
  for (float x : {0.1f, -3.75f, 1e-3f, 1234.5f}) {
    EXPECT_NEAR(float(f16(x)), x, std::abs(x) * 1e-3);
    EXPECT_NEAR(float(bf16(x)), x, std::abs(x) * 8e-3);
  }
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_THROW(parse_dtype("f8"), InvalidArgument);
}

TEST(Allocator, PoolReusesBlocks) {
  Allocator& a = cpu_allocator();
  auto before = a.stats();
  void* p = a.allocate(1000);
  a.deallocate(p, 1000);
  void* q = a.allocate(900);  // same 1 KiB class
  EXPECT_EQ(p, q);
  a.deallocate(q, 900);
  EXPECT_GT(a.stats().pool_hits, before.pool_hits);
}

TEST(Device, ParseAndErrors) {
  EXPECT_EQ(Device::parse("cuda:1"), Device::cuda(1));
  EXPECT_EQ(Device::parse("cpu"), Device::cpu(0));
  EXPECT_THROW(Device::parse("tpu:0"), InvalidArgument);
  EXPECT_THROW(Device::parse("cpu:x"), InvalidArgument);
}

TEST(Rng, ShardDrawsTheSliceOfTheFullTensor) {
  RngKey key{1234, stream_id("h.0.mlp.c_fc.weight")};
  Tensor full = Tensor::empty({6, 8}, DType::f64);
  init_normal(full, key, 0.0, 0.02);
  // Column shard 1 of 2 (tensor-parallel split on dim 1).
  Tensor shard = Tensor::empty({6, 4}, DType::f64);
  init_normal(shard, key, 0.0, 0.02, {6, 8}, {0, 4});
  auto f = full.to_vector<double>(), s = shard.to_vector<double>();
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 4; ++c) EXPECT_EQ(s[r * 4 + c], f[r * 8 + 4 + c]);
  // Different streams differ; statistics are plausible.
  Tensor other = Tensor::empty({6, 8}, DType::f64);
  init_normal(other, RngKey{1234, stream_id("other")}, 0.0, 0.02);
  EXPECT_NE(other.to_vector<double>(), f);
  Tensor big = Tensor::empty({100000}, DType::f64);
  init_normal(big, key, 0.0, 1.0);
  double sum = 0, sq = 0;
  for (double v : big.to_vector<double>()) sum += v, sq += v * v;
  EXPECT_NEAR(sum / 1e5, 0.0, 0.02);
  EXPECT_NEAR(sq / 1e5, 1.0, 0.02);
}

TEST(Threads, BudgetNeverExceedsCores) {
  EXPECT_THROW(set_thread_budget(Device::cpu(0), hardware_cores() + 1), InvalidArgument);
  set_thread_budget(Device::cpu(0), 1);
  if (hardware_cores() >= 2) {
    EXPECT_THROW(set_thread_budget(Device::cpu(1), hardware_cores()), InvalidArgument);
  }
  set_thread_budget(Device::cpu(0), hardware_cores());
  std::vector<int> hits(1000, 0);
  parallel_for(0, 1000, 10, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[i]++;
  });
  for (int h : hits) EXPECT_EQ(h, 1);
}

TEST(Threads, ParallelForPassesErrorsToTheCaller) {
  set_thread_budget(Device::cpu(0), hardware_cores());
  EXPECT_THROW(parallel_for(0, 1000, 1,
                            [&](int64_t b, int64_t) {
                              LIBAI_CHECK(b != 0, "chunk starting at ", b, " failed");
                            }),
               InvalidArgument);
  // The pool is still usable afterwards.
  std::atomic<int64_t> total{0};
  parallel_for(0, 100, 1, [&](int64_t b, int64_t e) { total += e - b; });
  EXPECT_EQ(total.load(), 100);
}

TEST(Errors, CheckMacrosCarryKindAndMessage) {
  try {
    LIBAI_CHECK_KIND(CorruptInput, false, "header of ", "x.safetensors", " is truncated at ", 12);
    FAIL();
  } catch (const CorruptInput& e) {
    EXPECT_STREQ(e.what(), "header of x.safetensors is truncated at 12");
    EXPECT_EQ(e.kind(), ErrorKind::corrupt_input);
  }
  EXPECT_THROW(LIBAI_ASSERT(1 == 2, "oops"), InternalError);
}

}  // namespace
}  // namespace libai
