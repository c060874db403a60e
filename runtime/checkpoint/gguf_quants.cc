// The block layouts of ggml's tensor types and their dequantisation (Note [GGUF blocks]).
#include <cstring>

#include "runtime/checkpoint/gguf.h"
#include "runtime/dtype.h"
#include "runtime/error.h"

namespace libai::checkpoint {

// Note [GGUF blocks]
// A quantized row is a sequence of blocks, each a fixed number of values behind their scales
// (all little-endian; d, m, dmin are f16):
//   Q4_0 (32 values, 18 bytes): d, 16 bytes of nibbles; value j < 16 is the low nibble of byte
//        j, value j + 16 its high nibble; x = d * (u - 8).
//   Q4_1 (32, 20): d, m, nibbles as Q4_0; x = d * u + m.
//   Q5_0 (32, 22): d, a 32-bit word of fifth bits (bit j: value j), nibbles as Q4_0;
//        x = d * (u - 16).   Q5_1 (32, 24): d, m, then as Q5_0; x = d * u + m.
//   Q8_0 (32, 34): d, 32 signed bytes; x = d * q.
//   Q4_K (256, 144): d, dmin, 12 bytes of 6-bit scales and minimums for 8 sub-blocks of 32,
//        128 bytes of nibbles; in each 64 values the low nibbles of 32 bytes are the first
//        sub-block, their high nibbles the second; x = d * sc * u - dmin * m.
//   Q5_K (256, 176): as Q4_K plus 32 bytes of fifth bits (bit 2i / 2i + 1 of byte l: the
//        value l of sub-blocks 2i and 2i + 1) between the scales and the nibbles.
//   Q6_K (256, 210): 128 bytes of low nibbles, 64 bytes of high 2-bit pairs, 16 signed 8-bit
//        scales (one per 16 values), then d; x = d * sc * (u - 32).
// The 6-bit scale and minimum of sub-block j of a K block (get_scale_min below): for j < 4,
// the low 6 bits of bytes j and j + 4; otherwise the nibbles of byte j + 4 joined by the top
// two bits of bytes j - 4 (scale) and j (minimum).

namespace {

float half(const uint8_t* p) {
  f16 h;
  h.bits = uint16_t(p[0] | (p[1] << 8));
  return float(h);
}

void get_scale_min(int j, const uint8_t* q, int& scale, int& min) {
  if (j < 4) {
    scale = q[j] & 63;
    min = q[j + 4] & 63;
  } else {
    scale = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

void q4_0(const uint8_t* b, float* y) {
  const float d = half(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * float((b[2 + j] & 0xF) - 8);
    y[j + 16] = d * float((b[2 + j] >> 4) - 8);
  }
}

void q4_1(const uint8_t* b, float* y) {
  const float d = half(b), m = half(b + 2);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * float(b[4 + j] & 0xF) + m;
    y[j + 16] = d * float(b[4 + j] >> 4) + m;
  }
}

// Q5_0 (with_min false) and Q5_1.
void q5(const uint8_t* b, float* y, bool with_min) {
  const float d = half(b), m = with_min ? half(b + 2) : 0.0f;
  const uint8_t* p = b + (with_min ? 4 : 2);
  const uint32_t high = uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 |
                        uint32_t(p[3]) << 24;
  const uint8_t* qs = p + 4;
  const int offset = with_min ? 0 : 16;
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 0xF) | int((high >> j) & 1) << 4;
    const int hi = (qs[j] >> 4) | int((high >> (j + 16)) & 1) << 4;
    y[j] = d * float(lo - offset) + m;
    y[j + 16] = d * float(hi - offset) + m;
  }
}

void q8_0(const uint8_t* b, float* y) {
  const float d = half(b);
  for (int j = 0; j < 32; ++j) y[j] = d * float(int8_t(b[2 + j]));
}

// Q4_K (high_bits null) and Q5_K.
void k4_k5(const uint8_t* b, float* y, bool five) {
  const float d = half(b), dmin = half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* high = five ? b + 16 : nullptr;
  const uint8_t* q = b + (five ? 48 : 16);
  for (int chunk = 0; chunk < 4; ++chunk) {
    int sc0, m0, sc1, m1;
    get_scale_min(2 * chunk, scales, sc0, m0);
    get_scale_min(2 * chunk + 1, scales, sc1, m1);
    const float d0 = d * float(sc0), min0 = dmin * float(m0);
    const float d1 = d * float(sc1), min1 = dmin * float(m1);
    for (int l = 0; l < 32; ++l) {
      int lo = q[l] & 0xF, hi = q[l] >> 4;
      if (five) {
        lo |= ((high[l] >> (2 * chunk)) & 1) << 4;
        hi |= ((high[l] >> (2 * chunk + 1)) & 1) << 4;
      }
      y[l] = d0 * float(lo) - min0;
      y[32 + l] = d1 * float(hi) - min1;
    }
    q += 32;
    y += 64;
  }
}

void q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = half(b + 208);
  for (int half_block = 0; half_block < 2; ++half_block) {
    for (int l = 0; l < 32; ++l) {
      const int s = l / 16;
      const int q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * float(sc[s]) * float(q1);
      y[l + 32] = d * float(sc[s + 2]) * float(q2);
      y[l + 64] = d * float(sc[s + 4]) * float(q3);
      y[l + 96] = d * float(sc[s + 6]) * float(q4);
    }
    ql += 64;
    qh += 32;
    sc += 8;
    y += 128;
  }
}

}  // namespace

const char* ggml_type_name(GgmlType type) {
  switch (type) {
    case GgmlType::f32: return "F32";
    case GgmlType::f16: return "F16";
    case GgmlType::q4_0: return "Q4_0";
    case GgmlType::q4_1: return "Q4_1";
    case GgmlType::q5_0: return "Q5_0";
    case GgmlType::q5_1: return "Q5_1";
    case GgmlType::q8_0: return "Q8_0";
    case GgmlType::q8_1: return "Q8_1";
    case GgmlType::q2_k: return "Q2_K";
    case GgmlType::q3_k: return "Q3_K";
    case GgmlType::q4_k: return "Q4_K";
    case GgmlType::q5_k: return "Q5_K";
    case GgmlType::q6_k: return "Q6_K";
    case GgmlType::q8_k: return "Q8_K";
    case GgmlType::i8: return "I8";
    case GgmlType::i16: return "I16";
    case GgmlType::i32: return "I32";
    case GgmlType::i64: return "I64";
    case GgmlType::f64: return "F64";
    case GgmlType::bf16: return "BF16";
  }
  return "unknown";
}

bool ggml_block_layout(uint32_t type, int64_t& block_values, int64_t& block_bytes) {
  struct Layout {
    uint32_t type;
    int64_t values, bytes;
  };
  static constexpr Layout kLayouts[] = {
      {0, 1, 4},     {1, 1, 2},     {2, 32, 18},   {3, 32, 20},   {6, 32, 22},
      {7, 32, 24},   {8, 32, 34},   {9, 32, 36},   {10, 256, 84}, {11, 256, 110},
      {12, 256, 144}, {13, 256, 176}, {14, 256, 210}, {15, 256, 292}, {24, 1, 1},
      {25, 1, 2},    {26, 1, 4},    {27, 1, 8},    {28, 1, 8},    {30, 1, 2},
  };
  for (const auto& l : kLayouts) {
    if (l.type != type) continue;
    block_values = l.values;
    block_bytes = l.bytes;
    return true;
  }
  return false;
}

bool ggml_dequantizable(GgmlType type) {
  switch (type) {
    case GgmlType::f32: case GgmlType::f16: case GgmlType::bf16: case GgmlType::q4_0:
    case GgmlType::q4_1: case GgmlType::q5_0: case GgmlType::q5_1: case GgmlType::q8_0:
    case GgmlType::q4_k: case GgmlType::q5_k: case GgmlType::q6_k:
      return true;
    default:
      return false;
  }
}

void dequantize_row(GgmlType type, const uint8_t* blocks, float* out, int64_t n) {
  int64_t values = 0, bytes = 0;
  LIBAI_CHECK_KIND(Unsupported, ggml_dequantizable(type) &&
                                    ggml_block_layout(uint32_t(type), values, bytes),
                   "GGUF: tensors of type ", ggml_type_name(type), " are not supported");
  LIBAI_CHECK(n % values == 0, "dequantize_row: ", n, " values are not whole ",
              ggml_type_name(type), " blocks of ", values);
  switch (type) {
    case GgmlType::f32:
      std::memcpy(out, blocks, size_t(n) * 4);
      return;
    case GgmlType::f16:
      for (int64_t i = 0; i < n; ++i) out[i] = half(blocks + 2 * i);
      return;
    case GgmlType::bf16:
      for (int64_t i = 0; i < n; ++i) {
        bf16 h;
        h.bits = uint16_t(blocks[2 * i] | (blocks[2 * i + 1] << 8));
        out[i] = float(h);
      }
      return;
    default:
      break;
  }
  for (int64_t b = 0; b < n / values; ++b) {
    const uint8_t* block = blocks + b * bytes;
    float* y = out + b * values;
    switch (type) {
      case GgmlType::q4_0: q4_0(block, y); break;
      case GgmlType::q4_1: q4_1(block, y); break;
      case GgmlType::q5_0: q5(block, y, false); break;
      case GgmlType::q5_1: q5(block, y, true); break;
      case GgmlType::q8_0: q8_0(block, y); break;
      case GgmlType::q4_k: k4_k5(block, y, false); break;
      case GgmlType::q5_k: k4_k5(block, y, true); break;
      case GgmlType::q6_k: q6_k(block, y); break;
      default: break;
    }
  }
}

}  // namespace libai::checkpoint
