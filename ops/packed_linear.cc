// The packed products run on the CPU kernel directly (ops/cpu/packed_gemm.h): a packed weight
// exists only on the CPU, so there is no device to dispatch on.
#include "ops/packed_linear.h"

#include <atomic>
#include <numeric>

#include "ops/cpu/packed_gemm.h"
#include "ops/cpu/quantized_gemm.h"
#include "ops/view.h"
#include "runtime/autograd.h"

namespace libai::ops {
namespace {
std::atomic<uint64_t> g_products{0};
}  // namespace

uint64_t packed_products() { return g_products.load(std::memory_order_relaxed); }

int64_t PackedWeight::out_features() const {
  return matrix_ ? matrix_->n : quantized_ ? quantized_->n : 0;
}
int64_t PackedWeight::in_features() const {
  return matrix_ ? matrix_->k : quantized_ ? quantized_->k : 0;
}
DType PackedWeight::dtype() const {
  return matrix_ && matrix_->format == cpu::PanelFormat::bf16 ? DType::bf16 : DType::f32;
}
int64_t PackedWeight::bytes() const {
  if (quantized_) return quantized_->bytes();
  return matrix_ ? matrix_->panels() * matrix_->k * cpu::PackedMatrix::kPanel *
                       matrix_->value_bytes()
                 : 0;
}

QuantSpec parse_quantization(const std::string& text, const std::string& where) {
  const auto bad = [&]() {
    LIBAI_THROW(InvalidArgument, where, ": '", text,
                "' is not a quantization (none, int8, int8-dynamic, q4, q4:GROUP or "
                "q4:GROUP:min, GROUP an even number such as 32 or 64)");
  };
  if (text == "none" || text.empty()) return {};
  if (text == "int8") return {.kind = Quantization::int8};
  if (text == "int8-dynamic") return {.kind = Quantization::int8_dynamic};
  if (text.rfind("q4", 0) != 0) bad();
  QuantSpec spec{.kind = Quantization::q4};
  std::string rest = text.substr(2);
  if (rest.empty()) return spec;
  if (rest[0] != ':') bad();
  rest = rest.substr(1);
  const size_t colon = rest.find(':');
  const std::string group = rest.substr(0, colon);
  if (group.empty() || group.size() > 6 ||
      group.find_first_not_of("0123456789") != std::string::npos)
    bad();
  spec.group = std::stoll(group);
  if (spec.group < 2 || spec.group % 2 != 0) bad();
  if (colon != std::string::npos) {
    if (rest.substr(colon + 1) != "min") bad();
    spec.with_min = true;
  }
  return spec;
}

std::string quantization_name(const QuantSpec& spec) {
  switch (spec.kind) {
    case Quantization::none: return "none";
    case Quantization::int8: return "int8";
    case Quantization::int8_dynamic: return "int8-dynamic";
    case Quantization::q4:
      return "q4:" + std::to_string(spec.group) + (spec.with_min ? ":min" : "");
  }
  return "none";
}

WeightPrecision parse_weight_precision(const std::string& text, const std::string& where) {
  if (text == "f32") return {};
  if (text == "bf16") return {.pack_dtype = DType::bf16};
  if (text == "none" || text.empty())
    LIBAI_THROW(InvalidArgument, where, ": '", text,
                "' is not a precision (f32, bf16, int8, int8-dynamic, q4, q4:GROUP or "
                "q4:GROUP:min; unquantized weights are f32)");
  try {
    return {.quantize = parse_quantization(text, where)};
  } catch (const InvalidArgument&) {
    LIBAI_THROW(InvalidArgument, where, ": '", text,
                "' is not a precision (f32, bf16, int8, int8-dynamic, q4, q4:GROUP or "
                "q4:GROUP:min, GROUP an even number such as 32 or 64)");
  }
}

std::string weight_precision_name(const WeightPrecision& precision) {
  if (precision.quantize.kind != Quantization::none) return quantization_name(precision.quantize);
  return precision.pack_dtype == DType::bf16 ? "bf16" : "f32";
}

double weight_bytes_ratio(const WeightPrecision& precision) {
  const QuantSpec& q = precision.quantize;
  switch (q.kind) {
    case Quantization::none: return precision.pack_dtype == DType::bf16 ? 0.5 : 1.0;
    case Quantization::int8:
    case Quantization::int8_dynamic: return 0.25;
    case Quantization::q4: return (0.5 + 2.0 * (q.with_min ? 2 : 1) / double(q.group)) / 4.0;
  }
  return 1.0;
}

bool packable(const Tensor& weight) {
  return weight.defined() && weight.device().is_cpu() && weight.dtype() == DType::f32 &&
         weight.dim() == 2;
}

namespace {

// The kernel's epilogue for `op`; none for the ops it does not fuse.
std::optional<cpu::Act> kernel_act(UnaryOp op) {
  switch (op) {
    case UnaryOp::relu: return cpu::Act::relu;
    case UnaryOp::gelu_erf: return cpu::Act::gelu_erf;
    case UnaryOp::gelu_tanh: return cpu::Act::gelu_tanh;
    case UnaryOp::silu: return cpu::Act::silu;
    default: return std::nullopt;
  }
}

}  // namespace

bool fusable(UnaryOp act) { return kernel_act(act).has_value(); }

PackedWeight pack_weight(const Tensor& weight, DType dtype) {
  LIBAI_CHECK(packable(weight), "pack_weight: expected a CPU f32 weight [out, in], got ",
              weight.defined() ? shape_str(weight.shape()) : std::string("an undefined tensor"));
  LIBAI_CHECK(dtype == DType::f32 || dtype == DType::bf16, "pack_weight: weights pack as f32 or ",
              "bf16, not ", dtype_name(dtype));
  // Rows of k contiguous values are what the packing reads; other layouts are copied first.
  Tensor w = weight.stride(1) == 1 ? weight : weight.clone_raw();
  PackedWeight out;
  out.matrix_ = std::make_shared<const cpu::PackedMatrix>(
      cpu::pack_weight(w.data<float>(), w.size(0), w.size(1), std::max<int64_t>(w.stride(0), w.size(1)),
                       dtype == DType::bf16 ? cpu::PanelFormat::bf16 : cpu::PanelFormat::f32));
  out.source_ = weight.data_ptr();
  return out;
}

PackedWeight pack_weight(const Tensor& weight, const QuantSpec& spec) {
  if (spec.kind == Quantization::none) return pack_weight(weight, DType::f32);
  LIBAI_CHECK(packable(weight), "pack_weight: expected a CPU f32 weight [out, in] to quantize, got ",
              weight.defined() ? shape_str(weight.shape()) : std::string("an undefined tensor"));
  Tensor w = weight.stride(1) == 1 ? weight : weight.clone_raw();
  const int64_t n = w.size(0), k = w.size(1), ldw = std::max<int64_t>(w.stride(0), k);
  if (spec.kind == Quantization::q4)
    LIBAI_CHECK(k % spec.group == 0, "quantize ", quantization_name(spec), ": a weight ",
                shape_str(weight.shape()), " has an input width of ", k,
                ", not a multiple of the group size ", spec.group);
  PackedWeight out;
  out.quantized_ = std::make_shared<const cpu::QuantizedMatrix>(
      spec.kind == Quantization::q4
          ? cpu::quantize_q4(w.data<float>(), n, k, ldw, spec.group, spec.with_min)
          : cpu::quantize_int8(w.data<float>(), n, k, ldw));
  out.quantization_ = spec;
  out.source_ = weight.data_ptr();
  return out;
}

// Note [Quantized checkpoints] in packed_linear.h.
QuantizedTensors quantized_tensors(const PackedWeight& weight) {
  LIBAI_CHECK(weight.quantized(), "quantized_tensors: the weight is not quantized");
  const cpu::QuantizedMatrix& q = weight.quantized_matrix();
  QuantizedTensors t;
  if (q.format == cpu::QuantFormat::int8) {
    t.q = Tensor::empty({q.n, q.k}, DType::u8);
    t.scale = Tensor::empty({q.n}, DType::f32);
    cpu::int8_rows(q, reinterpret_cast<int8_t*>(t.q.data<uint8_t>()), t.scale.data<float>());
    return t;
  }
  t.q = Tensor::empty({q.n, q.k / 2}, DType::u8);
  t.scale = Tensor::empty({q.n, q.groups()}, DType::f16);
  if (q.has_min) t.min = Tensor::empty({q.n, q.groups()}, DType::f16);
  cpu::q4_rows(q, t.q.data<uint8_t>(), reinterpret_cast<uint16_t*>(t.scale.data_ptr()),
               q.has_min ? reinterpret_cast<uint16_t*>(t.min.data_ptr()) : nullptr);
  return t;
}

PackedWeight pack_quantized(const Tensor& weight, const QuantSpec& spec, const QuantizedTensors& t,
                            const std::string& what) {
  LIBAI_CHECK(spec.kind != Quantization::none, what, ": not a quantization");
  LIBAI_CHECK(packable(weight), what, ": expected a CPU f32 weight [out, in]");
  const int64_t n = weight.size(0), k = weight.size(1);
  auto expect = [&](const Tensor& x, const char* name, DType dtype, const Shape& shape) {
    LIBAI_CHECK_KIND(CorruptInput, x.defined() && x.dtype() == dtype && x.shape() == shape, what,
                     ".", name, ": expected ", dtype_name(dtype), " ", shape_str(shape), " for ",
                     quantization_name(spec), ", got ",
                     x.defined() ? str_cat(dtype_name(x.dtype()), " ", shape_str(x.shape()))
                                 : std::string("nothing"));
  };
  PackedWeight out;
  if (spec.kind == Quantization::q4) {
    LIBAI_CHECK_KIND(CorruptInput, k % spec.group == 0, what, ": an input width of ", k,
                     " is not a multiple of the group size ", spec.group);
    const Shape scales{n, k / spec.group};
    expect(t.q, "q", DType::u8, {n, k / 2});
    expect(t.scale, "scale", DType::f16, scales);
    if (spec.with_min) expect(t.min, "min", DType::f16, scales);
    const Tensor q = contiguous(t.q), d = contiguous(t.scale);
    const Tensor m = spec.with_min ? contiguous(t.min) : Tensor();
    out.quantized_ = std::make_shared<const cpu::QuantizedMatrix>(cpu::pack_q4_rows(
        q.data<uint8_t>(), reinterpret_cast<const uint16_t*>(d.data_ptr()),
        spec.with_min ? reinterpret_cast<const uint16_t*>(m.data_ptr()) : nullptr, n, k,
        spec.group));
  } else {
    expect(t.q, "q", DType::u8, {n, k});
    expect(t.scale, "scale", DType::f32, {n});
    const Tensor q = contiguous(t.q), s = contiguous(t.scale);
    out.quantized_ = std::make_shared<const cpu::QuantizedMatrix>(cpu::pack_int8_rows(
        reinterpret_cast<const int8_t*>(q.data<uint8_t>()), s.data<float>(), n, k));
  }
  out.quantization_ = spec;
  out.source_ = weight.data_ptr();
  return out;
}

Tensor dequantized(const PackedWeight& weight) {
  LIBAI_CHECK(weight.quantized(), "dequantized: the weight is not quantized");
  const cpu::QuantizedMatrix& q = weight.quantized_matrix();
  Tensor w = Tensor::empty({q.n, q.k}, DType::f32);
  cpu::dequantize(q, w.data<float>(), q.k);
  return w;
}

namespace {

cpu::Act epilogue_act(const std::optional<UnaryOp>& act) {
  if (!act) return cpu::Act::none;
  const std::optional<cpu::Act> fused = kernel_act(*act);
  LIBAI_CHECK(fused, "linear_packed: the activation cannot be fused into the product");
  return *fused;
}

// t as a matrix [rows, cols] of its last dim with one stride `ld` between rows: a view when
// the leading dims collapse into one (rows not overlapping), else a contiguous copy.
Tensor as_rows(const Tensor& t, int64_t& ld) {
  const int64_t cols = t.size(-1);
  std::vector<int> leading(size_t(t.dim() - 1));
  std::iota(leading.begin(), leading.end(), 0);
  int64_t rows = 1;
  for (int d : leading) rows *= t.size(d);
  const int64_t stride = t.stride(-1) == 1 || cols == 1 ? collapsed_stride(t, leading) : -1;
  if (stride >= 0 && (rows <= 1 || stride >= cols)) {
    ld = rows <= 1 ? cols : stride;
    return t.as_strided({rows, cols}, {ld, 1}, t.offset());
  }
  Tensor c = t.clone_raw();
  ld = cols;
  return c.as_strided({rows, cols}, {cols, 1}, c.offset());
}

}  // namespace

Tensor linear_packed(const Tensor& x, const PackedWeight& weight, const Tensor& bias,
                     const LinearEpilogue& epilogue) {
  LIBAI_CHECK(weight.defined(), "linear_packed: the weight is not packed");
  LIBAI_CHECK(x.defined() && x.device().is_cpu() && x.dtype() == DType::f32 && x.dim() >= 1,
              "linear_packed: expected a CPU f32 input, got ",
              x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  const int64_t in = weight.in_features(), out_features = weight.out_features();
  LIBAI_CHECK(x.size(-1) == in, "linear_packed: input ", shape_str(x.shape()),
              " does not match the packed weight [", out_features, ", ", in, "]");
  const bool grad = autograd::grad_enabled();
  LIBAI_CHECK(!grad || (!x.requires_grad() && !(bias.defined() && bias.requires_grad()) &&
                        !(epilogue.residual.defined() && epilogue.residual.requires_grad())),
              "linear_packed: no autograd through a packed weight (inputs require gradients)");
  Shape out_shape = x.shape();
  out_shape.back() = out_features;
  cpu::Epilogue e{.act = epilogue_act(epilogue.act)};
  Tensor b;
  if (bias.defined()) {
    LIBAI_CHECK(bias.device().is_cpu() && bias.dtype() == DType::f32 && bias.dim() == 1 &&
                    bias.size(0) == out_features,
                "linear_packed: bias of shape ", shape_str(bias.shape()), " does not match [",
                out_features, "]");
    b = bias.is_contiguous() ? bias : bias.clone_raw();
    e.bias = b.data<float>();
  }
  Tensor residual;
  if (epilogue.residual.defined()) {
    LIBAI_CHECK(epilogue.residual.shape() == out_shape && epilogue.residual.dtype() == DType::f32 &&
                    epilogue.residual.device().is_cpu(),
                "linear_packed: residual of shape ", shape_str(epilogue.residual.shape()),
                " does not match the output ", shape_str(out_shape));
    residual = as_rows(epilogue.residual, e.ldr);
    e.residual = residual.data<float>();
  }
  int64_t lda = in;
  Tensor a = as_rows(x, lda);
  Tensor y = Tensor::empty(out_shape, DType::f32, x.device());
  g_products.fetch_add(1, std::memory_order_relaxed);
  if (weight.quantized())
    cpu::quantized_gemm(a.size(0), a.data<float>(), lda, weight.quantized_matrix(), e,
                        y.data<float>(), out_features,
                        weight.quantization().kind == Quantization::int8_dynamic
                            ? cpu::ActivationPrecision::int8
                            : cpu::ActivationPrecision::f32);
  else
    cpu::packed_gemm(a.size(0), a.data<float>(), lda, weight.matrix(), e, y.data<float>(),
                     out_features);
  return y;
}

}  // namespace libai::ops
