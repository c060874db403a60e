// CPU kernels of ops/attention.h: tiled attention with an online softmax.
//
// Note [Attention tiles on the CPU]
// The forward pass owns one (batch, head, query tile) per task: it keeps the tile's
// running max m, running sum l and unnormalised output in f32 (f64 for f64) and streams
// the key/value tiles through them, rescaling by exp(m_old - m_new) when the max grows.
// Keys are loaded transposed ([d, key_tile]) so that the score loop runs over contiguous
// keys and vectorises without reassociating sums. The backward pass owns one (batch,
// head): for each key tile it visits the query tiles that can see it, recomputes
// P = exp(S - lse), and accumulates dV = Pᵀ dO, dK = dSᵀ Q (per key tile) and dQ = dS K
// (per head), with dS = P ∘ (dP - rowsum(dO ∘ O)) as in FlashAttention-2. A fully masked
// row has lse = +inf, which makes its P, and so all its gradients, exactly zero.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/attention.h"
#include "ops/cpu/vector_math.h"
#include "runtime/threads.h"

namespace libai::ops::cpu {
namespace {

constexpr int64_t kQueryTile = 32;
constexpr int64_t kKeyTile = 64;
// Queries whose score and value products run together (register blocking).
constexpr int kRowBlock = 4;

// e^x, exactly 0 for x = -inf (masked scores, or rows whose lse is +inf). f32 uses the
// vectorisable exp so that the softmax loops stay SIMD; f64 keeps <cmath> for gradcheck.
template <typename C>
inline C exp_or_zero(C x) {
  C y;
  if constexpr (std::is_same_v<C, float>)
    y = exp_f32(x);
  else
    y = std::exp(x);
  return x == -std::numeric_limits<C>::infinity() ? C(0) : y;
}

// A strided [batch, heads, len, width] tensor read row by row.
template <typename T>
struct Rows {
  const T* base;
  int64_t s0, s1, s2, s3;
  explicit Rows(const Tensor& t)
      : base(static_cast<const T*>(t.storage()->data) + t.offset()),
        s0(t.strides()[0]),
        s1(t.strides()[1]),
        s2(t.strides()[2]),
        s3(t.strides()[3]) {}
  const T* row(int64_t b, int64_t h, int64_t i) const { return base + b * s0 + h * s1 + i * s2; }
};

template <typename T>
struct Problem {
  using C = compute_t<T>;
  int64_t batch, heads, q_len, kv_len, d, dv, diagonal;  // diagonal = kv_len - q_len
  C scale;
  bool causal;
  Rows<T> q, k, v;
  const uint8_t* mask = nullptr;  // [batch, kv_len], bool and u8 are both one byte
  int64_t mask_s0 = 0, mask_s1 = 0;
  const T* bias = nullptr;  // [batch, heads, q_len, kv_len], strided
  int64_t bias_s[4] = {0, 0, 0, 0};

  Problem(const Tensor& tq, const Tensor& tk, const Tensor& tv, const AttentionParams& p)
      : batch(tq.shape()[0]),
        heads(tq.shape()[1]),
        q_len(tq.shape()[2]),
        kv_len(tk.shape()[2]),
        d(tq.shape()[3]),
        dv(tv.shape()[3]),
        diagonal(kv_len - q_len),
        scale(C(p.scale)),
        causal(p.causal),
        q(tq),
        k(tk),
        v(tv) {
    if (p.key_padding_mask.defined()) {
      const Tensor& m = p.key_padding_mask;
      mask = static_cast<const uint8_t*>(m.storage()->data) + m.offset();
      mask_s0 = m.strides()[0];
      mask_s1 = m.strides()[1];
    }
    if (p.bias.defined()) {
      bias = static_cast<const T*>(p.bias.storage()->data) + p.bias.offset();
      for (int i = 0; i < 4; ++i) bias_s[i] = p.bias.strides()[i];
    }
  }

  // One past the last key any query in [i0, i0 + rows) may see.
  int64_t key_end(int64_t i0, int64_t rows) const {
    return causal ? std::clamp<int64_t>(i0 + rows + diagonal, 0, kv_len) : kv_len;
  }

  // dst [rows, width] = factor * src rows i0.., from the strided view.
  static void load_rows(const Rows<T>& src, int64_t b, int64_t h, int64_t i0, int64_t rows,
                        int64_t width, C factor, C* dst) {
    for (int64_t r = 0; r < rows; ++r) {
      const T* p = src.row(b, h, i0 + r);
      for (int64_t c = 0; c < width; ++c) dst[r * width + c] = load(p[c * src.s3]) * factor;
    }
  }
  // dst [width, kKeyTile] = rows j0.. of src, transposed.
  static void load_transposed(const Rows<T>& src, int64_t b, int64_t h, int64_t j0, int64_t cols,
                              int64_t width, C* dst) {
    for (int64_t j = 0; j < cols; ++j) {
      const T* p = src.row(b, h, j0 + j);
      for (int64_t c = 0; c < width; ++c) dst[c * kKeyTile + j] = load(p[c * src.s3]);
    }
  }

  // s [R, kKeyTile] = qs [R, d] kt [d, kKeyTile]: local rows of kKeyTile sums stay in vector
  // registers across the d loop, each row of kt loaded once for R queries.
  // Only the first W keys of the tile are computed (W: the tile's keys rounded up to 16).
  template <int R, int W = kKeyTile>
  void products(const C* qs, const C* kt, C* s) const {
    if constexpr (std::is_same_v<C, float>) {
      // Written with vector_math's Lanes: left to itself, GCC vectorised the d loop of the
      // plain arrays below with 128-bit shuffles (a tenth of MiniLM's encode time).
      constexpr int V = W / kLanes;
      Lanes acc[R][V] = {};
      for (int64_t c = 0; c < d; ++c) {
        const float* kc = kt + c * kKeyTile;
        Lanes kv[V];
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) kv[v] = load_lanes(kc + v * kLanes);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          const Lanes qv = splat_lanes(qs[r * d + c]);
#pragma GCC unroll 4
          for (int v = 0; v < V; ++v) acc[r][v] += qv * kv[v];
        }
      }
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) store_lanes(s + r * kKeyTile + v * kLanes, acc[r][v]);
      return;
    }
    C row[R][W] = {};
    for (int64_t c = 0; c < d; ++c) {
      const C* kc = kt + c * kKeyTile;
      for (int r = 0; r < R; ++r) {
        const C qv = qs[r * d + c];
        for (int64_t j = 0; j < W; ++j) row[r][j] += qv * kc[j];
      }
    }
    for (int r = 0; r < R; ++r) std::copy(row[r], row[r] + W, s + r * kKeyTile);
  }

  template <int R>
  void products_upto(int64_t cols, const C* qs, const C* kt, C* s) const {
    switch ((cols + 15) / 16) {
      case 1: return products<R, 16>(qs, kt, s);
      case 2: return products<R, 32>(qs, kt, s);
      case 3: return products<R, 48>(qs, kt, s);
      default: return products<R, kKeyTile>(qs, kt, s);
    }
  }

  // s [rows, kKeyTile] = qs kᵀ + bias for queries i0.. and keys j0..; -inf where masked.
  // qs [rows, d] is already scaled; kt [d, kKeyTile].
  void scores(int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t j0, int64_t cols, const C* qs,
              const C* kt, C* s) const {
    constexpr C kNegInf = -std::numeric_limits<C>::infinity();
    int64_t r = 0;
    for (; r + kRowBlock <= rows; r += kRowBlock)
      products_upto<kRowBlock>(cols, qs + r * d, kt, s + r * kKeyTile);
    for (; r < rows; ++r) products_upto<1>(cols, qs + r * d, kt, s + r * kKeyTile);
    for (r = 0; r < rows; ++r) {
      C* sr = s + r * kKeyTile;
      const int64_t i = i0 + r;
      if (bias != nullptr) {
        const T* br = bias + b * bias_s[0] + h * bias_s[1] + i * bias_s[2] + j0 * bias_s[3];
        for (int64_t j = 0; j < cols; ++j) sr[j] += load(br[j * bias_s[3]]);
      }
      if (mask != nullptr) {
        const uint8_t* mr = mask + b * mask_s0 + j0 * mask_s1;
        for (int64_t j = 0; j < cols; ++j)
          if (mr[j * mask_s1] == 0) sr[j] = kNegInf;
      }
      if (causal)
        for (int64_t j = std::max<int64_t>(0, i + diagonal + 1 - j0); j < cols; ++j)
          sr[j] = kNegInf;
    }
  }
};

// out[r] [dv] += Σ_j p[r][j] · v[j, :] for R rows (p's kKeyTile apart, out's dv apart) and v
// [cols, dv]. Blocks of 64 columns, then of 16 (MiniLM's heads are 32 wide), go through local
// arrays that the compiler keeps in vector registers across the j loop; each row of v loaded
// serves R rows.
template <int R, int W, typename C>
void accumulate_pv_columns(const C* p, const C* v, int64_t cols, int64_t dv, int64_t c0, C* out) {
  C part[R][W];
  for (int r = 0; r < R; ++r) std::copy(out + r * dv + c0, out + r * dv + c0 + W, part[r]);
  for (int64_t j = 0; j < cols; ++j) {
    const C* vr = v + j * dv + c0;
    for (int r = 0; r < R; ++r) {
      const C pj = p[r * kKeyTile + j];
      for (int64_t c = 0; c < W; ++c) part[r][c] += pj * vr[c];
    }
  }
  for (int r = 0; r < R; ++r) std::copy(part[r], part[r] + W, out + r * dv + c0);
}

template <int R, typename C>
void accumulate_pv(const C* p, const C* v, int64_t cols, int64_t dv, C* out) {
  int64_t c0 = 0;
  for (; c0 + 64 <= dv; c0 += 64) accumulate_pv_columns<R, 64>(p, v, cols, dv, c0, out);
  for (; c0 + 16 <= dv; c0 += 16) accumulate_pv_columns<R, 16>(p, v, cols, dv, c0, out);
  for (int r = 0; r < R; ++r)
    for (int64_t j = 0; j < cols; ++j)
      for (int64_t c = c0; c < dv; ++c) out[r * dv + c] += p[r * kKeyTile + j] * v[j * dv + c];
}

template <typename T>
void forward_typed(const Tensor& tq, const Tensor& tk, const Tensor& tv, const AttentionParams& p,
                   Tensor& out, Tensor& lse_out) {
  using C = compute_t<T>;
  const Problem<T> pr(tq, tk, tv, p);
  const int64_t d = pr.d, dv = pr.dv;
  const int64_t q_tiles = (pr.q_len + kQueryTile - 1) / kQueryTile;
  T* out_base = out.data<T>();      // [batch, heads, q_len, dv]
  C* lse_base = lse_out.data<C>();  // [batch, heads, q_len]
  parallel_for(0, pr.batch * pr.heads * q_tiles, 1, [&](int64_t begin, int64_t end) {
    std::vector<C> qs(size_t(kQueryTile * d)), kt(size_t(d * kKeyTile), C(0));
    std::vector<C> vt(size_t(kKeyTile * dv)), s(size_t(kQueryTile * kKeyTile));
    std::vector<C> acc(size_t(kQueryTile * dv)), m(kQueryTile), l(kQueryTile);
    std::vector<char> live(kQueryTile);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t bh = item / q_tiles, b = bh / pr.heads, h = bh % pr.heads;
      const int64_t i0 = (item % q_tiles) * kQueryTile;
      const int64_t rows = std::min(kQueryTile, pr.q_len - i0);
      Problem<T>::load_rows(pr.q, b, h, i0, rows, d, pr.scale, qs.data());
      std::fill(m.begin(), m.end(), -std::numeric_limits<C>::infinity());
      std::fill(l.begin(), l.end(), C(0));
      std::fill(acc.begin(), acc.end(), C(0));
      const int64_t key_end = pr.key_end(i0, rows);
      for (int64_t j0 = 0; j0 < key_end; j0 += kKeyTile) {
        const int64_t cols = std::min(kKeyTile, key_end - j0);
        Problem<T>::load_transposed(pr.k, b, h, j0, cols, d, kt.data());
        Problem<T>::load_rows(pr.v, b, h, j0, cols, dv, C(1), vt.data());  // [cols, dv]
        pr.scores(b, h, i0, rows, j0, cols, qs.data(), kt.data(), s.data());
        for (int64_t r = 0; r < rows; ++r) {
          C* sr = s.data() + r * kKeyTile;
          C tile_max = -std::numeric_limits<C>::infinity();
          if constexpr (std::is_same_v<C, float>)
            tile_max = max_f32(sr, cols);
          else
            for (int64_t j = 0; j < cols; ++j) tile_max = std::max(tile_max, sr[j]);
          const C m_new = std::max(m[r], tile_max);
          live[r] = m_new != -std::numeric_limits<C>::infinity();
          if (!live[r]) continue;  // all masked so far: nothing to add
          const C alpha = exp_or_zero(m[r] - m_new);
          C sum = 0;
          if constexpr (std::is_same_v<C, float>) {
            sum = exp_sum_f32(sr, m_new, sr, cols);  // in vector registers; e^-inf = 0
          } else {
            for (int64_t j = 0; j < cols; ++j) sr[j] = exp_or_zero(sr[j] - m_new);
            for (int64_t j = 0; j < cols; ++j) sum += sr[j];
          }
          l[r] = l[r] * alpha + sum;
          m[r] = m_new;
          C* ar = acc.data() + r * dv;
          for (int64_t c = 0; c < dv; ++c) ar[c] *= alpha;
        }
        // The value products, kRowBlock live rows at a time.
        int64_t r = 0;
        for (; r + kRowBlock <= rows; r += kRowBlock) {
          bool all_live = true;
          for (int64_t q = r; q < r + kRowBlock; ++q) all_live = all_live && live[q];
          if (all_live) {
            accumulate_pv<kRowBlock>(s.data() + r * kKeyTile, vt.data(), cols, dv,
                                     acc.data() + r * dv);
            continue;
          }
          for (int64_t q = r; q < r + kRowBlock; ++q)
            if (live[q])
              accumulate_pv<1>(s.data() + q * kKeyTile, vt.data(), cols, dv, acc.data() + q * dv);
        }
        for (; r < rows; ++r)
          if (live[r])
            accumulate_pv<1>(s.data() + r * kKeyTile, vt.data(), cols, dv, acc.data() + r * dv);
      }
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t row = bh * pr.q_len + i0 + r;
        T* o = out_base + row * dv;
        const bool empty = l[r] == C(0);
        const C inv = empty ? C(0) : C(1) / l[r];
        for (int64_t c = 0; c < dv; ++c) o[c] = store<T>(acc[size_t(r * dv + c)] * inv);
        lse_base[row] = empty ? std::numeric_limits<C>::infinity() : m[r] + std::log(l[r]);
      }
    }
  });
}

template <typename T>
void backward_typed(const Tensor& tq, const Tensor& tk, const Tensor& tv, const Tensor& out,
                    const Tensor& grad_out, const Tensor& lse_t, const AttentionParams& p,
                    Tensor& dq, Tensor& dk, Tensor& dv_out, Tensor& dbias) {
  using C = compute_t<T>;
  const Problem<T> pr(tq, tk, tv, p);
  const int64_t d = pr.d, dv = pr.dv, q_len = pr.q_len, kv_len = pr.kv_len;
  const Rows<T> go(grad_out);
  const T* o_base = out.data<T>();  // [batch, heads, q_len, dv]
  const C* lse_base = lse_t.data<C>();
  T* dq_base = dq.data<T>();
  T* dk_base = dk.data<T>();
  T* dv_base = dv_out.data<T>();
  T* db_base = dbias.defined() ? dbias.data<T>() : nullptr;
  if (db_base != nullptr) std::fill(db_base, db_base + dbias.numel(), store<T>(C(0)));
  parallel_for(0, pr.batch * pr.heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<C> dq_acc, delta;
    std::vector<C> qs(size_t(kQueryTile * d)), dos(size_t(kQueryTile * dv));
    std::vector<C> kr(size_t(kKeyTile * d)), kt(size_t(d * kKeyTile), C(0));
    std::vector<C> vt(size_t(dv * kKeyTile), C(0)), s(size_t(kQueryTile * kKeyTile));
    std::vector<C> dp(size_t(kQueryTile * kKeyTile)), dk_acc(size_t(kKeyTile * d));
    std::vector<C> dv_acc(size_t(kKeyTile * dv));
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / pr.heads, h = bh % pr.heads;
      // delta[i] = rowsum(dO ∘ O), the softmax Jacobian's correction term.
      delta.assign(size_t(q_len), C(0));
      for (int64_t i = 0; i < q_len; ++i) {
        const T* g = go.row(b, h, i);
        const T* o = o_base + (bh * q_len + i) * dv;
        C sum = 0;
        for (int64_t c = 0; c < dv; ++c) sum += load(g[c * go.s3]) * load(o[c]);
        delta[size_t(i)] = sum;
      }
      dq_acc.assign(size_t(q_len * d), C(0));
      for (int64_t j0 = 0; j0 < kv_len; j0 += kKeyTile) {
        const int64_t cols = std::min(kKeyTile, kv_len - j0);
        Problem<T>::load_rows(pr.k, b, h, j0, cols, d, C(1), kr.data());
        Problem<T>::load_transposed(pr.k, b, h, j0, cols, d, kt.data());
        Problem<T>::load_transposed(pr.v, b, h, j0, cols, dv, vt.data());
        std::fill(dk_acc.begin(), dk_acc.end(), C(0));
        std::fill(dv_acc.begin(), dv_acc.end(), C(0));
        // Under the causal mask, queries before j0 - diagonal cannot see this tile.
        const int64_t first = pr.causal ? std::max<int64_t>(0, j0 - pr.diagonal) : 0;
        for (int64_t i0 = first - first % kQueryTile; i0 < q_len; i0 += kQueryTile) {
          const int64_t rows = std::min(kQueryTile, q_len - i0);
          Problem<T>::load_rows(pr.q, b, h, i0, rows, d, pr.scale, qs.data());
          Problem<T>::load_rows(go, b, h, i0, rows, dv, C(1), dos.data());
          pr.scores(b, h, i0, rows, j0, cols, qs.data(), kt.data(), s.data());
          for (int64_t r = 0; r < rows; ++r) {
            const int64_t i = i0 + r;
            const C lse = lse_base[bh * q_len + i];
            C* pr_row = s.data() + r * kKeyTile;  // becomes P, then dS
            C* dpr = dp.data() + r * kKeyTile;
            const C* dor = dos.data() + r * dv;
            for (int64_t j = 0; j < cols; ++j) pr_row[j] = exp_or_zero(pr_row[j] - lse);
            for (int64_t j = 0; j < cols; ++j) {  // dV += Pᵀ dO
              C* dvr = dv_acc.data() + j * dv;
              for (int64_t c = 0; c < dv; ++c) dvr[c] += pr_row[j] * dor[c];
            }
            for (int64_t j = 0; j < kKeyTile; ++j) dpr[j] = C(0);
            for (int64_t c = 0; c < dv; ++c) {  // dP = dO Vᵀ
              const C g = dor[c];
              const C* vc = vt.data() + c * kKeyTile;
              for (int64_t j = 0; j < kKeyTile; ++j) dpr[j] += g * vc[j];
            }
            const C di = delta[size_t(i)];
            for (int64_t j = 0; j < cols; ++j) pr_row[j] *= dpr[j] - di;  // dS
            if (db_base != nullptr) {
              T* dbr = db_base + (bh * q_len + i) * kv_len + j0;
              for (int64_t j = 0; j < cols; ++j) dbr[j] = store<T>(pr_row[j]);
            }
            C* dqr = dq_acc.data() + i * d;
            const C* qr = qs.data() + r * d;
            for (int64_t j = 0; j < cols; ++j) {
              const C ds = pr_row[j];
              if (ds == C(0)) continue;  // masked keys
              const C* kj = kr.data() + j * d;
              C* dkj = dk_acc.data() + j * d;
              for (int64_t c = 0; c < d; ++c) dqr[c] += ds * kj[c];  // dQ += dS K (scaled later)
              for (int64_t c = 0; c < d; ++c) dkj[c] += ds * qr[c];  // dK += dSᵀ (scale Q)
            }
          }
        }
        for (int64_t j = 0; j < cols; ++j) {
          T* dkr = dk_base + (bh * kv_len + j0 + j) * d;
          T* dvr = dv_base + (bh * kv_len + j0 + j) * dv;
          for (int64_t c = 0; c < d; ++c) dkr[c] = store<T>(dk_acc[size_t(j * d + c)]);
          for (int64_t c = 0; c < dv; ++c) dvr[c] = store<T>(dv_acc[size_t(j * dv + c)]);
        }
      }
      T* dqh = dq_base + bh * q_len * d;
      for (int64_t n = 0; n < q_len * d; ++n) dqh[n] = store<T>(dq_acc[size_t(n)] * pr.scale);
    }
  });
}

void attention_forward_cpu(const Tensor& q, const Tensor& k, const Tensor& v,
                           const AttentionParams& params, Tensor& out, Tensor& lse) {
  dispatch_floating(q.dtype(), "scaled_dot_product_attention",
                    [&]<typename T>() { forward_typed<T>(q, k, v, params, out, lse); });
}

void attention_backward_cpu(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                            const Tensor& grad_out, const Tensor& lse,
                            const AttentionParams& params, Tensor& dq, Tensor& dk, Tensor& dv,
                            Tensor& dbias) {
  dispatch_floating(q.dtype(), "scaled_dot_product_attention backward", [&]<typename T>() {
    backward_typed<T>(q, k, v, out, grad_out, lse, params, dq, dk, dv, dbias);
  });
}

}  // namespace

LIBAI_REGISTER_KERNEL(attention_forward, DeviceType::cpu, attention_forward_cpu);
LIBAI_REGISTER_KERNEL(attention_backward, DeviceType::cpu, attention_backward_cpu);

}  // namespace libai::ops::cpu
