// Counter-based random numbers (Philox 4x32-10). A value depends only on (seed, stream,
// counter): a stream is derived from a name such as a parameter's, and the counter is the
// element's index in the full (logical) tensor. A tensor-parallel shard therefore draws
// exactly the slice of the single-device tensor, whatever the layout; dropout draws from
// (seed, layer name, micro-batch) the same way.
//
//   RngKey key{seed, stream_id("h.0.attn.c_attn.weight")};
//   float u = uniform(key, element_index);       // [0, 1)
//   float z = normal(key, element_index);        // standard normal
//   init_normal(shard, key, 0.02, logical_shape, /*slice_starts=*/{0, 384});
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "runtime/tensor.h"

namespace libai {

struct RngKey {
  uint64_t seed = 0;
  uint64_t stream = 0;
};

uint64_t stream_id(std::string_view name);  // FNV-1a 64
// Mixes extra coordinates (e.g. a micro-batch index) into a key.
RngKey derive(RngKey key, uint64_t coordinate);

std::array<uint32_t, 4> philox4x32(RngKey key, uint64_t counter);

// Philox's two key words for `key` (philox4x32 derives them on every call), and the first
// output word at a counter, inline: a loop drawing many counters of one key (dropout masks)
// derives the key once and lets the compiler vectorise the rounds. The same bits as
// philox4x32(key, counter)[0].
struct PhiloxKey {
  uint32_t k0 = 0, k1 = 0;
};
PhiloxKey philox_key(RngKey key);
inline uint32_t philox_first_word(PhiloxKey key, uint64_t counter) {
  uint32_t k0 = key.k0, k1 = key.k1;
  uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32), c2 = 0, c3 = 0;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(0xD2511F53u) * c0, p1 = uint64_t(0xCD9E8D57u) * c2;
    const uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0, n1 = uint32_t(p1);
    const uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1, n3 = uint32_t(p0);
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c0;
}
// uniform(key, index) from philox_first_word(philox_key(key), index).
inline float uniform_from_word(uint32_t word) { return float(word >> 8) * (1.0f / 16777216.0f); }
float uniform(RngKey key, uint64_t index);  // [0, 1), 24 random bits
float normal(RngKey key, uint64_t index);   // Box-Muller over the counter's own 4 words

// Fill `t` (CPU, floating) as the slice [slice_starts, slice_starts + t.shape()) of a
// logical tensor of shape `logical_shape`; empty slice_starts means the whole tensor.
void init_uniform(Tensor& t, RngKey key, double low, double high, const Shape& logical_shape = {},
                  const Shape& slice_starts = {});
void init_normal(Tensor& t, RngKey key, double mean, double std, const Shape& logical_shape = {},
                 const Shape& slice_starts = {});

}  // namespace libai
