#include "runtime/tensor.h"

#include <cstring>
#include <ostream>
#include <sstream>

#include "runtime/autograd.h"
#include "runtime/device_copy.h"

namespace libai {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

int64_t collapsed_stride(const Tensor& t, const std::vector<int>& dims) {
  int64_t stride = -1, extent = 0;  // stride/size of the merged run so far (innermost last)
  for (auto it = dims.rbegin(); it != dims.rend(); ++it) {
    int64_t size = t.shape()[*it], s = t.strides()[*it];
    if (size == 1) continue;
    if (stride < 0) {
      stride = s;
      extent = size;
    } else {
      if (s != stride * extent) return -1;
      extent *= size;
    }
  }
  return stride < 0 ? 1 : stride;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (int d = int(shape.size()) - 1; d >= 0; --d) {
    strides[d] = s;
    s *= shape[d];
  }
  return strides;
}

std::string shape_str(const Shape& shape) { return str_cat(shape); }

int normalize_dim(int64_t dim, int rank, const char* what) {
  int64_t r = rank == 0 ? 1 : rank;
  LIBAI_CHECK(dim >= -r && dim < r, what, " ", dim, " is out of range for a tensor of rank ", rank);
  return int(dim < 0 ? dim + r : dim);
}

Storage::Storage(size_t bytes, Device dev)
    : nbytes(bytes), device(dev), allocator(&allocator_for(dev)) {
  data = allocator->allocate(bytes);
}

Storage::Storage(void* borrowed, size_t bytes, Device dev, std::shared_ptr<void> owner)
    : data(borrowed), nbytes(bytes), device(dev), keep_alive(std::move(owner)) {}

Storage::~Storage() {
  if (allocator != nullptr) allocator->deallocate(data, nbytes);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t s : shape) LIBAI_CHECK(s >= 0, "negative dimension in shape ", shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(size_t(shape_numel(shape)) * dtype_size(dtype), device);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

namespace {

template <typename T>
void fill_typed(void* data, int64_t n, double value) {
  T v = from_float<T>(float(value));
  if constexpr (std::is_same_v<T, double>) v = value;
  if constexpr (std::is_same_v<T, int64_t>) v = int64_t(value);
  T* p = static_cast<T*>(data);
  std::fill(p, p + n, v);
}

void fill_any(void* data, int64_t n, DType dtype, double value) {
  switch (dtype) {
    case DType::f32: return fill_typed<float>(data, n, value);
    case DType::f64: return fill_typed<double>(data, n, value);
    case DType::bf16: return fill_typed<bf16>(data, n, value);
    case DType::f16: return fill_typed<f16>(data, n, value);
    case DType::i64: return fill_typed<int64_t>(data, n, value);
    case DType::i32: return fill_typed<int32_t>(data, n, value);
    case DType::u8: return fill_typed<uint8_t>(data, n, value);
    case DType::boolean: return fill_typed<bool>(data, n, value != 0.0);
  }
}

}  // namespace

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor host = empty(shape, dtype);
  fill_any(host.data_ptr(), host.numel(), dtype, value);
  if (device.is_cpu()) return host;
  return to_device(host, device);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  if (device.is_cpu()) {
    Tensor t = empty(shape, dtype);
    std::memset(t.data_ptr(), 0, t.nbytes());
    return t;
  }
  return full(shape, 0.0, dtype, device);
}

Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) {
  return full(shape, 1.0, dtype, device);
}

Tensor Tensor::arange(int64_t n, DType dtype) {
  Tensor t = empty({n}, DType::f64);
  double* p = t.data<double>();
  for (int64_t i = 0; i < n; ++i) p[i] = double(i);
  if (dtype == DType::f64) return t;
  Tensor out = empty({n}, dtype);
  out.copy_from(t);
  return out;
}

Tensor Tensor::from_blob(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> owner,
                         Device device) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(data, size_t(shape_numel(shape)) * dtype_size(dtype),
                                            device, std::move(owner));
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int d = dim() - 1; d >= 0; --d) {
    if (shape()[d] == 1) continue;
    if (strides()[d] != expected) return false;
    expected *= shape()[d];
  }
  return true;
}

Tensor Tensor::as_strided(const Shape& shape, const Shape& strides, int64_t offset) const {
  LIBAI_ASSERT(shape.size() == strides.size());
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = storage();
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = dtype();
  return Tensor(std::move(impl));
}

Tensor Tensor::detach() const { return as_strided(shape(), strides(), offset()); }

Tensor Tensor::clone_raw() const {
  Tensor out = empty(shape(), dtype(), device());
  out.copy_from(*this);
  return out;
}

namespace {

template <typename Dst>
void convert_into(Dst* out, const Tensor& src) {
  auto* base = static_cast<const char*>(src.storage()->data);
  const int64_t es = int64_t(src.element_size());
  int64_t i = 0;
  auto put = [&](auto v) {
    if constexpr (std::is_same_v<Dst, bf16> || std::is_same_v<Dst, f16>)
      out[i++] = Dst(float(v));
    else
      out[i++] = static_cast<Dst>(v);
  };
  for_each_offset(src.shape(), src.strides(), src.offset(), [&](int64_t off) {
    const char* p = base + off * es;
    switch (src.dtype()) {
      case DType::f32: put(*reinterpret_cast<const float*>(p)); break;
      case DType::f64: put(*reinterpret_cast<const double*>(p)); break;
      case DType::bf16: put(float(*reinterpret_cast<const bf16*>(p))); break;
      case DType::f16: put(float(*reinterpret_cast<const f16*>(p))); break;
      case DType::i64: put(*reinterpret_cast<const int64_t*>(p)); break;
      case DType::i32: put(*reinterpret_cast<const int32_t*>(p)); break;
      case DType::u8: put(*reinterpret_cast<const uint8_t*>(p)); break;
      case DType::boolean: put(*reinterpret_cast<const bool*>(p)); break;
    }
  });
}

}  // namespace

namespace {

// Same dtype on the CPU, some layout strided: copies the longest trailing runs that both
// layouts store contiguously, one memcpy each (a slice of a KV cache's buffer, rows of a
// concatenation), instead of element by element through a buffer. False when the runs would
// be shorter than 16 elements (a transpose): the general path handles those.
bool copy_runs(Tensor& dst, const Tensor& src) {
  const Shape& shape = dst.shape();
  int d = int(shape.size());
  int64_t run = 1;
  while (d > 0) {
    const int64_t size = shape[size_t(d - 1)];
    if (size != 1 && (dst.strides()[size_t(d - 1)] != run || src.strides()[size_t(d - 1)] != run))
      break;
    run *= size;
    --d;
  }
  if (run < 16) return false;
  const int64_t es = int64_t(dst.element_size());
  auto* out = static_cast<char*>(dst.storage()->data);
  const auto* in = static_cast<const char*>(src.storage()->data);
  std::vector<int64_t> index(size_t(d), 0);
  int64_t outer = 1;
  for (int i = 0; i < d; ++i) outer *= shape[size_t(i)];
  for (int64_t n = 0; n < outer; ++n) {
    int64_t o = dst.offset(), p = src.offset();
    for (int i = 0; i < d; ++i) {
      o += index[size_t(i)] * dst.strides()[size_t(i)];
      p += index[size_t(i)] * src.strides()[size_t(i)];
    }
    std::memmove(out + o * es, in + p * es, size_t(run * es));
    for (int i = d - 1; i >= 0; --i) {
      if (++index[size_t(i)] < shape[size_t(i)]) break;
      index[size_t(i)] = 0;
    }
  }
  return true;
}

}  // namespace

void Tensor::copy_from(const Tensor& src) {
  LIBAI_CHECK(src.shape() == shape(), "copy_from: source shape ", shape_str(src.shape()),
              " differs from destination shape ", shape_str(shape()));
  if (!device().is_cpu() || !src.device().is_cpu()) {
    copy_across_devices(*this, src);
    return;
  }
  if (src.dtype() == dtype() && src.is_contiguous() && is_contiguous()) {
    std::memmove(data_ptr(), src.data_ptr(), nbytes());
    return;
  }
  if (numel() == 0) return;
  // (Views of one storage go through the buffer below: they may overlap.)
  if (src.dtype() == dtype() && src.storage() != storage() && copy_runs(*this, src)) return;
  // Convert into a contiguous buffer, then scatter into this layout when it is strided.
  Tensor dst = is_contiguous() ? *this : empty(shape(), dtype());
  switch (dtype()) {
    case DType::f32: convert_into(static_cast<float*>(dst.data_ptr()), src); break;
    case DType::f64: convert_into(static_cast<double*>(dst.data_ptr()), src); break;
    case DType::bf16: convert_into(static_cast<bf16*>(dst.data_ptr()), src); break;
    case DType::f16: convert_into(static_cast<f16*>(dst.data_ptr()), src); break;
    case DType::i64: convert_into(static_cast<int64_t*>(dst.data_ptr()), src); break;
    case DType::i32: convert_into(static_cast<int32_t*>(dst.data_ptr()), src); break;
    case DType::u8: convert_into(static_cast<uint8_t*>(dst.data_ptr()), src); break;
    case DType::boolean: convert_into(static_cast<bool*>(dst.data_ptr()), src); break;
  }
  if (dst.impl_ptr() == impl_ptr()) return;
  auto* out_base = static_cast<char*>(storage()->data);
  auto* in = static_cast<const char*>(dst.data_ptr());
  const int64_t es = int64_t(element_size());
  int64_t i = 0;
  for_each_offset(shape(), strides(), offset(), [&](int64_t off) {
    std::memcpy(out_base + off * es, in + (i++) * es, size_t(es));
  });
}

Tensor& Tensor::set_requires_grad(bool value) {
  LIBAI_CHECK(!value || is_floating(dtype()), "requires_grad needs a floating dtype, got ",
              dtype());
  impl().requires_grad = value;
  return *this;
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "Tensor(undefined)";
  os << "Tensor(shape=" << shape_str(t.shape()) << ", dtype=" << t.dtype()
     << ", device=" << t.device();
  if (t.device().is_cpu() && t.numel() <= 16) {
    auto v = t.to_vector<double>();
    os << ", values=" << str_cat(v);
  }
  return os << ")";
}

}  // namespace libai
