// Quantized linear products (ops/packed_linear.h, ops/cpu/quantized_gemm.h) against f64
// references of the dequantised weights, on every kernel this CPU runs, for odd shapes, 1 to 17
// rows and more, and every group form.
#include <cmath>

#include "ops/cpu/onednn_gemm.h"
#include "ops/cpu/quantized_gemm.h"
#include "ops/packed_linear.h"
#include "runtime/error.h"
#include "tests/ops/gradcheck.h"
#include "tests/ops/linear_reference.h"

namespace libai {
namespace {

using ops::QuantSpec;
using ops::Quantization;
using testing::expect_close;
using testing::kernels;
using testing::KernelScope;
using testing::random;
using testing::reference;

const QuantSpec kInt8{.kind = Quantization::int8};
const QuantSpec kInt8Dynamic{.kind = Quantization::int8_dynamic};

std::vector<QuantSpec> q4_forms() {
  return {{.kind = Quantization::q4, .group = 32},
          {.kind = Quantization::q4, .group = 64},
          {.kind = Quantization::q4, .group = 32, .with_min = true},
          {.kind = Quantization::q4, .group = 64, .with_min = true},
          {.kind = Quantization::q4, .group = 2}};
}

std::string trace(testing::PackedKernel kernel, const QuantSpec& spec, int64_t m, int64_t k,
                  int64_t n) {
  return std::string(testing::name(kernel)) + " " + ops::quantization_name(spec) + " " +
         std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n);
}

// Rows and widths around the weight-only limit (4 rows), the tile (8 x 48), the row block
// (192); odd k for int8 (quads of 4 padded), multiples of 64 for every q4 group.
const int64_t kRows[] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 200};

TEST(QuantizedLinear, WeightOnlyMatchesF64ReferenceOfDequantisedWeight) {
  const int64_t int8_shapes[][2] = {{1, 1}, {5, 47}, {257, 49}, {300, 97}, {768, 145}};
  const int64_t q4_shapes[][2] = {{64, 1}, {128, 47}, {320, 49}, {768, 97}};
  for (auto kernel : kernels()) {
    KernelScope scope(kernel);
    for (int64_t m : kRows) {
      const auto check = [&](const QuantSpec& spec, int64_t k, int64_t n) {
        SCOPED_TRACE(trace(kernel, spec, m, k, n));
        Tensor x = random({m, k}, 31, DType::f32), w = random({n, k}, 32, DType::f32);
        Tensor bias = random({n}, 33, DType::f32), residual = random({m, n}, 34, DType::f32);
        const ops::PackedWeight q = ops::pack_weight(w, spec);
        ASSERT_TRUE(q.quantized());
        const Tensor wd = ops::dequantized(q);
        expect_close(ops::linear_packed(x, q, bias), reference(x, wd, bias, std::nullopt, Tensor()),
                     3e-6 * std::sqrt(double(k)));
        expect_close(ops::linear_packed(x, q, bias, {.act = ops::UnaryOp::gelu_tanh, .residual = residual}),
                     reference(x, wd, bias, ops::UnaryOp::gelu_tanh, residual),
                     4e-6 * std::sqrt(double(k)));
      };
      for (const auto& s : int8_shapes) check(kInt8, s[0], s[1]);
      for (const auto& s : q4_shapes)
        for (const QuantSpec& spec : q4_forms()) check(spec, s[0], s[1]);
    }
  }
}

// The rows of x as int8_dynamic quantizes them, back as f32 values, written here
// independently of the kernels: asymmetric per row (our kernels: the range of the row and 0 over
// 255 levels, the zero point to nearest even), or symmetric (max |x| / 127: oneDNN's s8 rows).
Tensor rows_quantized(const Tensor& x, bool asymmetric) {
  const int64_t m = x.size(0), k = x.size(1);
  std::vector<float> v = x.to_vector<float>();
  for (int64_t i = 0; i < m; ++i) {
    float lo = 0.0f, hi = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      lo = std::min(lo, v[size_t(i * k + j)]);
      hi = std::max(hi, v[size_t(i * k + j)]);
    }
    if (!asymmetric) {
      const float amax = std::max(-lo, hi);
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      for (int64_t j = 0; j < k; ++j) {
        float& e = v[size_t(i * k + j)];
        e = std::nearbyint(e * inv) * (amax / 127.0f);
      }
      continue;
    }
    const float scale = (hi - lo) / 255.0f;
    const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    const float zero = scale > 0.0f ? std::clamp(std::nearbyint(-lo * inv), 0.0f, 255.0f) : 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      float& e = v[size_t(i * k + j)];
      e = (std::clamp(std::nearbyint(e * inv) + zero, 0.0f, 255.0f) - zero) * scale;
    }
  }
  return Tensor::from_vector(v, x.shape());
}

// Products of more than 4 rows quantize each row and multiply in int32: they equal the f64
// product of the two dequantised operands, and the integer sums are the same on every kernel of
// ours, so the outputs are bitwise equal across them. oneDNN's AMX products (off by default;
// the automatic choice takes them where the CPU has them once enabled) take symmetric rows and
// match the product of those. Up to 4 rows stay weight-only.
TEST(QuantizedLinear, DynamicInt8MatchesReferenceAndIsBitwiseEqualAcrossKernels) {
  struct Restore {
    ~Restore() { ops::cpu::set_onednn_int8_enabled(false); }
  } restore;
  const int64_t shapes[][2] = {{1, 1}, {5, 47}, {257, 49}, {300, 97}, {768, 145}, {3072, 50}};
  for (int64_t m : kRows)
    for (const auto& s : shapes) {
      const int64_t k = s[0], n = s[1];
      Tensor x = random({m, k}, 41, DType::f32), w = random({n, k}, 42, DType::f32);
      Tensor bias = random({n}, 43, DType::f32);
      const ops::PackedWeight q = ops::pack_weight(w, kInt8Dynamic);
      const Tensor wd = ops::dequantized(q);
      const bool few = m <= ops::cpu::kWeightOnlyRows;
      const Tensor expected =
          reference(few ? x : rows_quantized(x, true), wd, bias, std::nullopt, Tensor());
      std::vector<float> first;
      std::vector<testing::PackedKernel> every = kernels();
      every.push_back(testing::PackedKernel::automatic);
      for (auto kernel : every) {
        KernelScope scope(kernel);
        SCOPED_TRACE(trace(kernel, kInt8Dynamic, m, k, n));
        const Tensor y = ops::linear_packed(x, q, bias);
        expect_close(y, expected, 3e-6 * std::sqrt(double(k)));
        if (few) continue;
        if (first.empty())
          first = y.to_vector<float>();
        else
          EXPECT_EQ(y.to_vector<float>(), first);
      }
      if (few) continue;
      ops::cpu::set_onednn_int8_enabled(true);
      if (!ops::cpu::onednn_int8_available()) {
        ops::cpu::set_onednn_int8_enabled(false);
        continue;
      }
      const Tensor q_onednn = ops::dequantized(ops::pack_weight(w, kInt8Dynamic));
      SCOPED_TRACE(trace(testing::PackedKernel::automatic, kInt8Dynamic, m, k, n) + " (oneDNN)");
      expect_close(ops::linear_packed(x, ops::pack_weight(w, kInt8Dynamic), bias),
                   reference(rows_quantized(x, false), q_onednn, bias, std::nullopt, Tensor()),
                   3e-6 * std::sqrt(double(k)));
      ops::cpu::set_onednn_int8_enabled(false);
    }
}

// The dequantised weight is the nearest level: int8 within half a step of its channel's scale;
// q4 within one step (symmetric: the side opposite the extreme value reaches +8 d, clamped to
// 7 d) or half a step (with a minimum).
TEST(QuantizedLinear, DequantisedWeightsAreTheNearestLevels) {
  const int64_t n = 50, k = 128;
  Tensor w = random({n, k}, 51, DType::f32);
  const auto wv = w.to_vector<float>();
  {
    const auto dq = ops::dequantized(ops::pack_weight(w, kInt8)).to_vector<float>();
    for (int64_t j = 0; j < n; ++j) {
      float amax = 0.0f;
      for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(wv[size_t(j * k + i)]));
      for (int64_t i = 0; i < k; ++i)
        ASSERT_LE(std::fabs(dq[size_t(j * k + i)] - wv[size_t(j * k + i)]),
                  0.5f * amax / 127.0f * 1.0001f);
    }
  }
  for (const QuantSpec& spec : q4_forms()) {
    SCOPED_TRACE(ops::quantization_name(spec));
    const auto dq = ops::dequantized(ops::pack_weight(w, spec)).to_vector<float>();
    double worst = 0.0;
    for (int64_t j = 0; j < n; ++j)
      for (int64_t g = 0; g < k / spec.group; ++g) {
        float lo = 1e9f, hi = -1e9f, extreme = 0.0f;
        for (int64_t i = g * spec.group; i < (g + 1) * spec.group; ++i) {
          const float v = wv[size_t(j * k + i)];
          lo = std::min(lo, v);
          hi = std::max(hi, v);
          if (std::fabs(v) > std::fabs(extreme)) extreme = v;
        }
        const float step = spec.with_min ? (hi - lo) / 15.0f : std::fabs(extreme) / 8.0f;
        const float bound = (spec.with_min ? 0.5f : 1.0f) * step * 1.01f + 1e-3f * step;
        for (int64_t i = g * spec.group; i < (g + 1) * spec.group; ++i) {
          const double err = std::fabs(dq[size_t(j * k + i)] - wv[size_t(j * k + i)]);
          ASSERT_LE(err, bound) << "row " << j << " k " << i;
          worst = std::max(worst, err);
        }
      }
    EXPECT_GT(worst, 1e-3);  // 4 bits are visible
  }
}

TEST(QuantizedLinear, BytesReadAreAQuarterAndAnEighthOfF32PlusScales) {
  const int64_t n = 96, k = 768;
  Tensor w = random({n, k}, 61, DType::f32);
  EXPECT_EQ(ops::pack_weight(w).bytes(), n * k * 4);
  EXPECT_EQ(ops::pack_weight(w, kInt8).bytes(), n * k + n * 8);
  EXPECT_EQ(ops::pack_weight(w, {.kind = Quantization::q4, .group = 32}).bytes(),
            n * k / 2 + n * (k / 32) * 2);
  EXPECT_EQ(ops::pack_weight(w, {.kind = Quantization::q4, .group = 64, .with_min = true}).bytes(),
            n * k / 2 + n * (k / 64) * 4);
}

TEST(QuantizedLinear, ParsesTheFlagsFormsAndRefusesOthers) {
  EXPECT_EQ(ops::parse_quantization("none", "--quantize").kind, Quantization::none);
  EXPECT_EQ(ops::parse_quantization("int8", "--quantize"), kInt8);
  EXPECT_EQ(ops::parse_quantization("int8-dynamic", "--quantize"), kInt8Dynamic);
  EXPECT_EQ(ops::parse_quantization("q4", "--quantize"),
            (QuantSpec{.kind = Quantization::q4, .group = 32}));
  EXPECT_EQ(ops::parse_quantization("q4:64:min", "--quantize"),
            (QuantSpec{.kind = Quantization::q4, .group = 64, .with_min = true}));
  for (const char* spec : {"none", "int8", "int8-dynamic", "q4:32", "q4:64:min"})
    EXPECT_EQ(ops::quantization_name(ops::parse_quantization(spec, "x")), spec);
  for (const char* bad : {"int4", "q4:", "q4:33", "q4:0", "q4:32:max", "q4:x", "Q4", "q8"}) {
    try {
      ops::parse_quantization(bad, "--quantize");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("--quantize: '" + std::string(bad) + "'"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(QuantizedLinear, AGroupThatDoesNotDivideTheWidthIsOneErrorNamingBoth) {
  Tensor w = random({8, 96}, 71, DType::f32);
  try {
    ops::pack_weight(w, {.kind = Quantization::q4, .group = 64});
    ADD_FAILURE() << "accepted";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("input width of 96"), std::string::npos) << what;
    EXPECT_NE(what.find("group size 64"), std::string::npos) << what;
  }
  EXPECT_THROW(ops::pack_weight(random({8, 96}, 72, DType::f64), kInt8), InvalidArgument);
}

}  // namespace
}  // namespace libai
