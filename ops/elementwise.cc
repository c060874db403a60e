#include "ops/elementwise.h"

#include "ops/broadcast.h"
#include "runtime/autograd.h"

namespace libai::ops {
namespace {

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b, const char* name) {
  check_same_device(a, b, name);
  check_same_dtype(a, b, name);
  Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  kernel<binary_slot>(a.device())(op, expand_view(a, shape), expand_view(b, shape), out);
  return out;
}

Tensor affine(const Tensor& x, double factor, double offset) {
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  kernel<affine_slot>(x.device())(x, factor, offset, out);
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary(BinaryOp::add, a, b, "add");
  Shape sa = a.shape(), sb = b.shape();
  return autograd::record(out, "add", {a, b}, [sa, sb](const Tensor& g) {
    return std::vector<Tensor>{sum_to(g, sa), sum_to(g, sb)};
  });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary(BinaryOp::sub, a, b, "sub");
  Shape sa = a.shape(), sb = b.shape();
  return autograd::record(out, "sub", {a, b}, [sa, sb](const Tensor& g) {
    return std::vector<Tensor>{sum_to(g, sa), sum_to(affine(g, -1.0, 0.0), sb)};
  });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary(BinaryOp::mul, a, b, "mul");
  Tensor ad = a.detach(), bd = b.detach();
  return autograd::record(out, "mul", {a, b}, [ad, bd](const Tensor& g) {
    return std::vector<Tensor>{sum_to(binary(BinaryOp::mul, g, bd, "mul"), ad.shape()),
                               sum_to(binary(BinaryOp::mul, g, ad, "mul"), bd.shape())};
  });
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary(BinaryOp::div, a, b, "div");
  Tensor ad = a.detach(), bd = b.detach(), od = out.detach();
  return autograd::record(out, "div", {a, b}, [ad, bd, od](const Tensor& g) {
    Tensor ga = binary(BinaryOp::div, g, bd, "div");
    // d(a/b)/db = -(a/b)/b
    Tensor gb = affine(binary(BinaryOp::mul, ga, od, "mul"), -1.0, 0.0);
    return std::vector<Tensor>{sum_to(ga, ad.shape()), sum_to(gb, bd.shape())};
  });
}

Tensor scale(const Tensor& x, double factor) {
  Tensor out = affine(x, factor, 0.0);
  return autograd::record(out, "scale", {x}, [factor](const Tensor& g) {
    return std::vector<Tensor>{affine(g, factor, 0.0)};
  });
}

Tensor add_scalar(const Tensor& x, double value) {
  Tensor out = affine(x, 1.0, value);
  return autograd::record(out, "add_scalar", {x},
                          [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

Tensor neg(const Tensor& x) { return scale(x, -1.0); }

void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  LIBAI_CHECK(a.device() == b.device(), op, ": operands on different devices (", a.device(),
              " and ", b.device(), ")");
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  LIBAI_CHECK(a.dtype() == b.dtype(), op, ": operands of different dtypes (", a.dtype(), " and ",
              b.dtype(), "); convert one with to_dtype()");
}

namespace {
// Gradients accumulate through the same kernel as add.
Tensor accumulate_add(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::add, a, b, "add");
}
const bool registered_accumulator [[maybe_unused]] = [] {
  autograd::register_add(&accumulate_add);
  return true;
}();
}  // namespace

}  // namespace libai::ops
