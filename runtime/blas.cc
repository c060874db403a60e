#include "runtime/blas.h"

#include <cblas.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "runtime/threads.h"

namespace libai {
namespace {

// Note [One pool for BLAS]
// OpenBLAS's pthread build has a thread pool of its own. After each call its workers spin
// (sched_yield, for OPENBLAS_THREAD_TIMEOUT's 2^28 cycles by default) waiting for the next
// one, while our pool runs the layer norms, softmax and adds between the GEMMs: three
// runnable threads on two cores, and timings that depended on who the kernel scheduler ran
// (the same forward measured about 270 ms in one process and 450 ms in another; issue 19).
// Its pool is also process-wide, so stages computing on different devices queued behind each
// other for it. Now OpenBLAS runs single-threaded, inside our chunks: a product is split into
// as many blocks as the current device's budget allows, each a cblas call on the pool's
// threads. The split follows the larger of m and n, so the operand every block reads whole
// (and packs again) is the smaller one: columns of the weights for a batch of tokens (m <= n),
// rows of the activations for long inputs. A block's width is a multiple of 16 (one vector
// of floats), so the kernels keep their full-width tiles.
constexpr int64_t kAlign = 16;
// Below this many multiply-adds a product runs on the calling thread (the hand-off to a worker
// costs a few microseconds: about 2 us of sgemm work at 100 GFLOP/s).
constexpr int64_t kSplitMacs = int64_t(1) << 18;

// LIBAI_BLAS_THREADS=openblas: the whole product to OpenBLAS with its own threads (as many as
// the budget), as before this pool did it; for side-by-side benchmarks (bench/RESULTS.md).
bool openblas_threads() {
  static const bool on = [] {
    const char* v = std::getenv("LIBAI_BLAS_THREADS");
    return v != nullptr && std::strcmp(v, "openblas") == 0;
  }();
  return on;
}

int64_t blocks_for(int64_t size, int64_t macs) {
  if (macs < kSplitMacs) return 1;
  const int64_t threads = thread_budget(current_cpu_device());
  return std::clamp<int64_t>((size + kAlign - 1) / kAlign, 1, threads);
}

// [begin, end) of block `i` of `blocks` over `size`, widths rounded up to kAlign.
std::pair<int64_t, int64_t> block_range(int64_t i, int64_t blocks, int64_t size) {
  const int64_t width = ((size + blocks - 1) / blocks + kAlign - 1) / kAlign * kAlign;
  return {std::min(size, i * width), std::min(size, (i + 1) * width)};
}

CBLAS_TRANSPOSE cblas(Transpose t) { return t == Transpose::yes ? CblasTrans : CblasNoTrans; }

void call_gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha,
               const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
               int64_t ldc) {
  cblas_sgemm(CblasRowMajor, cblas(ta), cblas(tb), blasint(m), blasint(n), blasint(k), alpha, a,
              blasint(lda), b, blasint(ldb), beta, c, blasint(ldc));
}
void call_gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, double alpha,
               const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
               int64_t ldc) {
  cblas_dgemm(CblasRowMajor, cblas(ta), cblas(tb), blasint(m), blasint(n), blasint(k), alpha, a,
              blasint(lda), b, blasint(ldb), beta, c, blasint(ldc));
}

// C[rows, cols] = bias[cols] on every row (ldc apart).
template <class T>
void fill_bias(int64_t rows, int64_t cols, const T* bias, T* c, int64_t ldc) {
  for (int64_t i = 0; i < rows; ++i) std::copy(bias, bias + cols, c + i * ldc);
}

template <class T>
void split_gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc, const T* bias) {
  blas_on_caller_threads();
  if (bias != nullptr) beta = T(1);
  const int64_t macs = m * n * std::max<int64_t>(k, 1);
  const bool by_columns = n >= m;
  const int64_t size = by_columns ? n : m;
  const int64_t blocks = openblas_threads() ? 1 : blocks_for(size, macs);
  if (blocks <= 1) {
    if (bias != nullptr) fill_bias(m, n, bias, c, ldc);
    call_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  parallel_for(0, blocks, 1, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) {
      const auto [begin, end] = block_range(i, blocks, size);
      if (begin >= end) continue;
      if (by_columns) {  // columns [begin, end) of op(B) and of C
        const T* block = tb == Transpose::no ? b + begin : b + begin * ldb;
        if (bias != nullptr) fill_bias(m, end - begin, bias + begin, c + begin, ldc);
        call_gemm(ta, tb, m, end - begin, k, alpha, a, lda, block, ldb, beta, c + begin, ldc);
      } else {  // rows [begin, end) of op(A) and of C
        const T* block = ta == Transpose::no ? a + begin * lda : a + begin;
        if (bias != nullptr) fill_bias(end - begin, n, bias, c + begin * ldc, ldc);
        call_gemm(ta, tb, end - begin, n, k, alpha, block, lda, b, ldb, beta, c + begin * ldc, ldc);
      }
    }
  });
}

}  // namespace

void blas_on_caller_threads() {
  const int want = openblas_threads() ? thread_budget(current_cpu_device()) : 1;
  if (openblas_get_num_threads() != want) openblas_set_num_threads(want);
}

void gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
          const float* bias) {
  split_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias);
}

void gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
          int64_t ldc, const double* bias) {
  split_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias);
}

void gemv_row(Transpose tb, int64_t n, int64_t k, const float* x, int64_t incx, const float* b,
              int64_t ldb, float beta, float* c) {
  blas_on_caller_threads();
  const int64_t blocks = openblas_threads() ? 1 : blocks_for(n, n * std::max<int64_t>(k, 1));
  const auto run = [&](int64_t begin, int64_t end) {
    if (tb == Transpose::no)  // B is [k, n]: columns [begin, end)
      cblas_sgemv(CblasRowMajor, CblasTrans, blasint(k), blasint(end - begin), 1.0f, b + begin,
                  blasint(ldb), x, blasint(incx), beta, c + begin, 1);
    else  // B is stored [n, k]: its rows [begin, end)
      cblas_sgemv(CblasRowMajor, CblasNoTrans, blasint(end - begin), blasint(k), 1.0f,
                  b + begin * ldb, blasint(ldb), x, blasint(incx), beta, c + begin, 1);
  };
  if (blocks <= 1) {
    run(0, n);
    return;
  }
  parallel_for(0, blocks, 1, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) {
      const auto [begin, end] = block_range(i, blocks, n);
      if (begin < end) run(begin, end);
    }
  });
}

}  // namespace libai
