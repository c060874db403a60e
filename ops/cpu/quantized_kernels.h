// The loops of ops/cpu/quantized_gemm.cc share these: the kernels that read a quantized
// matrix (each on the widest ISA the forced or automatic kernel allows) and the helpers the
// packing and the kernels both use. Internal to ops/cpu.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ops/cpu/quantized_gemm.h"

namespace libai::ops::cpu::quantized {

inline constexpr int64_t kPanel = QuantizedMatrix::kPanel;

// `bytes` (rounded up to 64) zeroed and 64-byte aligned; free with std::free.
void* aligned_bytes(size_t bytes);
float half_to_float(uint16_t bits);
uint16_t float_to_half(float v);
// A q4 group block's kPanel f16 scales (its minimums follow them).
inline const uint16_t* group_scales(const QuantizedMatrix& b, const uint8_t* block) {
  return reinterpret_cast<const uint16_t*>(block + b.group / 2 * kPanel);
}
// Column jj of panel p at k index kk, dequantised.
float value_at(const QuantizedMatrix& b, int64_t p, int64_t jj, int64_t kk);

// Weight-only products of rows <= kWeightOnlyRows: out (rows x kPanel, ld kPanel) = A · panel p,
// scaled. int8: a is rows x quads()*4 floats (zero past k), lda apart. q4: sums is rows x
// groups() of Σ a over each group.
void few_rows(PackedKernel kernel, int rows, const float* a, int64_t lda, const float* sums,
              const QuantizedMatrix& b, int64_t p, float* out);
// Panel p widened to f32: k rows of kPanel floats (the f32 tile's panel layout).
void widen_panel(PackedKernel kernel, const QuantizedMatrix& b, int64_t p, float* dst);
// out (rows <= 8 x kPanel int32, ld kPanel) = Σ over the quads of u8 A x s8 panel p (int8);
// a: rows of quads()*4 bytes, lda apart.
void int_tile(PackedKernel kernel, int rows, const uint8_t* a, int64_t lda,
              const QuantizedMatrix& b, int64_t p, int32_t* out);
// Row x (k floats) as u8 with its scale and zero point (x = scale * (u - zero); `zero` past k
// up to `width`). Asymmetric: scale = (max - min) / 255 over the row and 0, zero =
// round(-min / scale); symmetric (oneDNN's s8 rows): scale = max |x| / 127, zero = 128.
void quantize_row(PackedKernel kernel, const float* x, int64_t k, int64_t width, uint8_t* q,
                  float& scale, int32_t& zero, bool asymmetric = true);
// out[j] = float(sums[j]) * (row_scale * scales[j]) for one row of n values.
void scale_row(PackedKernel kernel, const int32_t* sums, float row_scale, const float* scales,
               int64_t n, float* out);
bool has_vnni();

}  // namespace libai::ops::cpu::quantized
