// OpenBLAS's GEMM and GEMV, split over the current device's thread pool (runtime/threads.h):
// one pool computes everything, kernels and BLAS alike (Note [One pool for BLAS]).
//
//   gemm(Transpose::no, Transpose::yes, m, n, k, 1.0f, a, lda, w, ldw, 0.0f, c, ldc);
//
// Row-major operands, as cblas_sgemm with CblasRowMajor takes them (cblas.h stays private). C is m
// x n with leading dimension ldc; op(A) is m x k, op(B) is k x n. With `bias` (n values), C = op(A)
// op(B) + bias on every row, whatever C held and whatever beta: each block writes the bias into its
// part of C just before its product, while that part is in its core's cache.
#pragma once

#include <cstdint>

namespace libai {

enum class Transpose { no, yes };

void gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
          const float* bias = nullptr);
void gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
          int64_t ldc, const double* bias = nullptr);

// One row: c[0:n] = x · op(B) + beta · c, x's k values `incx` apart.
void gemv_row(Transpose tb, int64_t n, int64_t k, const float* x, int64_t incx, const float* b,
              int64_t ldb, float beta, float* c);

// LIBAI_BLAS_THREADS=openblas in the environment gives each product to OpenBLAS whole, with its
// own threads (the budget's count), as before: for side-by-side benchmarks only.
//
// Puts OpenBLAS on the calling thread only (its own threads idle); the functions above call it
// first, so code that sets openblas_set_num_threads for its own cblas calls does not change
// theirs.
void blas_on_caller_threads();

}  // namespace libai
