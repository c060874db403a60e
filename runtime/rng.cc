#include "runtime/rng.h"

#include <cmath>

namespace libai {
namespace {

constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;

inline void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t p = uint64_t(a) * uint64_t(b);
  hi = uint32_t(p >> 32);
  lo = uint32_t(p);
}

uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Calls fn(tensor_offset, logical_index) for every element of the slice.
template <typename Fn>
void for_each_logical(const Tensor& t, const Shape& logical_shape, const Shape& starts, Fn&& fn) {
  const Shape& logical = logical_shape.empty() ? t.shape() : logical_shape;
  LIBAI_CHECK(logical.size() == t.shape().size(), "rng init: logical shape ", shape_str(logical),
              " has another rank than the shard ", shape_str(t.shape()));
  Shape begin = starts.empty() ? Shape(t.shape().size(), 0) : starts;
  LIBAI_CHECK(begin.size() == t.shape().size(), "rng init: slice starts ", shape_str(begin),
              " do not match the rank of ", shape_str(t.shape()));
  for (size_t d = 0; d < begin.size(); ++d)
    LIBAI_CHECK(begin[d] >= 0 && begin[d] + t.shape()[d] <= logical[d], "rng init: slice ",
                shape_str(begin), " + ", shape_str(t.shape()), " exceeds logical shape ",
                shape_str(logical));
  Shape logical_strides = contiguous_strides(logical);
  int64_t base = 0;
  for (size_t d = 0; d < begin.size(); ++d) base += begin[d] * logical_strides[d];
  // Walk the shard and the logical tensor with their own strides, in step.
  const int rank = t.dim();
  std::vector<int64_t> index(rank, 0);
  const int64_t n = t.numel();
  for (int64_t k = 0; k < n; ++k) {
    int64_t offset = t.offset(), logical_index = base;
    for (int d = 0; d < rank; ++d) {
      offset += index[d] * t.strides()[d];
      logical_index += index[d] * logical_strides[d];
    }
    fn(offset, uint64_t(logical_index));
    for (int d = rank - 1; d >= 0; --d) {
      if (++index[d] < t.shape()[d]) break;
      index[d] = 0;
    }
  }
}

template <typename Draw>
void fill(Tensor& t, const Shape& logical_shape, const Shape& starts, Draw&& draw) {
  LIBAI_CHECK(t.device().is_cpu() && is_floating(t.dtype()),
              "rng init needs a floating CPU tensor, got ", t.dtype(), " on ", t.device());
  char* base = static_cast<char*>(t.storage()->data);
  const int64_t es = int64_t(t.element_size());
  for_each_logical(t, logical_shape, starts, [&](int64_t offset, uint64_t index) {
    double v = draw(index);
    char* p = base + offset * es;
    switch (t.dtype()) {
      case DType::f32: *reinterpret_cast<float*>(p) = float(v); break;
      case DType::f64: *reinterpret_cast<double*>(p) = v; break;
      case DType::bf16: *reinterpret_cast<bf16*>(p) = bf16(float(v)); break;
      case DType::f16: *reinterpret_cast<f16*>(p) = f16(float(v)); break;
      default: break;
    }
  });
}

}  // namespace

uint64_t stream_id(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : name) {
    h ^= uint8_t(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

RngKey derive(RngKey key, uint64_t coordinate) {
  return {key.seed, mix64(key.stream ^ mix64(coordinate + 0x632be59bd9b4e019ull))};
}

PhiloxKey philox_key(RngKey key) {
  const uint64_t k = mix64(key.seed) ^ key.stream;
  return {uint32_t(k), uint32_t(k >> 32)};
}

std::array<uint32_t, 4> philox4x32(RngKey key, uint64_t counter) {
  uint64_t k = mix64(key.seed) ^ key.stream;
  uint32_t k0 = uint32_t(k), k1 = uint32_t(k >> 32);
  uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32), c2 = 0, c3 = 0;
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kMul0, c0, hi0, lo0);
    mulhilo(kMul1, c2, hi1, lo1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {c0, c1, c2, c3};
}

float uniform(RngKey key, uint64_t index) {
  return float(philox4x32(key, index)[0] >> 8) * (1.0f / 16777216.0f);
}

float normal(RngKey key, uint64_t index) {
  auto r = philox4x32(key, index);
  // u1 in (0, 1] so the log is finite.
  double u1 = (double(r[0]) + 1.0) / 4294967296.0;
  double u2 = double(r[1]) / 4294967296.0;
  return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

void init_uniform(Tensor& t, RngKey key, double low, double high, const Shape& logical_shape,
                  const Shape& slice_starts) {
  fill(t, logical_shape, slice_starts,
       [&](uint64_t i) { return low + (high - low) * double(uniform(key, i)); });
}

void init_normal(Tensor& t, RngKey key, double mean, double std, const Shape& logical_shape,
                 const Shape& slice_starts) {
  fill(t, logical_shape, slice_starts,
       [&](uint64_t i) { return mean + std * double(normal(key, i)); });
}

}  // namespace libai
