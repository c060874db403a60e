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
float uniform(RngKey key, uint64_t index);  // [0, 1), 24 random bits
float normal(RngKey key, uint64_t index);   // Box-Muller over the counter's own 4 words

// Fill `t` (CPU, floating) as the slice [slice_starts, slice_starts + t.shape()) of a
// logical tensor of shape `logical_shape`; empty slice_starts means the whole tensor.
void init_uniform(Tensor& t, RngKey key, double low, double high, const Shape& logical_shape = {},
                  const Shape& slice_starts = {});
void init_normal(Tensor& t, RngKey key, double mean, double std, const Shape& logical_shape = {},
                 const Shape& slice_starts = {});

}  // namespace libai
