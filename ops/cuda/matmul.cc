// CUDA kernel of ops/matmul.h on cuBLAS: cublasGemmStridedBatchedEx with f32 compute for
// f32/bf16/f16 (f64 computes in f64), no TF32, so results track the CPU within rounding.
//
// Note [Row-major GEMM on cuBLAS]
// cuBLAS is column-major. A row-major [rows, cols] matrix with row stride ld is, read
// column-major, its own transpose with leading dimension ld; so C = A B (row-major) is
// computed as Cᵀ = Bᵀ Aᵀ (column-major) by swapping the operands, with no data movement.
// A transposed view (strides (1, ld)) flips the op to T instead. Other layouts are gathered.
//
// Batch dims: the innermost run of batch dims that merge into one stride in a, b and out
// becomes cuBLAS's batch (stride 0 for broadcast operands); the others loop on the host.
// Batch dims summed in out (out size 1) accumulate with beta = 1 after the first product,
// in an f32 buffer for 16-bit dtypes so that the sum rounds once, as on the CPU.
#include <vector>

#include "ops/cuda/common.h"
#include "ops/matmul.h"

namespace libai::ops::cuda {
namespace {

using libai::cuda::check;

struct Form {
  cublasOperation_t op = CUBLAS_OP_N;
  int64_t ld = 1;
  bool direct = false;
};

// How cuBLAS reads the row-major [rows, cols] matrix as the column-major [cols, rows] one.
Form form_of(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  const int64_t r1 = std::max<int64_t>(rows, 1), c1 = std::max<int64_t>(cols, 1);
  if ((cs == 1 || cols == 1) && (rows == 1 || rs >= c1))
    return {CUBLAS_OP_N, rows == 1 ? c1 : rs, true};
  if ((rs == 1 || rows == 1) && (cols == 1 || cs >= r1))
    return {CUBLAS_OP_T, cols == 1 ? r1 : cs, true};
  return {CUBLAS_OP_N, c1, false};
}

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return CUDA_R_32F;
    case DType::f64: return CUDA_R_64F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    default: LIBAI_THROW(Unsupported, "matmul: dtype ", dtype, " is not supported on CUDA");
  }
}

// An operand as cuBLAS will read it: the tensor itself or a contiguous copy.
Tensor readable(const Tensor& x, Form& form) {
  const int r = x.dim();
  form = form_of(x.shape()[r - 2], x.shape()[r - 1], x.strides()[r - 2], x.strides()[r - 1]);
  if (form.direct) return x;
  Tensor gathered = Tensor::empty(x.shape(), x.dtype(), x.device());
  gathered.copy_from(x);
  form = form_of(x.shape()[r - 2], x.shape()[r - 1], x.shape()[r - 1], 1);
  return gathered;
}

struct BatchDim {
  int64_t size, a, b, out;
  bool summed;
};

void gemm_cuda(const Tensor& a_in, const Tensor& b_in, const Tensor& bias, Tensor& out) {
  const int r = a_in.dim();
  LIBAI_ASSERT(r >= 2 && b_in.dim() == r && out.dim() == r && out.is_contiguous());
  const int64_t m = a_in.shape()[r - 2], k = a_in.shape()[r - 1], n = b_in.shape()[r - 1];
  const int64_t limit = int64_t(1) << 31;
  LIBAI_CHECK(m < limit && n < limit && k < limit, "matmul: ", shape_str(a_in.shape()), " x ",
              shape_str(b_in.shape()), " exceeds cuBLAS's 32-bit matrix dimensions");
  Form fa, fb;
  Tensor a = readable(a_in, fa), b = readable(b_in, fb);
  LIBAI_CHECK(fa.ld < limit && fb.ld < limit, "matmul: operand strides of ",
              shape_str(a_in.shape()), " x ", shape_str(b_in.shape()),
              " exceed cuBLAS's 32-bit leading dimensions");

  std::vector<BatchDim> dims;  // batch dims of size > 1, outermost first
  bool any_summed = false;
  for (int d = 0; d < r - 2; ++d) {
    if (a.shape()[d] == 1) continue;
    const bool summed = out.shape()[d] == 1;
    any_summed = any_summed || summed;
    dims.push_back(
        {a.shape()[d], a.strides()[d], b.strides()[d], summed ? 0 : out.strides()[d], summed});
  }
  const bool half = out.dtype() == DType::bf16 || out.dtype() == DType::f16;
  // [out_batch..., m, n] in the dtype cuBLAS writes.
  Tensor target = half && any_summed ? Tensor::empty(out.shape(), DType::f32, out.device()) : out;
  OnDevice on(out);
  bool initialised = false;
  if (bias.defined()) {
    Shape zero_strides(size_t(r), 0);
    zero_strides[size_t(r - 1)] = bias.strides()[0];
    target.copy_from(bias.as_strided(target.shape(), zero_strides, bias.offset()));
    initialised = true;
  }
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!initialised)
      check(cudaMemsetAsync(target.data_ptr(), 0, target.nbytes(), on.stream), "cudaMemsetAsync");
    if (target.impl_ptr() != out.impl_ptr()) out.copy_from(target);
    return;
  }

  // The cuBLAS batch: the innermost kept dims that merge in all three operands.
  int64_t count = 1, stride_a = 0, stride_b = 0, stride_out = 0;
  size_t outer = dims.size();
  if (!dims.empty() && !dims.back().summed) {
    const BatchDim& inner = dims.back();
    count = inner.size, stride_a = inner.a, stride_b = inner.b, stride_out = inner.out;
    outer = dims.size() - 1;
    while (outer > 0) {
      const BatchDim& d = dims[outer - 1];
      if (d.summed || d.a != stride_a * count || d.b != stride_b * count ||
          d.out != stride_out * count || count * d.size >= limit)
        break;
      count *= d.size;
      --outer;
    }
  }

  cublasHandle_t handle = libai::cuda::cublas_handle(on.index);
  const bool f64 = out.dtype() == DType::f64;
  const cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  const cudaDataType_t ta = cuda_type(a.dtype()), tc = cuda_type(target.dtype());
  const size_t es = a.element_size(), ec = target.element_size();
  auto* abase = static_cast<const char*>(a.data_ptr());
  auto* bbase = static_cast<const char*>(b.data_ptr());
  auto* cbase = static_cast<char*>(target.data_ptr());

  std::vector<int64_t> index(outer, 0);
  int64_t total = 1;
  for (size_t i = 0; i < outer; ++i) total *= dims[i].size;
  for (int64_t step = 0; step < total; ++step) {
    int64_t ao = 0, bo = 0, oo = 0;
    bool first = true;
    for (size_t i = 0; i < outer; ++i) {
      ao += index[i] * dims[i].a;
      bo += index[i] * dims[i].b;
      oo += index[i] * dims[i].out;
      if (dims[i].summed && index[i] != 0) first = false;
    }
    const bool overwrite = first && !initialised;
    const float alpha32 = 1.0f, beta32 = overwrite ? 0.0f : 1.0f;
    const double alpha64 = 1.0, beta64 = overwrite ? 0.0 : 1.0;
    const void* alpha = f64 ? static_cast<const void*>(&alpha64) : &alpha32;
    const void* beta = f64 ? static_cast<const void*>(&beta64) : &beta32;
    // Cᵀ[n, m] = op(B)ᵀ-view [n, k] x op(A)ᵀ-view [k, m] (Note [Row-major GEMM on cuBLAS]).
    check(cublasGemmStridedBatchedEx(handle, fb.op, fa.op, int(n), int(m), int(k), alpha,
                                     bbase + bo * int64_t(es), ta, int(fb.ld), stride_b,
                                     abase + ao * int64_t(es), ta, int(fa.ld), stride_a, beta,
                                     cbase + oo * int64_t(ec), tc, int(n), stride_out, int(count),
                                     compute, CUBLAS_GEMM_DEFAULT),
          "cublasGemmStridedBatchedEx");
    for (size_t i = outer; i-- > 0;) {
      if (++index[i] < dims[i].size) break;
      index[i] = 0;
    }
  }
  if (target.impl_ptr() != out.impl_ptr()) out.copy_from(target);
}

}  // namespace

LIBAI_REGISTER_KERNEL(gemm, DeviceType::cuda, gemm_cuda);

}  // namespace libai::ops::cuda
