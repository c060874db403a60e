#include "ops/attention.h"

#include <cmath>

#include "ops/broadcast.h"
#include "tests/ops/gradcheck.h"

namespace libai {
namespace {

using ops::AttentionOptions;
using testing::expect_close;
using testing::gradcheck;
using testing::random;

// Reference: the whole score matrix materialised in f64, softmax over the kept keys.
Tensor reference_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                           const AttentionOptions& o) {
  const int64_t B = q.size(0), H = q.size(1), Q = q.size(2), K = k.size(2), D = q.size(3),
                DV = v.size(3);
  auto qv = q.to_vector<double>(), kv = k.to_vector<double>(), vv = v.to_vector<double>();
  std::vector<double> mask = o.key_padding_mask.defined() ? o.key_padding_mask.to_vector<double>()
                                                          : std::vector<double>(size_t(B * K), 1.0);
  std::vector<double> bias = o.attn_bias.defined()
                                 ? ops::expand_view(o.attn_bias, {B, H, Q, K}).to_vector<double>()
                                 : std::vector<double>(size_t(B * H * Q * K), 0.0);
  const double scale = o.scale ? *o.scale : 1.0 / std::sqrt(double(D));
  Tensor out = Tensor::zeros({B, H, Q, DV}, DType::f64);
  double* po = out.data<double>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Q; ++i) {
        std::vector<double> s(static_cast<size_t>(K));
        std::vector<bool> keep(static_cast<size_t>(K));
        double mx = -INFINITY;
        for (int64_t j = 0; j < K; ++j) {
          keep[j] = mask[b * K + j] != 0 && (!o.causal || j <= i + (K - Q));
          double dot = 0;
          for (int64_t c = 0; c < D; ++c)
            dot += qv[((b * H + h) * Q + i) * D + c] * kv[((b * H + h) * K + j) * D + c];
          s[j] = scale * dot + bias[((b * H + h) * Q + i) * K + j];
          if (keep[j]) mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < K; ++j) sum += keep[j] ? std::exp(s[j] - mx) : 0.0;
        if (sum == 0) continue;  // fully masked row: zeros
        for (int64_t j = 0; j < K; ++j) {
          if (!keep[j]) continue;
          double p = std::exp(s[j] - mx) / sum;
          for (int64_t c = 0; c < DV; ++c)
            po[((b * H + h) * Q + i) * DV + c] += p * vv[((b * H + h) * K + j) * DV + c];
        }
      }
  return out;
}

// [batch, kv_len] mask keeping key j of batch b unless (j + b) % 3 == 0.
Tensor padding_mask(int64_t batch, int64_t kv_len) {
  Tensor m = Tensor::empty({batch, kv_len}, DType::boolean);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t j = 0; j < kv_len; ++j) m.data<bool>()[b * kv_len + j] = (j + b) % 3 != 0;
  return m;
}

struct Case {
  int64_t batch, heads, q_len, kv_len, d, dv;
  bool causal, mask, bias;
};

TEST(Attention, ForwardMatchesNaiveReference) {
  const Case cases[] = {
      {2, 3, 7, 13, 16, 16, false, false, false}, {2, 3, 7, 13, 16, 16, true, false, false},
      {2, 3, 7, 13, 16, 16, false, true, false},  {2, 3, 7, 13, 16, 16, false, false, true},
      {2, 3, 7, 13, 16, 16, true, true, true},    {1, 2, 70, 70, 8, 8, true, false, false},
      {1, 2, 45, 150, 5, 9, true, true, true},    {2, 1, 13, 7, 4, 4, true, false, false},
      {1, 1, 1, 100, 8, 8, true, true, false},  // one decoding step against a KV cache
      {1, 2, 9, 70, 8, 80, true, true, true},   // dv = one 64-wide block + a tail
      {2, 2, 21, 19, 32, 32, false, true, false},  // MiniLM's heads: 16-wide value blocks
      {1, 2, 6, 40, 8, 40, true, false, true},     // dv = two 16-wide blocks + a tail
  };
  uint64_t seed = 1;
  for (const Case& c : cases) {
    Tensor q = random({c.batch, c.heads, c.q_len, c.d}, seed++);
    Tensor k = random({c.batch, c.heads, c.kv_len, c.d}, seed++);
    Tensor v = random({c.batch, c.heads, c.kv_len, c.dv}, seed++);
    AttentionOptions o;
    o.causal = c.causal;
    if (c.mask) o.key_padding_mask = padding_mask(c.batch, c.kv_len);
    if (c.bias) o.attn_bias = random({c.heads, c.q_len, c.kv_len}, seed++, DType::f64, -2, 2);
    std::string what = str_cat("q_len ", c.q_len, " kv_len ", c.kv_len, " causal ", c.causal,
                               " mask ", c.mask, " bias ", c.bias);
    expect_close(ops::scaled_dot_product_attention(q, k, v, o), reference_attention(q, k, v, o),
                 1e-13, what.c_str());
  }
}

TEST(Attention, ExplicitScaleAndStridedInputs) {
  // q, k, v as [batch, seq, heads, d] memory viewed as [batch, heads, seq, d] (no copy).
  Tensor raw = random({2, 9, 3, 3, 8}, 40);  // [batch, seq, qkv, heads, d]
  auto part = [&](int64_t which) {
    return raw.as_strided({2, 3, 9, 8}, {9 * 72, 8, 72, 1}, which * 24);
  };
  AttentionOptions o;
  o.scale = 0.3;
  o.causal = true;
  Tensor q = part(0), k = part(1), v = part(2);
  expect_close(ops::scaled_dot_product_attention(q, k, v, o),
               reference_attention(q.clone_raw(), k.clone_raw(), v.clone_raw(), o), 1e-13);
}

TEST(Attention, FullyMaskedRowsGiveZerosNotNaN) {
  Tensor q = random({2, 2, 4, 8}, 1).set_requires_grad(true);
  Tensor k = random({2, 2, 6, 8}, 2).set_requires_grad(true);
  Tensor v = random({2, 2, 6, 8}, 3).set_requires_grad(true);
  AttentionOptions o;
  o.key_padding_mask = Tensor::ones({2, 6}, DType::u8);
  std::fill_n(o.key_padding_mask.data<uint8_t>(), 6, uint8_t(0));  // batch 0 sees no key
  Tensor out = ops::scaled_dot_product_attention(q, k, v, o);
  expect_close(out, reference_attention(q, k, v, o), 1e-13);
  auto values = out.to_vector<double>();
  for (size_t i = 0; i < values.size() / 2; ++i) ASSERT_EQ(values[i], 0.0) << i;
  auto grads = autograd::grad(out, {q, k, v}, random(out.shape(), 4));
  for (const Tensor& g : grads)
    for (double x : g.to_vector<double>()) ASSERT_TRUE(std::isfinite(x));
  auto dq = grads[0].to_vector<double>();
  for (size_t i = 0; i < dq.size() / 2; ++i) ASSERT_EQ(dq[i], 0.0) << i;
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
  const Case cases[] = {
      {1, 2, 5, 7, 4, 3, true, true, true},
      {2, 1, 3, 9, 4, 4, false, false, false},
      {1, 1, 40, 70, 3, 2, true, false, true},  // several query and key tiles
      {1, 1, 6, 4, 3, 3, true, false, false},   // q_len > kv_len: first rows fully masked
  };
  uint64_t seed = 100;
  for (const Case& c : cases) {
    Tensor q = random({c.batch, c.heads, c.q_len, c.d}, seed++).set_requires_grad(true);
    Tensor k = random({c.batch, c.heads, c.kv_len, c.d}, seed++).set_requires_grad(true);
    Tensor v = random({c.batch, c.heads, c.kv_len, c.dv}, seed++).set_requires_grad(true);
    Tensor bias =
        c.bias ? random({c.heads, c.q_len, c.kv_len}, seed++).set_requires_grad(true) : Tensor();
    Tensor mask = c.mask ? padding_mask(c.batch, c.kv_len) : Tensor();
    bool causal = c.causal;
    std::vector<Tensor> inputs{q, k, v};
    if (c.bias) inputs.push_back(bias);
    gradcheck(
        [&](const std::vector<Tensor>& in) {
          AttentionOptions o;
          o.causal = causal;
          o.key_padding_mask = mask;
          if (in.size() > 3) o.attn_bias = in[3];
          return ops::scaled_dot_product_attention(in[0], in[1], in[2], o);
        },
        inputs);
  }
}

TEST(Attention, LowPrecisionWithinTolerance) {
  Tensor q = random({2, 3, 37, 32}, 7), k = random({2, 3, 75, 32}, 8),
         v = random({2, 3, 75, 32}, 9);
  Tensor bias = random({1, 3, 37, 75}, 10);
  AttentionOptions o;
  o.causal = true;
  o.key_padding_mask = padding_mask(2, 75);
  o.attn_bias = bias;
  Tensor ref = reference_attention(q, k, v, o);
  Tensor q64 = q.detach().set_requires_grad(true);
  Tensor g = random(ref.shape(), 11);
  auto ref_grads = autograd::grad(ops::scaled_dot_product_attention(q64, k, v, o), {q64}, g);
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    AttentionOptions od = o;
    od.attn_bias = to_dtype(bias, dt);
    Tensor qd = to_dtype(q, dt).set_requires_grad(true);
    Tensor out = ops::scaled_dot_product_attention(qd, to_dtype(k, dt), to_dtype(v, dt), od);
    EXPECT_EQ(out.dtype(), dt);
    double tol = dt == DType::f32 ? 1e-5 : dt == DType::bf16 ? 2e-2 : 4e-3;
    expect_close(out, ref, tol, dtype_name(dt));
    auto grads = autograd::grad(out, {qd}, to_dtype(g, dt));
    expect_close(grads[0], ref_grads[0], tol * 2, "dq");
  }
}

TEST(Attention, ErrorsNameShapes) {
  Tensor q = Tensor::zeros({2, 3, 4, 8}), k = Tensor::zeros({2, 3, 5, 8});
  try {
    ops::scaled_dot_product_attention(q, k, Tensor::zeros({2, 3, 6, 8}));
    FAIL() << "expected an error";
  } catch (const InvalidArgument& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("[2, 3, 5, 8]"), std::string::npos) << what;
    EXPECT_NE(what.find("[2, 3, 6, 8]"), std::string::npos) << what;
  }
  AttentionOptions bad_mask;
  bad_mask.key_padding_mask = Tensor::ones({2, 4}, DType::boolean);
  EXPECT_THROW(ops::scaled_dot_product_attention(q, k, k, bad_mask), InvalidArgument);
  AttentionOptions bad_bias;
  bad_bias.attn_bias = Tensor::zeros({3, 5, 4});
  EXPECT_THROW(ops::scaled_dot_product_attention(q, k, k, bad_bias), InvalidArgument);
  EXPECT_THROW(ops::scaled_dot_product_attention(Tensor::zeros({3, 4, 8}), k, k), InvalidArgument);
}

}  // namespace
}  // namespace libai
