// Packing weights as int8 or q4 (ops/cpu/quantized_gemm.h) and reading them back.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "ops/cpu/onednn_gemm.h"
#include "ops/cpu/quantized_kernels.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/threads.h"

namespace libai::ops::cpu {

namespace quantized {

void* aligned_bytes(size_t bytes) {
  bytes = std::max<size_t>((bytes + 63) / 64 * 64, 64);
  void* p = std::aligned_alloc(64, bytes);
  LIBAI_CHECK(p != nullptr, "quantize: could not allocate ", bytes, " bytes");
  std::memset(p, 0, bytes);
  return p;
}

float half_to_float(uint16_t bits) {
  f16 h;
  h.bits = bits;
  return float(h);
}
uint16_t float_to_half(float v) { return f16(v).bits; }

// Column jj's value at k index kk, dequantised.
float value_at(const QuantizedMatrix& b, int64_t p, int64_t jj, int64_t kk) {
  const uint8_t* panel = b.panel(p);
  if (b.format == QuantFormat::int8)
    return float(int8_t(panel[((kk / 4) * kPanel + jj) * 4 + kk % 4])) *
           b.scales[size_t(p * kPanel + jj)];
  const uint8_t* block = panel + (kk / b.group) * b.group_bytes();
  const int64_t i = kk % b.group;
  const int u = i % 2 == 0 ? block[(i / 2) * kPanel + jj] & 15 : block[(i / 2) * kPanel + jj] >> 4;
  const uint16_t* scales = group_scales(b, block);
  const float d = half_to_float(scales[jj]);
  const float m = b.has_min ? half_to_float(scales[kPanel + jj]) : -8.0f * d;
  return d * float(u) + m;
}

}  // namespace quantized

using quantized::aligned_bytes;
using quantized::float_to_half;
using quantized::group_scales;
using quantized::half_to_float;
using quantized::kPanel;

namespace {

std::shared_ptr<uint8_t> allocate(size_t bytes) {
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(aligned_bytes(bytes)),
                                  [](uint8_t* p) { std::free(p); });
}

}  // namespace

int64_t QuantizedMatrix::bytes() const {
  return panels() * panel_bytes() +
         int64_t(scales.size() * sizeof(float) + column_sums.size() * sizeof(int32_t));
}

QuantizedMatrix quantize_int8(const float* w, int64_t n, int64_t k, int64_t ldw) {
  LIBAI_CHECK(n >= 0 && k >= 0 && ldw >= k, "quantize_int8: bad shape n=", n, " k=", k,
              " ldw=", ldw);
  // Symmetric per row: scale = max |w| / 127, q = round(w / scale); then packed as stored
  // values are (pack_int8_rows).
  std::vector<int8_t> rows(static_cast<size_t>(n * k));
  std::vector<float> scales(static_cast<size_t>(n));
  parallel_for(0, n, 16, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      const float* row = w + j * ldw;
      float amax = 0.0f;
      for (int64_t kk = 0; kk < k; ++kk) amax = std::max(amax, std::fabs(row[kk]));
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      for (int64_t kk = 0; kk < k; ++kk)
        rows[size_t(j * k + kk)] =
            int8_t(std::clamp(std::nearbyint(row[kk] * inv), -127.0f, 127.0f));
      scales[size_t(j)] = amax / 127.0f;
    }
  });
  return pack_int8_rows(rows.data(), scales.data(), n, k);
}

QuantizedMatrix quantize_q4(const float* w, int64_t n, int64_t k, int64_t ldw, int64_t group,
                            bool with_min) {
  LIBAI_CHECK(n >= 0 && k >= 0 && ldw >= k, "quantize_q4: bad shape n=", n, " k=", k,
              " ldw=", ldw);
  LIBAI_CHECK(group >= 2 && group % 2 == 0, "quantize_q4: the group size must be even, not ",
              group);
  LIBAI_CHECK(k % group == 0, "quantize_q4: the input width ", k,
              " is not a multiple of the group size ", group);
  QuantizedMatrix q;
  q.n = n;
  q.k = k;
  q.format = QuantFormat::q4;
  q.group = group;
  q.has_min = with_min;
  q.data = allocate(size_t(q.panels() * q.panel_bytes()));
  parallel_for(0, q.panels(), 4, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      for (int64_t g = 0; g < q.groups(); ++g) {
        uint8_t* block = q.data.get() + p * q.panel_bytes() + g * q.group_bytes();
        auto* scales = reinterpret_cast<uint16_t*>(block + group / 2 * kPanel);
        uint16_t* mins = scales + kPanel;
        for (int64_t jj = 0; jj < kPanel && p * kPanel + jj < n; ++jj) {
          const float* x = w + (p * kPanel + jj) * ldw + g * group;
          float d = 0.0f, m = 0.0f;
          if (with_min) {
            const auto [lo, hi] = std::minmax_element(x, x + group);
            scales[jj] = float_to_half((*hi - *lo) / 15.0f);
            mins[jj] = float_to_half(*lo);
            d = half_to_float(scales[jj]);
            m = half_to_float(mins[jj]);
          } else {
            float extreme = 0.0f;
            for (int64_t i = 0; i < group; ++i)
              if (std::fabs(x[i]) > std::fabs(extreme)) extreme = x[i];
            scales[jj] = float_to_half(extreme / -8.0f);
            d = half_to_float(scales[jj]);
            m = -8.0f * d;
          }
          const float inv = d != 0.0f ? 1.0f / d : 0.0f;
          for (int64_t i = 0; i < group; ++i) {
            const int u = int(std::clamp(std::nearbyint((x[i] - m) * inv), 0.0f, 15.0f));
            uint8_t& byte = block[(i / 2) * kPanel + jj];
            byte = uint8_t(i % 2 == 0 ? (byte & 0xf0) | u : (byte & 0x0f) | (u << 4));
          }
        }
      }
    }
  });
  return q;
}

void dequantize(const QuantizedMatrix& q, float* w, int64_t ldw) {
  parallel_for(0, q.n, 16, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j)
      for (int64_t kk = 0; kk < q.k; ++kk)
        w[j * ldw + kk] = quantized::value_at(q, j / kPanel, j % kPanel, kk);
  });
}

QuantizedMatrix pack_int8_rows(const int8_t* values, const float* scales, int64_t n, int64_t k) {
  QuantizedMatrix q;
  q.n = n;
  q.k = k;
  q.format = QuantFormat::int8;
  q.data = allocate(size_t(q.panels() * q.panel_bytes()));
  q.scales.assign(size_t(q.panels() * kPanel), 0.0f);
  q.column_sums.assign(size_t(q.panels() * kPanel), 0);
  parallel_for(0, q.panels(), 4, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      auto* dst = reinterpret_cast<int8_t*>(q.data.get() + p * q.panel_bytes());
      for (int64_t jj = 0; jj < kPanel && p * kPanel + jj < n; ++jj) {
        const int64_t j = p * kPanel + jj;
        int32_t sum = 0;
        for (int64_t kk = 0; kk < k; ++kk) {
          const int8_t v = values[j * k + kk];
          dst[((kk / 4) * kPanel + jj) * 4 + kk % 4] = v;
          sum += v;
        }
        q.scales[size_t(j)] = scales[j];
        q.column_sums[size_t(j)] = sum;
      }
    }
  });
  if (onednn_int8_available() && n > 0 && k > 0) q.onednn = onednn_int8_weight(values, n, k);
  return q;
}

void int8_rows(const QuantizedMatrix& q, int8_t* values, float* scales) {
  LIBAI_CHECK(q.format == QuantFormat::int8, "int8_rows: not an int8 matrix");
  for (int64_t j = 0; j < q.n; ++j) {
    const auto* src = reinterpret_cast<const int8_t*>(q.panel(j / kPanel));
    const int64_t jj = j % kPanel;
    for (int64_t kk = 0; kk < q.k; ++kk) values[j * q.k + kk] = src[((kk / 4) * kPanel + jj) * 4 + kk % 4];
    scales[j] = q.scales[size_t(j)];
  }
}

QuantizedMatrix pack_q4_rows(const uint8_t* nibbles, const uint16_t* d, const uint16_t* mins,
                             int64_t n, int64_t k, int64_t group) {
  LIBAI_CHECK(group >= 2 && group % 2 == 0 && k % group == 0, "pack_q4_rows: group ", group,
              " does not divide the input width ", k, " in even groups");
  QuantizedMatrix q;
  q.n = n;
  q.k = k;
  q.format = QuantFormat::q4;
  q.group = group;
  q.has_min = mins != nullptr;
  q.data = allocate(size_t(q.panels() * q.panel_bytes()));
  const int64_t groups = k / group;
  parallel_for(0, q.panels(), 4, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      for (int64_t g = 0; g < groups; ++g) {
        uint8_t* block = q.data.get() + p * q.panel_bytes() + g * q.group_bytes();
        auto* scales = reinterpret_cast<uint16_t*>(block + group / 2 * kPanel);
        for (int64_t jj = 0; jj < kPanel && p * kPanel + jj < n; ++jj) {
          const int64_t j = p * kPanel + jj;
          for (int64_t r = 0; r < group / 2; ++r)
            block[r * kPanel + jj] = nibbles[j * (k / 2) + g * group / 2 + r];
          scales[jj] = d[j * groups + g];
          if (mins) scales[kPanel + jj] = mins[j * groups + g];
        }
      }
    }
  });
  return q;
}

void q4_rows(const QuantizedMatrix& q, uint8_t* nibbles, uint16_t* d, uint16_t* mins) {
  LIBAI_CHECK(q.format == QuantFormat::q4, "q4_rows: not a q4 matrix");
  const int64_t groups = q.groups();
  for (int64_t j = 0; j < q.n; ++j) {
    const int64_t p = j / kPanel, jj = j % kPanel;
    for (int64_t g = 0; g < groups; ++g) {
      const uint8_t* block = q.panel(p) + g * q.group_bytes();
      const auto* scales = reinterpret_cast<const uint16_t*>(block + q.group / 2 * kPanel);
      for (int64_t r = 0; r < q.group / 2; ++r)
        nibbles[j * (q.k / 2) + g * q.group / 2 + r] = block[r * kPanel + jj];
      d[j * groups + g] = scales[jj];
      if (mins && q.has_min) mins[j * groups + g] = scales[kPanel + jj];
    }
  }
}

}  // namespace libai::ops::cpu
