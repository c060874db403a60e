// Quantized products against the f32 packed kernel and oneDNN's int8 matmul at GPT-2 small's
// layer shapes (issue 34), side by side in one run on the same threads:
//   f32          ops/cpu/packed_gemm.h (the peer: our f32 inference kernel)
//   int8         quantized_gemm, int8 weights, f32 activations (weight-only)
//   int8-dyn     quantized_gemm, rows quantized at run time (included in the time), int32 sums
//   q4           quantized_gemm, 4-bit weights in groups of 32 (weight-only)
//   onednn int8  oneDNN's matmul primitive, s8 activations (already quantized: not timed) x s8
//                weights (reordered once to its own layout) -> f32 with per-column scales
// For one row (decoding) the table also gives the weight-read floor: the bytes the product
// must read over the read bandwidth measured in the same run (a sum over 512 MiB), and the
// kernel's share of it. The products repeat on one weight, so weights that fit the caches
// (all but the LM head's 768 x 50257) come from there and beat the floor; the LM head's row
// is the decoding case. Each figure is the best of 5 blocks of ~0.1 s.
//
//   build/bench/bench_quantized_gemm [threads [--onednn]]      # prints a markdown table
// (--onednn: int8-dyn takes oneDNN's AMX products where the CPU has them, as
// ops::cpu::set_onednn_int8_enabled(true) makes the models do).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "ops/cpu/onednn_gemm.h"
#include "ops/cpu/quantized_gemm.h"
#include "runtime/rng.h"
#include "runtime/tensor.h"
#include "runtime/threads.h"
#include "bench/best_time.h"

#if __has_include(<oneapi/dnnl/dnnl.hpp>)
#include <oneapi/dnnl/dnnl.hpp>
#define LIBAI_BENCH_ONEDNN 1
#endif

namespace libai {
namespace {

using ops::cpu::ActivationPrecision;

double time_call(const std::function<void()>& fn) { return bench::best_seconds_per_call(fn); }

std::vector<float> random_values(int64_t count, uint64_t seed) {
  Tensor t = Tensor::empty({count}, DType::f32);
  init_uniform(t, RngKey{seed, 1}, -1.0, 1.0);
  return t.to_vector<float>();
}

// Bytes per second of a parallel sum over a buffer far larger than the caches.
double read_bandwidth() {
  const int64_t n = int64_t(128) << 20;  // floats: 512 MiB
  std::vector<float> buffer(size_t(n), 1.0f);
  std::vector<double> sums(64);
  const double seconds = time_call([&] {
    parallel_for(0, 64, 1, [&](int64_t b, int64_t e) {
      for (int64_t part = b; part < e; ++part) {
        // 32 independent sums: the loop vectorises and is bound by the reads, not the adds.
        float s[32] = {};
        const float* p = buffer.data() + part * (n / 64);
        for (int64_t i = 0; i < n / 64; i += 32)
          for (int j = 0; j < 32; ++j) s[j] += p[i + j];
        float total = 0.0f;
        for (float v : s) total += v;
        sums[size_t(part)] = total;
      }
    });
  });
  return double(n) * 4.0 / seconds;
}

#ifdef LIBAI_BENCH_ONEDNN
// oneDNN's s8 x s8 -> f32 matmul with per-column scales; nan when it cannot be built.
double onednn_int8(int64_t m, int64_t k, int64_t n) {
  using namespace dnnl;
  using dt = memory::data_type;
  using tag = memory::format_tag;
  try {
    engine eng(engine::kind::cpu, 0);
    stream s(eng);
    memory::desc src_md({m, k}, dt::s8, tag::ab), dst_md({m, n}, dt::f32, tag::ab);
    memory::desc wei_any({k, n}, dt::s8, tag::any), wei_plain({k, n}, dt::s8, tag::ab);
    primitive_attr attr;
    attr.set_output_scales(2, std::vector<float>(size_t(n), 0.01f));
    matmul::primitive_desc pd(matmul::desc(src_md, wei_any, dst_md), attr, eng);
    memory src(src_md, eng), dst(dst_md, eng), plain(wei_plain, eng), wei(pd.weights_desc(), eng);
    std::fill_n(static_cast<int8_t*>(src.get_data_handle()), m * k, int8_t(3));
    std::fill_n(static_cast<int8_t*>(plain.get_data_handle()), k * n, int8_t(-2));
    reorder(plain, wei).execute(s, plain, wei);
    matmul product(pd);
    const double t = time_call([&] {
      product.execute(s, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}});
      s.wait();
    });
    return t;
  } catch (const std::exception&) {
    return std::nan("");
  }
}
#endif

void run_shape(int64_t m, int64_t k, int64_t n, double bandwidth) {
  const std::vector<float> w = random_values(n * k, 1), a = random_values(m * k, 2);
  std::vector<float> c(size_t(m * n));
  const ops::cpu::PackedMatrix f32 = ops::cpu::pack_weight(w.data(), n, k, k);
  const ops::cpu::QuantizedMatrix int8 = ops::cpu::quantize_int8(w.data(), n, k, k);
  const ops::cpu::QuantizedMatrix q4 = ops::cpu::quantize_q4(w.data(), n, k, k, 32, false);
  const double macs = double(m) * double(k) * double(n);
  const double t_f32 = time_call([&] { ops::cpu::packed_gemm(m, a.data(), k, f32, {}, c.data(), n); });
  const auto row = [&](const char* method, double seconds, double bytes) {
    std::printf("| %lldx%lldx%lld | %s | %.3f | %.1f | %.2f |", (long long)m, (long long)k,
                (long long)n, method, seconds * 1e3, 2.0 * macs / seconds * 1e-9, t_f32 / seconds);
    if (m == 1 && bytes > 0)
      std::printf(" %.3f | %.2f |\n", bytes / bandwidth * 1e3, bytes / bandwidth / seconds);
    else
      std::printf(" | |\n");
    std::fflush(stdout);
  };
  row("f32", t_f32, double(n) * double(k) * 4.0);
  row("int8", time_call([&] {
        ops::cpu::quantized_gemm(m, a.data(), k, int8, {}, c.data(), n, ActivationPrecision::f32);
      }),
      double(int8.bytes()));
  row("int8-dyn", time_call([&] {
        ops::cpu::quantized_gemm(m, a.data(), k, int8, {}, c.data(), n, ActivationPrecision::int8);
      }),
      double(int8.bytes()));
  row("q4", time_call([&] {
        ops::cpu::quantized_gemm(m, a.data(), k, q4, {}, c.data(), n, ActivationPrecision::f32);
      }),
      double(q4.bytes()));
#ifdef LIBAI_BENCH_ONEDNN
  row("onednn int8", onednn_int8(m, k, n), double(n) * double(k));
#endif
}

}  // namespace
}  // namespace libai

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  libai::set_thread_budget(libai::Device::cpu(0), threads);
  // int8-dyn's rows: our kernels unless --onednn (oneDNN's AMX products behind ours).
  const bool onednn = argc > 2 && std::string(argv[2]) == "--onednn";
  libai::ops::cpu::set_onednn_int8_enabled(onednn);
  const double bandwidth = libai::read_bandwidth();
  std::printf("threads %d, AVX512-VNNI %s, oneDNN int8 (AMX) taken by int8-dyn: %s, read "
              "bandwidth %.2f GB/s\n\n",
              threads, libai::ops::cpu::cpu_has_vnni() ? "yes" : "no",
              libai::ops::cpu::onednn_int8_available() ? "yes" : "no", bandwidth * 1e-9);
  std::printf("| m x k x n | kernel | ms | GFLOP/s | f32 time / time | floor ms | floor / time |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|\n");
  const int64_t shapes[][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}, {768, 50257}};
  for (int64_t m : {1, 128, 1024})
    for (const auto& s : shapes) libai::run_shape(m, s[0], s[1], bandwidth);
  return 0;
}
