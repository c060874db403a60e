// CUDA backend against the CPU backend: every test runs the same op on cpu:0 and cuda:0 and
// compares with a tolerance per dtype (CPU is the oracle). Without a GPU every test that
// needs one is skipped; CudaProbe checks that asking for a missing device fails cleanly.
#include <cmath>
#include <limits>

#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/loss.h"
#include "ops/matmul.h"
#include "ops/norm.h"
#include "ops/reduce.h"
#include "ops/select.h"
#include "ops/softmax.h"
#include "ops/view.h"
#include "runtime/allocator.h"
#include "tests/ops/gradcheck.h"

namespace libai {
namespace {

using testing::expect_close;
using testing::random;

#define REQUIRE_CUDA() \
  if (!libai::cuda_available()) GTEST_SKIP() << "no CUDA device"

Tensor gpu(const Tensor& t) { return to_device(t, Device::cuda(0)); }
Tensor cpu(const Tensor& t) { return to_device(t, Device::cpu()); }

double tolerance(DType dtype) {
  switch (dtype) {
    case DType::f64: return 1e-12;
    case DType::f32: return 1e-5;
    default: return 1e-2;
  }
}

// The transpose of the last two dims, as a strided view.
Tensor transposed(const Tensor& t) {
  Shape shape = t.shape(), strides = t.strides();
  std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
  std::swap(strides[strides.size() - 1], strides[strides.size() - 2]);
  return t.as_strided(shape, strides, t.offset());
}

TEST(CudaProbe, MissingDeviceFailsCleanly) {
  if (cuda_available()) {
    EXPECT_GT(cuda_device_count(), 0);
    EXPECT_THROW(allocator_for(Device::cuda(cuda_device_count())), Error);
    return;
  }
  EXPECT_EQ(cuda_device_count(), 0);
  EXPECT_THROW(allocator_for(Device::cuda(0)), Error);
  EXPECT_THROW(to_device(Tensor::ones({2}), Device::cuda(0)), Error);
}

TEST(CudaRuntime, AllocatorReusesFreedBlocks) {
  REQUIRE_CUDA();
  Allocator& a = allocator_for(Device::cuda(0));
  a.empty_cache();
  const auto before = a.stats();
  void* p = a.allocate(1000);  // size class 1024
  EXPECT_EQ(a.stats().allocated_bytes, before.allocated_bytes + 1024);
  a.deallocate(p, 1000);
  EXPECT_EQ(a.stats().cached_bytes, 1024u);
  void* q = a.allocate(700);  // same class: the freed block comes back
  EXPECT_EQ(q, p);
  EXPECT_EQ(a.stats().pool_hits, before.pool_hits + 1);
  a.deallocate(q, 700);
  void* big = a.allocate(3 << 20);  // large blocks round to 2 MiB multiples
  EXPECT_EQ(a.stats().allocated_bytes, before.allocated_bytes + (size_t(4) << 20));
  a.deallocate(big, 3 << 20);
  EXPECT_GE(a.stats().peak_allocated_bytes, size_t(4) << 20);
  a.empty_cache();
  EXPECT_EQ(a.stats().cached_bytes, 0u);
}

TEST(CudaRuntime, HostDeviceRoundTripEveryDType) {
  REQUIRE_CUDA();
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i64, DType::i32,
                      DType::u8, DType::boolean}) {
    Tensor x = random({3, 5, 7}, 11, DType::f64, 0.0, 2.0);
    Tensor h = Tensor::empty(x.shape(), dtype);
    h.copy_from(x);
    Tensor d = gpu(h);
    EXPECT_TRUE(d.device().is_cuda());
    expect_close(cpu(d), h, 0.0, dtype_name(dtype));
  }
}

TEST(CudaRuntime, StridedAndConvertingCopies) {
  REQUIRE_CUDA();
  Tensor x = random({4, 6}, 3, DType::f32);
  // Host transposed view -> device; device transposed view -> host; device -> device.
  expect_close(cpu(gpu(transposed(x))), transposed(x), 0.0, "upload of a view");
  Tensor d = gpu(x);
  expect_close(cpu(transposed(d)), transposed(x), 0.0, "download of a view");
  expect_close(cpu(transposed(d).clone_raw()), transposed(x), 0.0, "device gather");
  // Conversions on the device (floating) and through the host (integer).
  expect_close(cpu(to_dtype(d, DType::bf16)), to_dtype(x, DType::bf16), 0.0, "f32 -> bf16");
  Tensor i = Tensor::arange(24, DType::i64);
  expect_close(cpu(to_dtype(gpu(i), DType::i32)), to_dtype(i, DType::i32), 0.0, "i64 -> i32");
  // Broadcast source into a device tensor.
  Tensor row = random({6}, 4, DType::f32);
  Tensor dst = Tensor::empty({4, 6}, DType::f32, Device::cuda(0));
  dst.copy_from(gpu(row).as_strided({4, 6}, {0, 1}, 0));
  expect_close(cpu(dst), row.as_strided({4, 6}, {0, 1}, 0).clone_raw(), 0.0, "broadcast");
}

class CudaOps : public ::testing::TestWithParam<DType> {
 protected:
  Tensor input(const Shape& shape, uint64_t seed) { return random(shape, seed, GetParam()); }
  void compare(const Tensor& on_gpu, const Tensor& on_cpu, const char* what) {
    EXPECT_TRUE(on_gpu.device().is_cuda()) << what;
    EXPECT_EQ(on_gpu.dtype(), on_cpu.dtype()) << what;
    expect_close(cpu(on_gpu), on_cpu, tolerance(GetParam()), what);
  }
};

TEST_P(CudaOps, Binary) {
  REQUIRE_CUDA();
  Tensor a = input({4, 1, 3}, 1), b = input({5, 1}, 2);
  compare(ops::add(gpu(a), gpu(b)), ops::add(a, b), "add broadcast");
  compare(ops::sub(gpu(a), gpu(b)), ops::sub(a, b), "sub broadcast");
  compare(ops::mul(gpu(a), gpu(b)), ops::mul(a, b), "mul broadcast");
  Tensor c = random({6, 7}, 3, GetParam(), 0.5, 1.5), d = input({7, 6}, 4);
  compare(ops::div(transposed(gpu(d)), gpu(c)), ops::div(transposed(d), c), "div of a view");
  // Size-1 and contiguous dims merge, so rank 8 fits the kernels' 6 dims...
  Tensor e = input({2, 1, 2, 1, 2, 1, 2, 3}, 5);
  compare(ops::mul(gpu(e), gpu(e)), ops::mul(e, e), "rank 8, mergeable");
  // ...but 7 dims that no stride pattern merges are refused, not miscomputed.
  Tensor buffer = gpu(input({128}, 6));
  Tensor scrambled = buffer.as_strided({2, 2, 2, 2, 2, 2, 2}, {1, 4, 16, 64, 2, 8, 32}, 0);
  EXPECT_THROW(ops::add(scrambled, scrambled), Unsupported);
}

TEST_P(CudaOps, Affine) {
  REQUIRE_CUDA();
  Tensor x = input({5, 8}, 6);
  compare(ops::scale(gpu(x), -0.75), ops::scale(x, -0.75), "scale");
  compare(ops::add_scalar(transposed(gpu(x)), 2.5), ops::add_scalar(transposed(x), 2.5),
          "add_scalar of a view");
}

TEST_P(CudaOps, ReduceSum) {
  REQUIRE_CUDA();
  Tensor x = input({3, 70, 4, 5}, 7);
  compare(ops::sum(gpu(x), {-1}), ops::sum(x, {-1}), "sum last");
  compare(ops::sum(gpu(x), {0, 2}, true), ops::sum(x, {0, 2}, true), "sum 0,2");
  compare(ops::sum_all(gpu(x)), ops::sum_all(x), "sum all");
  compare(ops::mean(transposed(gpu(x)), {1}), ops::mean(transposed(x), {1}), "mean of a view");
}

TEST_P(CudaOps, ReduceMax) {
  REQUIRE_CUDA();
  Tensor x = input({6, 300}, 8);
  auto [gv, gi] = ops::max(gpu(x), -1);
  auto [cv, ci] = ops::max(x, -1);
  compare(gv, cv, "max values");
  expect_close(cpu(gi), ci, 0.0, "max indices");
  auto [tv, ti] = ops::max(gpu(x), 0, true);
  auto [uv, ui] = ops::max(x, 0, true);
  compare(tv, uv, "max over dim 0");
  expect_close(cpu(ti), ui, 0.0, "max indices over dim 0");
  // Ties keep the first position; NaN wins, as on the CPU.
  Tensor t = Tensor::empty({2, 4}, GetParam());
  t.copy_from(Tensor::from_vector<double>({1, 3, 3, 2, 1, NAN, 5, NAN}, {2, 4}));
  auto [nv, ni] = ops::max(gpu(t), 1);
  EXPECT_EQ(cpu(ni).to_vector<int64_t>(), (std::vector<int64_t>{1, 1}));
  EXPECT_TRUE(std::isnan(cpu(nv).to_vector<double>()[1]));
}

TEST_P(CudaOps, Matmul) {
  REQUIRE_CUDA();
  Tensor a = input({2, 3, 5, 7}, 9), b = input({7, 4}, 10);
  compare(ops::matmul(gpu(a), gpu(b)), ops::matmul(a, b), "broadcast matmul");
  Tensor c = input({3, 9, 5}, 11), d = input({3, 9, 6}, 12);
  compare(ops::bmm(transposed(gpu(c)), gpu(d)), ops::bmm(transposed(c), d), "bmm A^T B");
  Tensor x = input({4, 6, 16}, 13), w = input({10, 16}, 14), bias = input({10}, 15);
  compare(ops::linear(gpu(x), gpu(w), gpu(bias)), ops::linear(x, w, bias), "linear + bias");
  // Batch dims summed into the output (the weight gradient of a batched product).
  Shape summed = {1, 7, 4};
  Tensor e = input({3, 7, 5}, 16), f = input({3, 5, 4}, 17);
  compare(ops::gemm_raw(gpu(e), gpu(f), summed), ops::gemm_raw(e, f, summed), "summed batch");
  Tensor g = input({3, 0}, 18), h = input({0, 2}, 19);
  compare(ops::matmul(gpu(g), gpu(h)), ops::matmul(g, h), "k = 0");
}

TEST_P(CudaOps, MatmulBackward) {
  REQUIRE_CUDA();
  Tensor x = input({2, 5, 6}, 20), w = input({6, 3}, 21);
  auto grads = [](Tensor x, Tensor w) {
    x.set_requires_grad(true);
    w.set_requires_grad(true);
    Tensor loss = ops::sum_all(ops::mul(ops::matmul(x, w), ops::matmul(x, w)));
    return autograd::grad(loss, {x, w});
  };
  auto on_gpu = grads(gpu(x), gpu(w));
  auto on_cpu = grads(x, w);
  compare(on_gpu[0], on_cpu[0], "dx");
  compare(on_gpu[1], on_cpu[1], "dw");
}

TEST_P(CudaOps, Activations) {
  REQUIRE_CUDA();
  Tensor x = input({7, 33}, 22);
  Tensor pos = random({7, 33}, 23, GetParam(), 0.1, 2.0);
  compare(ops::gelu(gpu(x)), ops::gelu(x), "gelu");
  compare(ops::gelu(gpu(x), ops::GeluApprox::tanh), ops::gelu(x, ops::GeluApprox::tanh),
          "gelu tanh");
  compare(ops::relu(gpu(x)), ops::relu(x), "relu");
  compare(ops::silu(gpu(x)), ops::silu(x), "silu");
  compare(ops::sigmoid(gpu(x)), ops::sigmoid(x), "sigmoid");
  compare(ops::tanh(gpu(x)), ops::tanh(x), "tanh");
  compare(ops::exp(gpu(x)), ops::exp(x), "exp");
  compare(ops::log(gpu(pos)), ops::log(pos), "log");
  compare(ops::rsqrt(gpu(pos)), ops::rsqrt(pos), "rsqrt");
  compare(ops::pow_scalar(gpu(pos), 1.5), ops::pow_scalar(pos, 1.5), "pow");
  auto grads = [](Tensor x) {
    x.set_requires_grad(true);
    Tensor y = ops::mul(ops::gelu(x), ops::sigmoid(ops::silu(x)));
    return autograd::grad(ops::sum_all(ops::mul(y, y)), {x})[0];
  };
  compare(grads(gpu(x)), grads(x), "gelu/silu/sigmoid backward");
}

TEST_P(CudaOps, Softmax) {
  REQUIRE_CUDA();
  Tensor x = input({2, 3, 5, 300}, 24);
  compare(ops::softmax(gpu(x)), ops::softmax(x), "softmax");
  compare(ops::log_softmax(gpu(x)), ops::log_softmax(x), "log_softmax");
  compare(ops::softmax(gpu(x), 1), ops::softmax(x, 1), "softmax over dim 1");
  Tensor pad = Tensor::zeros({2, 300}, DType::u8);
  for (int j = 250; j < 300; ++j) pad.data<uint8_t>()[j] = 1;
  for (int j = 0; j < 300; ++j) pad.data<uint8_t>()[300 + j] = 1;  // a fully masked batch
  ops::SoftmaxMask mask{.causal = true, .key_padding_mask = pad};
  ops::SoftmaxMask gpu_mask{.causal = true, .key_padding_mask = gpu(pad)};
  compare(ops::softmax(gpu(x), -1, gpu_mask), ops::softmax(x, -1, mask), "masked softmax");
  // exp() maps the masked -inf to 0, which the comparison can subtract.
  compare(ops::exp(ops::log_softmax(gpu(x), -1, gpu_mask)), ops::exp(ops::log_softmax(x, -1, mask)),
          "masked log_softmax");
  auto grads = [](Tensor x, const ops::SoftmaxMask& m) {
    x.set_requires_grad(true);
    Tensor y = ops::add(ops::softmax(x, -1, m), ops::scale(ops::log_softmax(x), 0.01));
    return autograd::grad(ops::sum_all(ops::mul(y, y)), {x})[0];
  };
  compare(grads(gpu(x), gpu_mask), grads(x, mask), "softmax backward");
}

TEST_P(CudaOps, Norm) {
  REQUIRE_CUDA();
  Tensor x = input({3, 4, 300}, 25), w = input({300}, 26), b = input({300}, 27);
  compare(ops::layer_norm(gpu(x), gpu(w), gpu(b)), ops::layer_norm(x, w, b), "layer_norm");
  compare(ops::layer_norm(gpu(x), Tensor(), Tensor()), ops::layer_norm(x, Tensor(), Tensor()),
          "layer_norm without affine");
  compare(ops::rms_norm(gpu(x), gpu(w)), ops::rms_norm(x, w), "rms_norm");
  auto grads = [](Tensor x, Tensor w, Tensor b, bool rms) {
    for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
    Tensor y = rms ? ops::rms_norm(x, w) : ops::layer_norm(x, w, b);
    Tensor loss = ops::sum_all(ops::mul(y, ops::sigmoid(x)));
    return rms ? autograd::grad(loss, {x, w}) : autograd::grad(loss, {x, w, b});
  };
  for (bool rms : {false, true}) {
    auto on_gpu = grads(gpu(x), gpu(w), gpu(b), rms);
    auto on_cpu = grads(x, w, b, rms);
    for (size_t i = 0; i < on_cpu.size(); ++i)
      compare(on_gpu[i], on_cpu[i], rms ? "rms_norm backward" : "layer_norm backward");
  }
}

TEST_P(CudaOps, CopyStrided) {
  REQUIRE_CUDA();
  Tensor x = input({4, 6, 5}, 28);
  compare(ops::contiguous(ops::transpose(gpu(x), 0, 2)), ops::contiguous(ops::transpose(x, 0, 2)),
          "contiguous of a transpose");
  compare(ops::reshape(ops::permute(gpu(x), {1, 0, 2}), {6, 20}),
          ops::reshape(ops::permute(x, {1, 0, 2}), {6, 20}), "reshape of a permute");
  compare(ops::cat({gpu(x), ops::slice(gpu(x), 1, 2, 5)}, 1),
          ops::cat({x, ops::slice(x, 1, 2, 5)}, 1), "cat");
  compare(ops::contiguous(gpu(x)), x, "contiguous already");
}

TEST_P(CudaOps, Embedding) {
  REQUIRE_CUDA();
  Tensor table = input({10, 33}, 29);
  Tensor ids = Tensor::from_vector<int64_t>({5, 9, 2, 2, 0, 5}, {2, 3});
  compare(ops::embedding(gpu(table), gpu(ids)), ops::embedding(table, ids), "embedding");
  Tensor ids32 = to_dtype(ids, DType::i32);
  compare(ops::embedding(gpu(table), gpu(ids32)), ops::embedding(table, ids32), "i32 ids");
  Tensor keep = Tensor::from_vector<int64_t>({3, 0, 3}, {3});
  compare(ops::index_select(gpu(table), 1, gpu(keep)), ops::index_select(table, 1, keep),
          "index_select dim 1");
  auto grads = [](Tensor table, const Tensor& ids, std::optional<int64_t> pad) {
    table.set_requires_grad(true);
    Tensor h = ops::embedding(table, ids, pad);
    return autograd::grad(ops::sum_all(ops::mul(h, h)), {table})[0];
  };
  compare(grads(gpu(table), gpu(ids), std::nullopt), grads(table, ids, std::nullopt),
          "embedding backward, repeated ids");
  compare(grads(gpu(table), gpu(ids), 5), grads(table, ids, 5), "embedding backward, padding");
  Tensor bad = Tensor::from_vector<int64_t>({1, 10}, {2});
  EXPECT_THROW(ops::embedding(gpu(table), gpu(bad)), InvalidArgument);
  Tensor negative = Tensor::from_vector<int64_t>({-1}, {1});
  EXPECT_THROW(ops::index_select(gpu(table), 0, gpu(negative)), InvalidArgument);
}

TEST_P(CudaOps, WhereAndCompare) {
  REQUIRE_CUDA();
  Tensor a = input({4, 1, 6}, 30), b = input({5, 6}, 31);
  Tensor cond = ops::gt(a, b);
  compare(ops::where(gpu(cond), gpu(a), gpu(b)), ops::where(cond, a, b), "where broadcast");
  compare(ops::masked_fill(gpu(b), gpu(ops::lt(b, ops::scale(b, 0.0))), -7.0),
          ops::masked_fill(b, ops::lt(b, ops::scale(b, 0.0)), -7.0), "masked_fill");
  using CompareFn = Tensor (*)(const Tensor&, const Tensor&);
  const std::vector<std::pair<CompareFn, const char*>> comparisons = {
      {&ops::eq, "eq"}, {&ops::ne, "ne"}, {&ops::lt, "lt"},
      {&ops::gt, "gt"}, {&ops::le, "le"}, {&ops::ge, "ge"}};
  for (auto [op, name] : comparisons) {
    Tensor on_gpu = op(gpu(a), gpu(b)), on_cpu = op(a, b);
    EXPECT_EQ(on_gpu.dtype(), DType::boolean) << name;
    expect_close(cpu(on_gpu), on_cpu, 0.0, name);
  }
  Tensor i = Tensor::arange(12, DType::i64);
  Tensor j = ops::reshape(ops::transpose(ops::reshape(i, {3, 4}), 0, 1), {12});  // a copy
  expect_close(cpu(ops::le(gpu(i), gpu(j))), ops::le(i, j), 0.0, "le on i64");
  // where backward: gradients through both branches.
  auto grads = [](Tensor c, Tensor a, Tensor b) {
    a.set_requires_grad(true);
    b.set_requires_grad(true);
    Tensor y = ops::where(c, a, b);
    return autograd::grad(ops::sum_all(ops::mul(y, y)), {a, b});
  };
  auto on_gpu = grads(gpu(cond), gpu(a), gpu(b));
  auto on_cpu = grads(cond, a, b);
  compare(on_gpu[0], on_cpu[0], "where da");
  compare(on_gpu[1], on_cpu[1], "where db");
}

TEST_P(CudaOps, Dropout) {
  REQUIRE_CUDA();
  Tensor x = input({7, 300}, 32);
  RngKey key = derive(RngKey{1234, stream_id("h.0.attn.dropout")}, 3);
  // The mask is the CPU's, element by element.
  compare(ops::dropout(gpu(x), 0.3, key), ops::dropout(x, 0.3, key), "dropout 0.3");
  compare(ops::dropout(gpu(x), 1.0, key), ops::dropout(x, 1.0, key), "dropout 1");
  auto grads = [&](Tensor x) {
    x.set_requires_grad(true);
    Tensor y = ops::dropout(x, 0.5, key);
    return autograd::grad(ops::sum_all(ops::mul(y, x)), {x})[0];
  };
  compare(grads(gpu(x)), grads(x), "dropout backward");
}

TEST_P(CudaOps, CrossEntropy) {
  REQUIRE_CUDA();
  Tensor logits = input({2, 3, 300}, 33);
  Tensor target = Tensor::from_vector<int64_t>({4, 299, -100, 0, 17, 17}, {2, 3});
  for (ops::CrossEntropyOptions options :
       {ops::CrossEntropyOptions{}, ops::CrossEntropyOptions{.reduction = ops::Reduction::sum},
        ops::CrossEntropyOptions{.reduction = ops::Reduction::none, .label_smoothing = 0.1},
        ops::CrossEntropyOptions{.label_smoothing = 0.2}}) {
    compare(ops::cross_entropy(gpu(logits), gpu(target), options),
            ops::cross_entropy(logits, target, options), "cross_entropy");
    auto grads = [&](Tensor x, const Tensor& t) {
      x.set_requires_grad(true);
      Tensor loss = ops::cross_entropy(x, t, options);
      if (options.reduction == ops::Reduction::none) loss = ops::sum_all(ops::mul(loss, loss));
      return autograd::grad(loss, {x})[0];
    };
    compare(grads(gpu(logits), gpu(target)), grads(logits, target), "cross_entropy backward");
  }
  Tensor ignored = Tensor::full({2, 3}, -100.0, DType::i64);
  compare(ops::cross_entropy(gpu(logits), gpu(ignored)), ops::cross_entropy(logits, ignored),
          "all ignored");
  Tensor bad = Tensor::from_vector<int64_t>({4, 300, 0, 0, 0, 0}, {2, 3});
  EXPECT_THROW(ops::cross_entropy(gpu(logits), gpu(bad)), InvalidArgument);
}

TEST_P(CudaOps, ArgmaxTopk) {
  REQUIRE_CUDA();
  Tensor x = input({3, 500, 4}, 34);
  compare(ops::argmax(gpu(x), 1), ops::argmax(x, 1), "argmax over a middle dim");
  compare(ops::argmax(gpu(x), -1, true), ops::argmax(x, -1, true), "argmax last");
  Tensor i = Tensor::from_vector<int64_t>({3, 7, 7, 1, -2, 9, 9, 0}, {2, 4});
  expect_close(cpu(ops::argmax(gpu(i), 1)), ops::argmax(i, 1), 0.0, "argmax i64, ties");
  Tensor t = Tensor::empty({2, 4}, GetParam());
  t.copy_from(Tensor::from_vector<double>({1, 3, 3, 2, 1, NAN, 5, NAN}, {2, 4}));
  EXPECT_EQ(cpu(ops::argmax(gpu(t), 1)).to_vector<int64_t>(), (std::vector<int64_t>{1, 1}));
  for (bool largest : {true, false}) {
    auto [gv, gi] = ops::topk(gpu(x), 7, 1, largest);
    auto [cv, ci] = ops::topk(x, 7, 1, largest);
    compare(gv, cv, "topk values");
    expect_close(cpu(gi), ci, 0.0, "topk indices");
  }
  auto [tv, ti] = ops::topk(gpu(t), 3, -1);
  auto [uv, ui] = ops::topk(t, 3, -1);
  expect_close(cpu(ti), ui, 0.0, "topk with NaN and ties");
  auto grads = [](Tensor x) {
    x.set_requires_grad(true);
    auto [v, idx] = ops::topk(x, 5, -1);
    return autograd::grad(ops::sum_all(ops::mul(v, v)), {x})[0];
  };
  Tensor y = input({6, 40}, 35);
  compare(grads(gpu(y)), grads(y), "topk backward");
}

TEST_P(CudaOps, Attention) {
  REQUIRE_CUDA();
  // kv_len > q_len (a KV cache), a transposed k view, padding with a fully masked batch.
  Tensor q = input({2, 3, 5, 8}, 36), k = input({2, 3, 8, 7}, 37), v = input({2, 3, 7, 6}, 38);
  Tensor bias = input({3, 5, 7}, 39);
  Tensor pad = Tensor::ones({2, 7}, DType::u8);
  for (int j = 5; j < 7; ++j) pad.data<uint8_t>()[j] = 0;
  for (int j = 0; j < 7; ++j) pad.data<uint8_t>()[7 + j] = 0;
  auto run = [&](bool on_gpu, bool causal, bool masked, bool biased) {
    auto dev = [&](const Tensor& t) { return on_gpu ? gpu(t) : t; };
    Tensor tq = dev(q), tk = transposed(dev(k)), tv = dev(v), tb = dev(bias);
    for (Tensor* t : {&tq, &tk, &tv, &tb}) t->set_requires_grad(true);
    ops::AttentionOptions opt;
    opt.causal = causal;
    if (masked) opt.key_padding_mask = dev(pad);
    if (biased) opt.attn_bias = tb;
    Tensor out = ops::scaled_dot_product_attention(tq, tk, tv, opt);
    Tensor loss = ops::sum_all(ops::mul(out, out));
    std::vector<Tensor> inputs = {tq, tk, tv};
    if (biased) inputs.push_back(tb);
    std::vector<Tensor> result = autograd::grad(loss, inputs);
    result.insert(result.begin(), out.detach());
    return result;
  };
  for (bool causal : {false, true})
    for (bool masked : {false, true})
      for (bool biased : {false, true}) {
        auto on_gpu = run(true, causal, masked, biased);
        auto on_cpu = run(false, causal, masked, biased);
        const char* names[] = {"attention out", "dq", "dk", "dv", "dbias"};
        for (size_t i = 0; i < on_cpu.size(); ++i) compare(on_gpu[i], on_cpu[i], names[i]);
      }
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaOps, ::testing::Values(DType::f32, DType::bf16, DType::f64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace libai
