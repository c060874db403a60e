// CUDA kernels of ops/attention.h, a plain (non-fused) first version: the scores of each
// (batch, head) are materialised in a scratch [batch, heads, q_len, kv_len] buffer in the
// compute type, softmax runs per row, and the products are one thread per output element.
// It computes what ops/cpu/attention.cc computes (same masks, lse = +inf and zero output for
// fully masked rows) but costs O(q_len * kv_len) memory; a tiled FlashAttention kernel
// should replace it once it has been checked on a GPU.
#include <cmath>
#include <cstdint>

#include "ops/cuda/launchers.h"
#include "runtime/cuda/device_types.cuh"

namespace libai::ops::cuda {
namespace {

using libai::cuda::blocks_for;
using libai::cuda::compute_type;
using libai::cuda::load;
using libai::cuda::store;

constexpr int kThreads = 256;

#define GRID_LOOP(i, total)                                                     \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (total); \
       i += int64_t(gridDim.x) * blockDim.x)

__device__ __forceinline__ int64_t at(const int64_t* s, int64_t b, int64_t h, int64_t i) {
  return b * s[0] + h * s[1] + i * s[2];
}

// e^x, exactly 0 at x = -inf.
template <typename C>
__device__ __forceinline__ C exp0(C x) {
  return x == C(-INFINITY) ? C(0) : C(exp(x));
}

// s [b, h, i, j] = scale * q_i . k_j + bias, -inf where masked.
template <typename T>
__global__ void scores_kernel(compute_type<T>* s, const T* q, const T* k, const uint8_t* mask,
                              const T* bias, AttentionLayout L) {
  using C = compute_type<T>;
  const int64_t total = L.batch * L.heads * L.q_len * L.kv_len;
  GRID_LOOP(idx, total) {
    const int64_t j = idx % L.kv_len, i = (idx / L.kv_len) % L.q_len;
    const int64_t h = (idx / (L.kv_len * L.q_len)) % L.heads,
                  b = idx / (L.kv_len * L.q_len * L.heads);
    bool masked = L.causal && j > i + (L.kv_len - L.q_len);
    if (mask && mask[b * L.mask[0] + j * L.mask[1]] == 0) masked = true;
    if (masked) {
      s[idx] = C(-INFINITY);
      continue;
    }
    const T* qr = q + at(L.q, b, h, i);
    const T* kr = k + at(L.k, b, h, j);
    C acc = 0;
    for (int64_t c = 0; c < L.d; ++c) acc += C(load(qr[c * L.q[3]])) * C(load(kr[c * L.k[3]]));
    acc *= C(L.scale);
    if (bias) acc += C(load(bias[at(L.bias, b, h, i) + j * L.bias[3]]));
    s[idx] = acc;
  }
}

// One block per row of s: lse (+inf when fully masked) and s -> probabilities in place.
template <typename C>
__global__ void softmax_rows_kernel(C* s, C* lse, int64_t rows, int64_t cols) {
  __shared__ C scratch[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    C* sr = s + r * cols;
    C m = -INFINITY;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) m = sr[j] > m ? sr[j] : m;
    scratch[threadIdx.x] = m;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
      if (int(threadIdx.x) < w && scratch[threadIdx.x + w] > scratch[threadIdx.x])
        scratch[threadIdx.x] = scratch[threadIdx.x + w];
      __syncthreads();
    }
    m = scratch[0];
    __syncthreads();
    C sum = 0;
    if (m != C(-INFINITY))
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) sum += exp0(sr[j] - m);
    scratch[threadIdx.x] = sum;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
      if (int(threadIdx.x) < w) scratch[threadIdx.x] += scratch[threadIdx.x + w];
      __syncthreads();
    }
    const C l = m == C(-INFINITY) ? C(INFINITY) : m + C(log(scratch[0]));
    __syncthreads();
    if (threadIdx.x == 0) lse[r] = l;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) sr[j] = exp0(sr[j] - l);
  }
}

// p = exp(s - lse) from the saved lse (the backward's recomputation).
template <typename C>
__global__ void probs_kernel(C* p, const C* s, const C* lse, int64_t total, int64_t cols) {
  GRID_LOOP(idx, total) p[idx] = exp0(s[idx] - lse[idx / cols]);
}

// out [b, h, i, c] (contiguous) = sum_j p_ij v_jc.
template <typename T>
__global__ void pv_kernel(T* out, const compute_type<T>* p, const T* v, AttentionLayout L) {
  using C = compute_type<T>;
  const int64_t total = L.batch * L.heads * L.q_len * L.dv;
  GRID_LOOP(idx, total) {
    const int64_t c = idx % L.dv, row = idx / L.dv;  // row = (b, h, i)
    const int64_t h = (row / L.q_len) % L.heads, b = row / (L.q_len * L.heads);
    const C* pr = p + row * L.kv_len;
    C acc = 0;
    for (int64_t j = 0; j < L.kv_len; ++j)
      if (pr[j] != C(0)) acc += pr[j] * C(load(v[at(L.v, b, h, j) + c * L.v[3]]));
    out[idx] = store<T>(acc);
  }
}

// D [b, h, i] = sum_c dO_ic * O_ic (O contiguous).
template <typename T>
__global__ void rowdot_kernel(compute_type<T>* dd, const T* grad_out, const T* out,
                              AttentionLayout L) {
  using C = compute_type<T>;
  GRID_LOOP(row, L.batch * L.heads * L.q_len) {
    const int64_t i = row % L.q_len, h = (row / L.q_len) % L.heads, b = row / (L.q_len * L.heads);
    const T* gr = grad_out + at(L.go, b, h, i);
    C acc = 0;
    for (int64_t c = 0; c < L.dv; ++c)
      acc += C(load(gr[c * L.go[3]])) * C(load(out[row * L.dv + c]));
    dd[row] = acc;
  }
}

// ds_ij = p_ij (dO_i . v_j - D_i); dbias (contiguous, optional) = ds.
template <typename T>
__global__ void ds_kernel(compute_type<T>* ds, T* dbias, const compute_type<T>* p,
                          const compute_type<T>* dd, const T* grad_out, const T* v,
                          AttentionLayout L) {
  using C = compute_type<T>;
  const int64_t total = L.batch * L.heads * L.q_len * L.kv_len;
  GRID_LOOP(idx, total) {
    const int64_t j = idx % L.kv_len, row = idx / L.kv_len;
    const int64_t i = row % L.q_len, h = (row / L.q_len) % L.heads, b = row / (L.q_len * L.heads);
    C g = 0;
    if (p[idx] != C(0)) {
      const T* gr = grad_out + at(L.go, b, h, i);
      const T* vr = v + at(L.v, b, h, j);
      C dp = 0;
      for (int64_t c = 0; c < L.dv; ++c) dp += C(load(gr[c * L.go[3]])) * C(load(vr[c * L.v[3]]));
      g = p[idx] * (dp - dd[row]);
    }
    ds[idx] = g;
    if (dbias) dbias[idx] = store<T>(g);
  }
}

// dq [b, h, i, c] = scale * sum_j ds_ij k_jc (contiguous like q's shape).
template <typename T>
__global__ void dq_kernel(T* dq, const compute_type<T>* ds, const T* k, AttentionLayout L) {
  using C = compute_type<T>;
  GRID_LOOP(idx, L.batch * L.heads * L.q_len * L.d) {
    const int64_t c = idx % L.d, row = idx / L.d;
    const int64_t h = (row / L.q_len) % L.heads, b = row / (L.q_len * L.heads);
    const C* dr = ds + row * L.kv_len;
    C acc = 0;
    for (int64_t j = 0; j < L.kv_len; ++j)
      if (dr[j] != C(0)) acc += dr[j] * C(load(k[at(L.k, b, h, j) + c * L.k[3]]));
    dq[idx] = store<T>(acc * C(L.scale));
  }
}

// dk [b, h, j, c] = scale * sum_i ds_ij q_ic; dv [b, h, j, c] = sum_i p_ij dO_ic.
template <typename T>
__global__ void dkv_kernel(T* dk, T* dv, const compute_type<T>* ds, const compute_type<T>* p,
                           const T* q, const T* grad_out, AttentionLayout L) {
  using C = compute_type<T>;
  const int64_t width = L.d + L.dv;  // columns of dk then of dv
  GRID_LOOP(idx, L.batch * L.heads * L.kv_len * width) {
    const int64_t c = idx % width, key = idx / width;  // key = (b, h, j)
    const int64_t j = key % L.kv_len, bh = key / L.kv_len;
    const int64_t h = bh % L.heads, b = bh / L.heads;
    const bool is_k = c < L.d;
    const C* m = (is_k ? ds : p) + bh * L.q_len * L.kv_len + j;  // column j, stride kv_len
    C acc = 0;
    for (int64_t i = 0; i < L.q_len; ++i) {
      const C w = m[i * L.kv_len];
      if (w == C(0)) continue;
      acc += is_k ? w * C(load(q[at(L.q, b, h, i) + c * L.q[3]]))
                  : w * C(load(grad_out[at(L.go, b, h, i) + (c - L.d) * L.go[3]]));
    }
    if (is_k)
      dk[key * L.d + c] = store<T>(acc * C(L.scale));
    else
      dv[key * L.dv + (c - L.d)] = store<T>(acc);
  }
}

}  // namespace

void launch_attention_forward(int dtype, void* out, void* lse, void* scores, const void* q,
                              const void* k, const void* v, const uint8_t* mask, const void* bias,
                              const AttentionLayout& L, cudaStream_t stream) {
  const int64_t rows = L.batch * L.heads * L.q_len, total = rows * L.kv_len;
  if (rows == 0) return;
  libai::cuda::dispatch_float_code(dtype, [&](auto tag) {
    using T = decltype(tag);
    using C = compute_type<T>;
    C* s = static_cast<C*>(scores);
    if (total > 0)
      scores_kernel<T><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
          s, static_cast<const T*>(q), static_cast<const T*>(k), mask, static_cast<const T*>(bias),
          L);
    softmax_rows_kernel<C>
        <<<blocks_for(rows, 1), kThreads, 0, stream>>>(s, static_cast<C*>(lse), rows, L.kv_len);
    if (L.dv > 0)
      pv_kernel<T><<<blocks_for(rows * L.dv, kThreads), kThreads, 0, stream>>>(
          static_cast<T*>(out), s, static_cast<const T*>(v), L);
  });
}

void launch_attention_backward(int dtype, void* dq, void* dk, void* dv, void* dbias, void* scratch,
                               const void* q, const void* k, const void* v, const void* out,
                               const void* grad_out, const void* lse, const uint8_t* mask,
                               const void* bias, const AttentionLayout& L, cudaStream_t stream) {
  const int64_t rows = L.batch * L.heads * L.q_len, total = rows * L.kv_len;
  const int64_t keys = L.batch * L.heads * L.kv_len;
  libai::cuda::dispatch_float_code(dtype, [&](auto tag) {
    using T = decltype(tag);
    using C = compute_type<T>;
    // scratch: s/ds [total], p [total], D [rows]
    C* s = static_cast<C*>(scratch);
    C* p = s + total;
    C* dd = p + total;
    const T* tq = static_cast<const T*>(q);
    const T* tk = static_cast<const T*>(k);
    const T* tv = static_cast<const T*>(v);
    const T* tg = static_cast<const T*>(grad_out);
    if (total > 0) {
      scores_kernel<T><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
          s, tq, tk, mask, static_cast<const T*>(bias), L);
      probs_kernel<C><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
          p, s, static_cast<const C*>(lse), total, L.kv_len);
    }
    if (rows > 0)
      rowdot_kernel<T><<<blocks_for(rows, kThreads), kThreads, 0, stream>>>(
          dd, tg, static_cast<const T*>(out), L);
    if (total > 0)
      ds_kernel<T><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(s, static_cast<T*>(dbias),
                                                                         p, dd, tg, tv, L);
    if (rows * L.d > 0)
      dq_kernel<T><<<blocks_for(rows * L.d, kThreads), kThreads, 0, stream>>>(static_cast<T*>(dq),
                                                                              s, tk, L);
    if (keys * (L.d + L.dv) > 0)
      dkv_kernel<T><<<blocks_for(keys * (L.d + L.dv), kThreads), kThreads, 0, stream>>>(
          static_cast<T*>(dk), static_cast<T*>(dv), s, p, tq, tg, L);
  });
}

}  // namespace libai::ops::cuda
