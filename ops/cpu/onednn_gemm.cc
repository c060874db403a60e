// oneDNN's matmul primitive for bf16 GEMM (ops/cpu/onednn_gemm.h).
#include "ops/cpu/onednn_gemm.h"

#include <atomic>

#include "runtime/error.h"

#ifdef LIBAI_HAVE_ONEDNN
#include <omp.h>

#include <map>
#include <optional>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <unordered_map>

#include "runtime/threads.h"
#endif

namespace libai::ops::cpu {

namespace {
std::atomic<bool> onednn_enabled{true};
std::atomic<bool> onednn_int8_enabled{false};  // off: see onednn_gemm.h
}  // namespace

void set_onednn_int8_enabled(bool enabled) { onednn_int8_enabled.store(enabled); }

void set_onednn_bf16_enabled(bool enabled) { onednn_enabled.store(enabled); }

#ifdef LIBAI_HAVE_ONEDNN

namespace {

// Note [oneDNN threads]
// Debian's oneDNN runs on OpenMP. A primitive plans its blocking for omp_get_max_threads()
// of the thread that creates it and then runs exactly that many (num_threads on its parallel
// regions), so the count must be right at creation: each call sets the calling thread's
// OpenMP count to its device budget (runtime/threads.h) first, and the budget is part of the
// primitive cache's key. The count is a per-thread setting, so devices on other threads keep
// theirs. OpenMP's workers are a pool of their own beside parallel_for's and OpenBLAS's; only
// one of the three runs a kernel at a time for a given device thread. (After a product, idle
// OpenMP workers spin briefly before sleeping, GOMP_SPINCOUNT; OMP_WAIT_POLICY=passive stops
// that where cores are oversubscribed.)

struct Primitive {
  dnnl::matmul matmul;
  dnnl::memory::desc a, b, c, bias;
};

struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  // Primitives by shape: creating one costs far more than running a small one.
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool,
                         bool, int>;
  std::map<Key, Primitive> primitives;
};

Context& context() {
  thread_local Context ctx;
  return ctx;
}

const Primitive& primitive(Context& ctx, const Bf16GemmShape& s, bool has_bias, Bf16Output output,
                           bool accumulate, int threads) {
  const Context::Key key{s.m,
                         s.n,
                         s.k,
                         s.a_row_stride,
                         s.a_col_stride,
                         s.b_row_stride,
                         s.b_col_stride,
                         has_bias,
                         output == Bf16Output::bf16,
                         accumulate,
                         threads};
  auto it = ctx.primitives.find(key);
  if (it != ctx.primitives.end()) return it->second;
  using dt = dnnl::memory::data_type;
  dnnl::memory::desc a({s.m, s.k}, dt::bf16, {s.a_row_stride, s.a_col_stride});
  dnnl::memory::desc b({s.k, s.n}, dt::bf16, {s.b_row_stride, s.b_col_stride});
  dnnl::memory::desc c({s.m, s.n}, output == Bf16Output::bf16 ? dt::bf16 : dt::f32,
                       dnnl::memory::dims{s.n, 1});
  dnnl::primitive_attr attr;
  if (accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  dnnl::memory::desc bias({1, s.n}, dt::bf16, dnnl::memory::dims{s.n, 1});
  auto desc = has_bias ? dnnl::matmul::desc(a, b, bias, c) : dnnl::matmul::desc(a, b, c);
  Primitive prim{dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, ctx.engine)), a, b, c, bias};
  if (ctx.primitives.size() >= 512) ctx.primitives.clear();  // a bound, not an LRU
  return ctx.primitives.emplace(key, prim).first->second;
}

}  // namespace

bool onednn_bf16_available() {
  static const bool available = [] {
    const auto isa = dnnl::get_effective_cpu_isa();
    return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
  }();
  return available && onednn_enabled.load(std::memory_order_relaxed);
}

void onednn_bf16_gemm(const Bf16GemmShape& s, const bf16* a, const bf16* b, const bf16* bias,
                      void* c, Bf16Output output, bool accumulate) {
  Context& ctx = context();
  // Small products run on one thread: waking an OpenMP team costs more than they take, and
  // far more when the cores are shared (256x64x256 ran 10x slower on 2 threads than on 1).
  const int threads =
      s.m * s.n * s.k < (int64_t(1) << 23) ? 1 : thread_budget(current_cpu_device());
  omp_set_num_threads(threads);  // before creating the primitive: Note [oneDNN threads]
  const Primitive& prim = primitive(ctx, s, bias != nullptr, output, accumulate, threads);
  auto wrap = [&](const dnnl::memory::desc& md, const void* data) {
    return dnnl::memory(md, ctx.engine, const_cast<void*>(data));
  };
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, wrap(prim.a, a)},
                                             {DNNL_ARG_WEIGHTS, wrap(prim.b, b)},
                                             {DNNL_ARG_DST, wrap(prim.c, c)}};
  if (bias != nullptr) args.emplace(DNNL_ARG_BIAS, wrap(prim.bias, bias));
  prim.matmul.execute(ctx.stream, args);
  ctx.stream.wait();
}

// One engine for the int8 weights and their primitives: a reordered weight is memory of it.
dnnl::engine& int8_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

struct OnednnInt8Weight {
  int64_t n = 0, k = 0;
  dnnl::memory memory;  // w in the layout a 128-row product chose
};

namespace {

struct Int8Primitive {
  dnnl::matmul matmul;
  dnnl::memory::desc a, c;
};

struct Int8Context {
  dnnl::stream stream{int8_engine()};
  // By (m, n, k, lda, threads, the weight's layout); nullopt: no kernel for it.
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int, size_t>;
  std::map<Key, std::optional<Int8Primitive>> primitives;
};

using dt = dnnl::memory::data_type;

}  // namespace

bool onednn_int8_available() {
  static const bool available = dnnl::get_effective_cpu_isa() == dnnl::cpu_isa::avx512_core_amx;
  return available && onednn_int8_enabled.load(std::memory_order_relaxed);
}

std::shared_ptr<const OnednnInt8Weight> onednn_int8_weight(const int8_t* w, int64_t n, int64_t k) {
  try {
    dnnl::engine& engine = int8_engine();
    dnnl::stream stream(engine);
    dnnl::memory::desc plain({k, n}, dt::s8, {1, k});  // w [n, k] read as its transpose
    dnnl::memory::desc any({k, n}, dt::s8, dnnl::memory::format_tag::any);
    dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(dnnl::memory::desc({128, k}, dt::s8, {k, 1}), any,
                           dnnl::memory::desc({128, n}, dt::s32, dnnl::memory::dims{n, 1})),
        engine);
    auto out = std::make_shared<OnednnInt8Weight>();
    out->n = n;
    out->k = k;
    out->memory = dnnl::memory(pd.weights_desc(), engine);
    dnnl::memory source(plain, engine, const_cast<int8_t*>(w));
    dnnl::reorder(source, out->memory).execute(stream, source, out->memory);
    stream.wait();
    return out;
  } catch (const dnnl::error&) {
    return nullptr;
  }
}

bool onednn_int8_gemm(int64_t m, const int8_t* a, int64_t lda, const OnednnInt8Weight& w,
                      int32_t* c) {
  thread_local Int8Context ctx;
  const int64_t n = w.n, k = w.k;
  const int threads = m * n * k < (int64_t(1) << 23) ? 1 : thread_budget(current_cpu_device());
  omp_set_num_threads(threads);  // Note [oneDNN threads]
  const dnnl::memory::desc weights = w.memory.get_desc();
  const Int8Context::Key key{m, n, k, lda, threads, weights.get_size()};
  auto it = ctx.primitives.find(key);
  if (it == ctx.primitives.end()) {
    std::optional<Int8Primitive> prim;
    try {
      dnnl::memory::desc da({m, k}, dt::s8, {lda, 1});
      dnnl::memory::desc dc({m, n}, dt::s32, dnnl::memory::dims{n, 1});
      prim = Int8Primitive{
          dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(da, weights, dc),
                                                    int8_engine())),
          da, dc};
    } catch (const dnnl::error&) {
      prim.reset();  // no kernel for this shape in the weight's layout: the caller's own runs
    }
    if (ctx.primitives.size() >= 512) ctx.primitives.clear();  // a bound, not an LRU
    it = ctx.primitives.emplace(key, std::move(prim)).first;
  }
  if (!it->second) return false;
  const Int8Primitive& prim = *it->second;
  dnnl::memory src(prim.a, int8_engine(), const_cast<int8_t*>(a));
  dnnl::memory dst(prim.c, int8_engine(), c);
  prim.matmul.execute(ctx.stream,
                      {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, w.memory}, {DNNL_ARG_DST, dst}});
  ctx.stream.wait();
  return true;
}

#else

struct OnednnInt8Weight {};
bool onednn_int8_available() { return false; }
std::shared_ptr<const OnednnInt8Weight> onednn_int8_weight(const int8_t*, int64_t, int64_t) {
  return nullptr;
}
bool onednn_int8_gemm(int64_t, const int8_t*, int64_t, const OnednnInt8Weight&, int32_t*) {
  return false;
}

bool onednn_bf16_available() { return false; }

void onednn_bf16_gemm(const Bf16GemmShape&, const bf16*, const bf16*, const bf16*, void*,
                      Bf16Output, bool) {
  LIBAI_ASSERT(false && "onednn_bf16_gemm without oneDNN");
}

#endif

}  // namespace libai::ops::cpu
