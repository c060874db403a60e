// bf16 GEMM against f32 sgemm at GPT-2 small training shapes (1024 tokens = 4 x 256; hidden
// 768): each layer's forward product (x Wᵀ, torch-layout weight) and its two backward
// products (dX = dY W, dW = dYᵀ X, read through transposed views), on 1 and 2 threads.
// Side by side in one run, each row's GFLOP/s as a ratio to f32 sgemm at the same shape
// and transposes:
//   sgemm          libai::gemm (runtime/blas.h: OpenBLAS sgemm on our pool), f32 operands (the peer)
//   bf16 convert   ops::matmul on bf16 with oneDNN switched off: operands converted to f32,
//                  sgemm, result rounded to bf16 (the path before oneDNN)
//   onednn f32out  ops/cpu/onednn_gemm.h alone: bf16 in, f32 out
//   onednn bf16out ops/cpu/onednn_gemm.h alone: bf16 in, bf16 out
//   ops bf16       ops::matmul on bf16 (oneDNN, output allocation included)
// Each figure is the best of 5 timed blocks of ~0.1 s (other load only slows a block down).
//
//   build/bench/bench_bf16_gemm            # prints a markdown table
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

#include "ops/cpu/onednn_gemm.h"
#include "runtime/blas.h"
#include "ops/matmul.h"
#include "runtime/device_copy.h"
#include "runtime/rng.h"
#include "runtime/threads.h"
#include "bench/best_time.h"

namespace libai {
namespace {

Tensor random_tensor(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::f32);
  init_uniform(t, RngKey{seed, 1}, -1.0, 1.0);
  return t;
}

Tensor transposed(const Tensor& t) {
  return t.as_strided({t.size(1), t.size(0)}, {t.stride(1), t.stride(0)}, t.offset());
}

double time_call(const std::function<void()>& fn) { return bench::best_seconds_per_call(fn); }

// One product c [m, n] = op(a) op(b) as it occurs in training: `a_trans` / `b_trans` say the
// operand is a transposed view of a row-major matrix.
struct Case {
  std::string layer, pass;
  int64_t m, k, n;
  bool a_trans, b_trans;
};

void run_case(const Case& c, int threads) {
  set_thread_budget(Device::cpu(0), threads);
  // Stored matrices, row-major: a is [m, k] or [k, m]; b is [k, n] or [n, k].
  Tensor a32 = random_tensor(c.a_trans ? Shape{c.k, c.m} : Shape{c.m, c.k}, 1);
  Tensor b32 = random_tensor(c.b_trans ? Shape{c.n, c.k} : Shape{c.k, c.n}, 2);
  Tensor a16 = to_dtype(a32, DType::bf16), b16 = to_dtype(b32, DType::bf16);
  Tensor av = c.a_trans ? transposed(a16) : a16, bv = c.b_trans ? transposed(b16) : b16;
  Tensor c32 = Tensor::empty({c.m, c.n}), c16 = Tensor::empty({c.m, c.n}, DType::bf16);
  const int lda = int(a32.size(1)), ldb = int(b32.size(1));
  const double flops = 2.0 * double(c.m) * double(c.n) * double(c.k);

  const double sgemm = time_call([&] {
    gemm(c.a_trans ? Transpose::yes : Transpose::no, c.b_trans ? Transpose::yes : Transpose::no,
         c.m, c.n, c.k, 1.0f, a32.data<float>(), lda, b32.data<float>(), ldb, 0.0f,
         c32.data<float>(), c.n);
  });
  auto row = [&](const char* method, double seconds) {
    std::printf("| %s | %s | %lldx%lldx%lld | %d | %s | %.3f | %.1f | %.2f |\n", c.layer.c_str(),
                c.pass.c_str(), (long long)c.m, (long long)c.k, (long long)c.n, threads, method,
                seconds * 1e3, flops / seconds * 1e-9, sgemm / seconds);
    std::fflush(stdout);
  };
  row("sgemm", sgemm);
  ops::cpu::set_onednn_bf16_enabled(false);
  row("bf16 convert", time_call([&] { ops::matmul(av, bv); }));
  ops::cpu::set_onednn_bf16_enabled(true);
  if (!ops::cpu::onednn_bf16_available()) return;
  const ops::cpu::Bf16GemmShape shape{c.m,          c.n,          c.k,         av.stride(0),
                                      av.stride(1), bv.stride(0), bv.stride(1)};
  row("onednn f32out", time_call([&] {
        ops::cpu::onednn_bf16_gemm(shape, a16.data<bf16>(), b16.data<bf16>(), nullptr,
                                   c32.data<float>(), ops::cpu::Bf16Output::f32, false);
      }));
  row("onednn bf16out", time_call([&] {
        ops::cpu::onednn_bf16_gemm(shape, a16.data<bf16>(), b16.data<bf16>(), nullptr,
                                   c16.data<bf16>(), ops::cpu::Bf16Output::bf16, false);
      }));
  row("ops bf16", time_call([&] { ops::matmul(av, bv); }));
}

}  // namespace
}  // namespace libai

int main() {
  using libai::Case;
  constexpr int64_t tokens = 1024;  // 4 sequences x 256
  // {layer, in, out} of GPT-2 small's Linear layers.
  struct Layer {
    const char* name;
    int64_t in, out;
  };
  const Layer layers[] = {
      {"qkv", 768, 2304}, {"fc", 768, 3072}, {"fc2", 3072, 768}, {"proj", 768, 768}};
  std::printf("| layer | pass | m x k x n | threads | method | ms | GFLOP/s | vs sgemm |\n");
  std::printf("|---|---|---|---:|---|---:|---:|---:|\n");
  for (int threads : {1, 2}) {
    for (const Layer& l : layers) {
      // y [t, out] = x [t, in] Wᵀ (W [out, in]); dX [t, in] = dY [t, out] W; dW [out, in] = dYᵀ X.
      libai::run_case({l.name, "forward", tokens, l.in, l.out, false, true}, threads);
      libai::run_case({l.name, "dX", tokens, l.out, l.in, false, false}, threads);
      libai::run_case({l.name, "dW", l.out, tokens, l.in, true, false}, threads);
    }
    // Small products: one decoding token, and one attention head's scores.
    libai::run_case({"decode", "forward", 1, 768, 2304, false, true}, threads);
    libai::run_case({"scores", "forward", 256, 64, 256, false, true}, threads);
  }
  return 0;
}
