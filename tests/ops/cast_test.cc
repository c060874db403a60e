// ops::cast against runtime's to_dtype (a separate conversion routine), on contiguous and
// strided inputs, and its backward: the gradient arrives converted to the input's dtype.
#include "ops/cast.h"

#include "ops/view.h"
#include "runtime/autograd.h"
#include "runtime/device_copy.h"
#include "tests/ops/gradcheck.h"

namespace libai {
namespace {

TEST(Cast, ValuesEqualToDtypeForEveryFloatingPair) {
  // Large enough to split over threads, with values that round differently in bf16 and f16.
  Tensor x = testing::random({3, 70001}, 31, DType::f64, -300.0, 300.0);
  const DType dtypes[] = {DType::f64, DType::f32, DType::bf16, DType::f16};
  for (DType from : dtypes)
    for (DType to : dtypes) {
      Tensor src = to_dtype(x, from);
      Tensor got = ops::cast(src, to);
      ASSERT_EQ(got.dtype(), to);
      EXPECT_EQ(got.to_vector<double>(), to_dtype(src, to).to_vector<double>())
          << dtype_name(from) << " -> " << dtype_name(to);
      // A transposed view goes through to_dtype: same values in the view's order.
      Tensor view = ops::transpose(src, 0, 1);
      EXPECT_EQ(ops::cast(view, to).to_vector<double>(), to_dtype(view, to).to_vector<double>());
    }
}

TEST(Cast, GradientReturnsInTheInputsDtype) {
  Tensor w = testing::random({5, 7}, 32, DType::f32).set_requires_grad(true);
  Tensor g = to_dtype(testing::random({5, 7}, 33), DType::bf16);
  auto grads = autograd::grad(ops::cast(w, DType::bf16), {w}, g);
  ASSERT_EQ(grads[0].dtype(), DType::f32);
  EXPECT_EQ(grads[0].to_vector<double>(), g.to_vector<double>());  // bf16 -> f32 is exact
  EXPECT_THROW(ops::cast(Tensor::zeros({2}, DType::i64), DType::f32), Error);
}

}  // namespace
}  // namespace libai
