// oneDNN's matmul primitive for bf16 GEMM (ops/cpu/onednn_gemm.h).
#include "ops/cpu/onednn_gemm.h"

#include <atomic>

#include "runtime/error.h"

#ifdef LIBAI_HAVE_ONEDNN
#include <omp.h>

#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <unordered_map>

#include "runtime/threads.h"
#endif

namespace libai::ops::cpu {

namespace {
std::atomic<bool> onednn_enabled{true};
}  // namespace

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

#else

bool onednn_bf16_available() { return false; }

void onednn_bf16_gemm(const Bf16GemmShape&, const bf16*, const bf16*, const bf16*, void*,
                      Bf16Output, bool) {
  LIBAI_ASSERT(false && "onednn_bf16_gemm without oneDNN");
}

#endif

}  // namespace libai::ops::cpu
