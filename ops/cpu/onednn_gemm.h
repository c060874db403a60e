// bf16 GEMM on the CPU's native bf16 units through oneDNN (AVX512-BF16 dot products, AMX
// tiles): bf16 operands, f32 accumulation, f32 or bf16 result. Used by ops/cpu/matmul.cc
// (Note [16-bit GEMM]); a build without oneDNN, or a CPU without native bf16, reports it
// unavailable and the caller converts to f32 instead.
//
//   if (onednn_bf16_available())
//     onednn_bf16_gemm({m, n, k, a_row_stride, a_col_stride, b_row_stride, b_col_stride},
//                      a, b, /*bias=*/nullptr, c, Bf16Output::f32, /*accumulate=*/false);
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/dtype.h"

namespace libai::ops::cpu {

// a [m, k] and b [k, n] by element strides; one stride of each must be 1 (row-major or its
// transpose), which is how BLAS reads them too. The result is contiguous [m, n].
struct Bf16GemmShape {
  int64_t m, n, k;
  int64_t a_row_stride, a_col_stride, b_row_stride, b_col_stride;
};

enum class Bf16Output { f32, bf16 };

// oneDNN is linked, its dispatcher found native bf16 instructions on this CPU, and the path
// is enabled (it is by default).
bool onednn_bf16_available();
// Process-wide switch, for benchmarks and tests that compare with the f32-conversion path.
void set_onednn_bf16_enabled(bool enabled);

// c = a b (+ bias[n]) (+ c when accumulate, read in the output dtype); the sum is f32 and
// rounds once to bf16 when the output is bf16. Runs on the current CPU device's thread budget.
void onednn_bf16_gemm(const Bf16GemmShape& shape, const bf16* a, const bf16* b, const bf16* bias,
                      void* c, Bf16Output output, bool accumulate);

// int8 products through oneDNN's matmul where the CPU has AMX tiles, for ops/cpu/
// quantized_gemm.cc's products of dynamically quantized rows. Off by default: alone it ran
// 13-16x the f32 kernel at 128 rows here (bench_quantized_gemm; our VNNI kernel 3-5x), but in
// whole models on 2 cores its OpenMP workers, spinning after each product, fought our pool's
// threads for the cores (GPT-2 1 x 128 39 ms against 42, MiniLM 145 against 131: bench/
// RESULTS.md, "Quantized inference"). set_onednn_int8_enabled(true) switches it on.
// oneDNN is linked, the CPU has AMX, and the switch is on.
bool onednn_int8_available();
void set_onednn_int8_enabled(bool enabled);
// A weight w [n, k] (s8, contiguous) reordered once into the layout oneDNN's kernels read.
struct OnednnInt8Weight;
std::shared_ptr<const OnednnInt8Weight> onednn_int8_weight(const int8_t* w, int64_t n, int64_t k);
// c [m, n] (int32, contiguous) = a [m, k] (s8, rows lda apart) · wᵀ; false (nothing written)
// where oneDNN has no kernel for the shape in that layout.
bool onednn_int8_gemm(int64_t m, const int8_t* a, int64_t lda, const OnednnInt8Weight& w,
                      int32_t* c);

}  // namespace libai::ops::cpu
