// CPU kernel of ops/matmul.h: OpenBLAS GEMM over strided operands.
#include <cblas.h>
#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <string>
#include <vector>

#include "ops/cpu/onednn_gemm.h"
#include "ops/matmul.h"
#include "runtime/blas.h"
#include "runtime/threads.h"

namespace libai::ops::cpu {
namespace {

// How BLAS can read a strided [rows, cols] matrix: row-major as is, as the transpose of a
// row-major matrix, or not at all (then it is gathered into a row-major copy).
struct Form {
  CBLAS_TRANSPOSE trans = CblasNoTrans;
  int64_t ld = 1;
  bool direct = false;
};

Form form_of(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  const int64_t r1 = std::max<int64_t>(rows, 1), c1 = std::max<int64_t>(cols, 1);
  if ((cs == 1 || cols == 1) && (rows == 1 || rs >= c1))
    return {CblasNoTrans, rows == 1 ? c1 : rs, true};
  if ((rs == 1 || rows == 1) && (cols == 1 || cs >= r1))
    return {CblasTrans, cols == 1 ? r1 : cs, true};
  return {CblasNoTrans, c1, false};
}

// Note [Few-row GEMM]
// Decoding multiplies a few rows (one token per running sequence) by every weight matrix.
// One row goes to gemv. For 2 to kFewRows rows OpenBLAS 0.3.21's sgemm repacks the whole
// weight matrix on every call, which reads and writes it once more than the product needs and
// made a step of 8 rows cost 3.6x a step of one (bench/batched_step.cc). So a few rows run
// here: each weight row (or column block) is loaded once into L1 and meets every row of `a`
// there, so the weights stream from memory once, as in gemv. Each sum runs in 16 lanes of a
// vector register, added up at the end (the order of the additions differs from sgemm's by
// rounding only).
constexpr int64_t kFewRows = 16;

// 16 floats; the compiler maps it to one zmm or two ymm registers.
using F16 = float __attribute__((vector_size(64)));

inline F16 load16(const float* p) {
  F16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline float lanes_sum(const F16& v) {
  float s = 0;
  for (int l = 0; l < 16; ++l) s += v[l];
  return s;
}

// out[r][q] = x[r] . w[q] for R rows of `a` and two weight rows: 2R independent sums, each
// weight vector loaded once per 16 columns and used R times from a register.
template <int R>
void dots(const float* const* x, const float* w0, const float* w1, int64_t k, float (*out)[2]) {
  F16 acc0[R] = {}, acc1[R] = {};
  int64_t t = 0;
  for (; t + 16 <= k; t += 16) {
    const F16 u = load16(w0 + t), v = load16(w1 + t);
    for (int r = 0; r < R; ++r) {
      const F16 xr = load16(x[r] + t);
      acc0[r] += xr * u;
      acc1[r] += xr * v;
    }
  }
  for (int r = 0; r < R; ++r) {
    float s0 = lanes_sum(acc0[r]), s1 = lanes_sum(acc1[r]);
    for (int64_t q = t; q < k; ++q) {
      s0 += x[r][q] * w0[q];
      s1 += x[r][q] * w1[q];
    }
    out[r][0] = s0;
    out[r][1] = s1;
  }
}

// c[i, j] = beta c[i, j] + a[i, :] . b[j, :] (b: the weight [n, k], rows ldb apart), by pairs
// of weight rows against blocks of up to four rows of `a`.
void few_rows_nt(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                 int64_t ldb, float beta, float* c) {
  const int64_t pairs = (n + 1) / 2;
  parallel_for(0, pairs, std::max<int64_t>(1, 16384 / std::max<int64_t>(k, 1)), [&](int64_t pb, int64_t pe) {
    for (int64_t p = pb; p < pe; ++p) {
      const int64_t j = 2 * p;
      const bool two = j + 1 < n;
      const float* w0 = b + j * ldb;
      const float* w1 = two ? w0 + ldb : w0;
      for (int64_t i = 0; i < m; i += 4) {
        const float* x[4];
        const int rows = int(std::min<int64_t>(4, m - i));
        for (int r = 0; r < rows; ++r) x[r] = a + (i + r) * lda;
        float out[4][2];
        switch (rows) {
          case 4: dots<4>(x, w0, w1, k, out); break;
          case 3: dots<3>(x, w0, w1, k, out); break;
          case 2: dots<2>(x, w0, w1, k, out); break;
          default: dots<1>(x, w0, w1, k, out); break;
        }
        for (int r = 0; r < rows; ++r)
          for (int q = 0; q < (two ? 2 : 1); ++q) {
            float& o = c[(i + r) * n + j + q];
            o = beta == 0.0f ? out[r][q] : beta * o + out[r][q];
          }
      }
    }
  });
}

// c[i, :] = beta c[i, :] + sum_t a[i, t] b[t, :] (b: [k, n], rows ldb apart), by blocks of
// columns whose m partial rows stay in L1.
void few_rows_nn(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                 int64_t ldb, float beta, float* c) {
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  parallel_for(0, blocks, 1, [&](int64_t bb, int64_t be) {
    float acc[kFewRows][kBlock];
    for (int64_t blk = bb; blk < be; ++blk) {
      const int64_t j0 = blk * kBlock, width = std::min(kBlock, n - j0);
      for (int64_t i = 0; i < m; ++i) std::fill_n(acc[i], kBlock, 0.0f);
      for (int64_t t = 0; t < k; ++t) {
        const float* w = b + t * ldb + j0;
        for (int64_t i = 0; i < m; ++i) {
          const float x = a[i * lda + t];
          if (width == kBlock)
            for (int64_t l = 0; l < kBlock; ++l) acc[i][l] += x * w[l];
          else
            for (int64_t l = 0; l < width; ++l) acc[i][l] += x * w[l];
        }
      }
      for (int64_t i = 0; i < m; ++i) {
        float* out = c + i * n + j0;
        for (int64_t l = 0; l < width; ++l) out[l] = beta == 0.0f ? acc[i][l] : beta * out[l] + acc[i][l];
      }
    }
  });
}

// One row times a matrix (decoding: one token per sequence) goes to gemv: OpenBLAS 0.3.21's
// sgemm has no one-row path and would repack the whole weight matrix for every token.
// c[1, n] = a[1, k] op(b)[k, n]: op(b) = b [k, n] is bᵀ x over b's rows; op(b) = bᵀ (b [n, k])
// is b x. a's k values are contiguous (no-trans) or lda apart (a stored as [k, 1]). A few rows
// with `a` row-major go to the kernels above (Note [Few-row GEMM]).
Transpose transpose(CBLAS_TRANSPOSE t) { return t == CblasTrans ? Transpose::yes : Transpose::no; }

// With `bias` (n values), c = op(a) op(b) + bias on every row, whatever beta (the blocks of
// runtime/blas.h write the bias into their part of c just before their product).
void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k,
               const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
               const float* bias) {
  if (bias != nullptr && (m <= kFewRows || k == 0)) {  // a few rows: filled here, at once
    for (int64_t i = 0; i < m; ++i) std::copy(bias, bias + n, c + i * n);
    beta = 1.0f;
    bias = nullptr;
  }
  if (m == 1 && k > 0) {
    gemv_row(transpose(tb), n, k, a, ta == CblasNoTrans ? 1 : lda, b, ldb, beta, c);
    return;
  }
  if (m > 1 && m <= kFewRows && k > 0 && ta == CblasNoTrans) {
    if (tb == CblasTrans)
      few_rows_nt(m, n, k, a, lda, b, ldb, beta, c);
    else
      few_rows_nn(m, n, k, a, lda, b, ldb, beta, c);
    return;
  }
  gemm(transpose(ta), transpose(tb), m, n, k, 1.0f, a, lda, b, ldb, beta, c, n, bias);
}
void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k,
               const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
               const double* bias) {
  gemm(transpose(ta), transpose(tb), m, n, k, 1.0, a, lda, b, ldb, beta, c, n, bias);
}

// Note [16-bit GEMM]
// bf16 and f16 operands are stored in 16 bits and multiplied with an f32 accumulator.
// bf16 runs on the CPU's native bf16 units through oneDNN's matmul (ops/cpu/onednn_gemm.h)
// when oneDNN is linked and the CPU has AVX512-BF16 or AMX: operands are read in place
// (row-major or transposed views, like BLAS), the f32 sum rounds once to bf16 in the
// output. On an AMX core this runs at about 4x f32 sgemm (bench/bf16_gemm.cc,
// bench/RESULTS.md). Products summed over broadcast batch dims accumulate in an f32
// buffer first, so the sum also rounds once. Without oneDNN: OpenBLAS's cblas_sbgemm (bf16
// in, f32 out) when the library exports it and its core has native bf16 dot products;
// otherwise (and always for f16) each operand matrix is converted to f32 (O(mk + kn) work
// against O(mnk) for the product, reused across broadcast batches) and multiplied by sgemm.
// Debian's OpenBLAS 0.3.21 declares cblas_sbgemm in cblas.h but is built without
// BUILD_BFLOAT16 and does not export it, hence the run-time lookup.
using SbgemmFn = void (*)(CBLAS_ORDER, CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, blasint, blasint, blasint,
                          float, const bfloat16*, blasint, const bfloat16*, blasint, float, float*,
                          blasint);

SbgemmFn native_sbgemm() {
  static const SbgemmFn fn = []() -> SbgemmFn {
    void* symbol = dlsym(RTLD_DEFAULT, "cblas_sbgemm");
    if (symbol == nullptr) return nullptr;
    std::string core = openblas_get_corename();
    std::transform(core.begin(), core.end(), core.begin(),
                   [](unsigned char ch) { return char(std::tolower(ch)); });
    bool native =
        core.find("cooperlake") != std::string::npos || core.find("sapphire") != std::string::npos;
    return native ? reinterpret_cast<SbgemmFn>(symbol) : nullptr;
  }();
  return fn;
}

// One operand matrix as BLAS will read it, in element type C (converted/gathered as needed).
template <typename T, typename C>
struct Operand {
  std::vector<C> scratch;
  int64_t cached_offset = -1;
  Form cached_form;
  const C* ptr = nullptr;
  Form form;

  void prepare(const T* base, int64_t offset, int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
    form = form_of(rows, cols, rs, cs);
    if constexpr (std::is_same_v<T, C>) {
      if (form.direct) {
        ptr = base + offset;
        return;
      }
    }
    if (offset == cached_offset) {  // same matrix as the previous batch (broadcast)
      form = cached_form;
      return;
    }
    cached_offset = offset;
    scratch.resize(size_t(rows * cols));
    C* dst = scratch.data();
    const T* src = base + offset;
    if (form.direct) {
      // Convert the physical rows as they lie: lines of `len` elements, `ld` apart.
      const bool t = form.trans == CblasTrans;
      const int64_t lines = t ? cols : rows, len = t ? rows : cols, ld = form.ld;
      parallel_for(0, lines, std::max<int64_t>(1, 16384 / std::max<int64_t>(len, 1)),
                   [&](int64_t b, int64_t e) {
                     for (int64_t i = b; i < e; ++i)
                       for (int64_t j = 0; j < len; ++j)
                         dst[i * len + j] = C(load(src[i * ld + j]));
                   });
      form.ld = std::max<int64_t>(len, 1);
    } else {
      parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)),
                   [&](int64_t b, int64_t e) {
                     for (int64_t i = b; i < e; ++i)
                       for (int64_t j = 0; j < cols; ++j)
                         dst[i * cols + j] = C(load(src[i * rs + j * cs]));
                   });
    }
    ptr = dst;
    cached_form = form;
  }
};

// Walks the batch dims of a, b and out together; calls fn(a_off, b_off, out_off, first).
template <typename Fn>
void for_each_batch(const Tensor& a, const Tensor& b, const Tensor& out, Fn&& fn) {
  const int br = a.dim() - 2;
  Shape out_stride(size_t(br), 0);
  for (int d = 0; d < br; ++d)
    if (out.shape()[d] != 1) out_stride[d] = out.strides()[d];
  std::vector<int64_t> index(size_t(br), 0);
  const int64_t total = shape_numel(Shape(a.shape().begin(), a.shape().end() - 2));
  for (int64_t done = 0; done < total; ++done) {
    int64_t ao = a.offset(), bo = b.offset(), oo = 0;
    bool first = true;
    for (int d = 0; d < br; ++d) {
      ao += index[d] * a.strides()[d];
      bo += index[d] * b.strides()[d];
      oo += index[d] * out_stride[d];
      if (out_stride[d] == 0 && index[d] != 0) first = false;
    }
    fn(ao, bo, oo, first);
    for (int d = br - 1; d >= 0; --d) {
      if (++index[d] < a.shape()[d]) break;
      index[d] = 0;
    }
  }
}

// bf16 through oneDNN (Note [16-bit GEMM]); false when it cannot run here.
bool gemm_bf16_onednn(const Tensor& a, const Tensor& b, const Tensor& bias, Tensor& out) {
  const int r = a.dim();
  const int64_t m = a.shape()[r - 2], k = a.shape()[r - 1], n = b.shape()[r - 1];
  if (m == 0 || n == 0 || k == 0 || !onednn_bf16_available()) return false;
  const int64_t batches = shape_numel(Shape(a.shape().begin(), a.shape().end() - 2));
  const bool summed = out.numel() != batches * m * n;  // some batch dims sum into one output
  std::vector<float> buffer(summed ? size_t(out.numel()) : 0);
  const bf16* abase = static_cast<const bf16*>(a.storage()->data);
  const bf16* bbase = static_cast<const bf16*>(b.storage()->data);
  const bf16* bias_data = bias.defined() ? bias.data<bf16>() : nullptr;
  bf16* obase = out.data<bf16>();
  auto strides = [](const Form& f) {
    return f.trans == CblasNoTrans ? std::pair<int64_t, int64_t>{f.ld, 1}
                                   : std::pair<int64_t, int64_t>{1, f.ld};
  };
  Operand<bf16, bf16> pa, pb;
  for_each_batch(a, b, out, [&](int64_t ao, int64_t bo, int64_t oo, bool first) {
    pa.prepare(abase, ao, m, k, a.strides()[r - 2], a.strides()[r - 1]);
    pb.prepare(bbase, bo, k, n, b.strides()[r - 2], b.strides()[r - 1]);
    auto [ars, acs] = strides(pa.form);
    auto [brs, bcs] = strides(pb.form);
    const Bf16GemmShape shape{m, n, k, ars, acs, brs, bcs};
    if (summed)
      onednn_bf16_gemm(shape, pa.ptr, pb.ptr, first ? bias_data : nullptr, buffer.data() + oo,
                       Bf16Output::f32, !first);
    else
      onednn_bf16_gemm(shape, pa.ptr, pb.ptr, bias_data, obase + oo, Bf16Output::bf16, false);
  });
  if (summed)
    parallel_for(0, out.numel(), 1 << 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) obase[i] = bf16(buffer[size_t(i)]);
    });
  return true;
}

template <typename T>
void gemm_typed(const Tensor& a, const Tensor& b, const Tensor& bias, Tensor& out) {
  using C = compute_t<T>;
  const int r = a.dim();
  const int64_t m = a.shape()[r - 2], k = a.shape()[r - 1], n = b.shape()[r - 1];
  const int64_t ars = a.strides()[r - 2], acs = a.strides()[r - 1];
  const int64_t brs = b.strides()[r - 2], bcs = b.strides()[r - 1];
  const T* abase = static_cast<const T*>(a.storage()->data);
  const T* bbase = static_cast<const T*>(b.storage()->data);
  // [out_batch..., m, n]: written in place for f32/f64, through an f32 buffer for 16-bit.
  std::vector<C> buffer;
  C* obase;
  if constexpr (std::is_same_v<T, C>) {
    obase = out.data<T>();
  } else {
    buffer.resize(size_t(out.numel()));
    obase = buffer.data();
  }
  std::vector<C> bias_row;
  if (bias.defined()) {
    const T* pb = bias.data<T>();
    for (int64_t j = 0; j < n; ++j) bias_row.push_back(C(load(pb[j])));
  }
  SbgemmFn sbgemm = std::is_same_v<T, bf16> ? native_sbgemm() : nullptr;
  Operand<T, C> pa, pb;
  Operand<T, T> ha, hb;  // for sbgemm: bf16 operands read in place or gathered
  for_each_batch(a, b, out, [&](int64_t ao, int64_t bo, int64_t oo, bool first) {
    C* c = obase + oo;
    C beta = first ? C(0) : C(1);
    // The bias goes with the first product into this output (BLAS blocks fill their own part,
    // runtime/blas.h); here only where no BLAS call follows, or for the 16-bit paths.
    const bool bias_here = first && bias.defined();
    const bool fill_now = first && (k == 0 || (bias_here && !std::is_same_v<T, C>));
    if (fill_now) {
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) c[i * n + j] = bias.defined() ? bias_row[size_t(j)] : C(0);
      beta = C(1);
    }
    if (k == 0 || m == 0 || n == 0) return;
    if constexpr (std::is_same_v<T, bf16>) {
      if (sbgemm != nullptr) {
        ha.prepare(abase, ao, m, k, ars, acs);
        hb.prepare(bbase, bo, k, n, brs, bcs);
        sbgemm(CblasRowMajor, ha.form.trans, hb.form.trans, blasint(m), blasint(n), blasint(k),
               1.0f, reinterpret_cast<const bfloat16*>(ha.ptr), blasint(ha.form.ld),
               reinterpret_cast<const bfloat16*>(hb.ptr), blasint(hb.form.ld), beta, c, blasint(n));
        return;
      }
    }
    pa.prepare(abase, ao, m, k, ars, acs);
    pb.prepare(bbase, bo, k, n, brs, bcs);
    blas_gemm(pa.form.trans, pb.form.trans, m, n, k, pa.ptr, pa.form.ld, pb.ptr, pb.form.ld, beta,
              c, bias_here && !fill_now ? bias_row.data() : nullptr);
  });
  if constexpr (!std::is_same_v<T, C>) {
    T* o = out.data<T>();
    parallel_for(0, out.numel(), 1 << 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) o[i] = store<T>(buffer[size_t(i)]);
    });
  }
}

void gemm_cpu(const Tensor& a, const Tensor& b, const Tensor& bias, Tensor& out) {
  const int r = a.dim();
  LIBAI_ASSERT(r >= 2 && b.dim() == r && out.dim() == r && out.is_contiguous());
  for (int d = 0; d < r; ++d)
    LIBAI_CHECK(a.shape()[d] < (int64_t(1) << 31) && b.shape()[d] < (int64_t(1) << 31),
                "matmul: dimension ", d, " of ", shape_str(a.shape()), " x ", shape_str(b.shape()),
                " exceeds the 32-bit BLAS index range");
  if (out.dtype() == DType::bf16 && gemm_bf16_onednn(a, b, bias, out)) return;
  dispatch_floating(out.dtype(), "matmul", [&]<typename T>() { gemm_typed<T>(a, b, bias, out); });
}

}  // namespace

LIBAI_REGISTER_KERNEL(gemm, DeviceType::cpu, gemm_cpu);

}  // namespace libai::ops::cpu
