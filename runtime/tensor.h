// Tensor: ref-counted storage plus a view (shape, strides in elements, offset), a dtype
// and a device. Copies of a Tensor share storage; views are made by ops (ops/view.h).
//
//   Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
//   x.shape();            // [2, 3]
//   x.data<float>()[4];   // 5
//   Tensor w = Tensor::zeros({3, 4}).set_requires_grad(true);
//   // ops::matmul(x, w) ... ; autograd::backward(loss); w.grad()
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/allocator.h"
#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/error.h"

namespace libai {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
Shape contiguous_strides(const Shape& shape);
std::string shape_str(const Shape& shape);
// Resolves a possibly negative dimension index against a rank; throws on out of range.
int normalize_dim(int64_t dim, int rank, const char* what = "dim");

// Owns (or borrows, with a keep-alive) a block of device memory.
struct Storage {
  void* data = nullptr;
  size_t nbytes = 0;
  Device device;
  Allocator* allocator = nullptr;    // returns the block on destruction, when set
  std::shared_ptr<void> keep_alive;  // for borrowed memory (mmap, a caller's buffer)

  Storage(size_t bytes, Device dev);
  Storage(void* borrowed, size_t bytes, Device dev, std::shared_ptr<void> owner);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

namespace autograd {
struct Node;
}

class Tensor;
using GradHook = std::function<void(const Tensor& grad)>;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;
  int64_t offset = 0;  // in elements
  DType dtype = DType::f32;

  // Autograd state.
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<autograd::Node> grad_fn;
  std::vector<GradHook> grad_ready_hooks;
  std::string name;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Factories. Contents of `empty` are uninitialised.
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32,
                     Device device = Device::cpu());
  static Tensor scalar(double value, DType dtype = DType::f32) { return full({}, value, dtype); }
  static Tensor arange(int64_t n, DType dtype = DType::i64);
  // Wraps memory owned elsewhere; `owner` keeps it alive as long as any view exists.
  static Tensor from_blob(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> owner,
                          Device device = Device::cpu());
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape) {
    LIBAI_CHECK(int64_t(values.size()) == shape_numel(shape), "from_vector: ", values.size(),
                " values do not fill shape ", shape_str(shape));
    Tensor t = empty(shape, dtype_v<T>);
    std::copy(values.begin(), values.end(), t.data<T>());
    return t;
  }
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values) {
    return from_vector(values, {int64_t(values.size())});
  }

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Shape& strides() const { return impl().strides; }
  int64_t offset() const { return impl().offset; }
  int dim() const { return int(impl().shape.size()); }
  int64_t size(int64_t d) const { return shape()[normalize_dim(d, dim())]; }
  int64_t stride(int64_t d) const { return strides()[normalize_dim(d, dim())]; }
  int64_t numel() const { return shape_numel(shape()); }
  DType dtype() const { return impl().dtype; }
  size_t element_size() const { return dtype_size(dtype()); }
  size_t nbytes() const { return size_t(numel()) * element_size(); }
  Device device() const { return impl().storage->device; }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  bool shares_storage(const Tensor& other) const { return storage() == other.storage(); }

  void* data_ptr() const {
    return static_cast<char*>(impl().storage->data) + offset() * int64_t(element_size());
  }
  template <typename T>
  T* data() const {
    LIBAI_CHECK(dtype() == dtype_v<T>, "tensor of dtype ", dtype(), " accessed as ",
                dtype_name(dtype_v<T>));
    return static_cast<T*>(data_ptr());
  }
  // Element values converted to T (any layout, CPU only).
  template <typename T>
  std::vector<T> to_vector() const;
  template <typename T>
  T item() const {
    LIBAI_CHECK(numel() == 1, "item(): tensor of shape ", shape_str(shape()),
                " has more than one element");
    return to_vector<T>()[0];
  }

  // A new view of the same storage (no autograd: ops/view.h records it).
  Tensor as_strided(const Shape& shape, const Shape& strides, int64_t offset) const;
  // A detached alias: same storage, no autograd history.
  Tensor detach() const;
  // A contiguous deep copy (no autograd).
  Tensor clone_raw() const;
  // Copies `src` into this tensor elementwise (same shape; dtype converted; no autograd).
  void copy_from(const Tensor& src);

  // Autograd.
  bool requires_grad() const { return impl().requires_grad; }
  Tensor& set_requires_grad(bool value);
  Tensor grad() const { return impl().grad ? Tensor(impl().grad) : Tensor(); }
  void set_grad(const Tensor& g) { impl().grad = g.impl_ptr(); }
  void zero_grad() { impl().grad.reset(); }
  const std::shared_ptr<autograd::Node>& grad_fn() const { return impl().grad_fn; }
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  // Called with the final gradient of this leaf once backward has finished accumulating it.
  void add_grad_ready_hook(GradHook hook) { impl().grad_ready_hooks.push_back(std::move(hook)); }
  const std::string& name() const { return impl().name; }
  Tensor& set_name(std::string name) {
    impl().name = std::move(name);
    return *this;
  }

  TensorImpl& impl() const {
    LIBAI_CHECK(impl_ != nullptr, "use of an undefined tensor");
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Merges the dims `dims` of t (in order) into one when their strides allow it; returns the
// merged stride, or -1 when they do not collapse. Size-1 dims never block a merge (all of
// size 1: 1).
int64_t collapsed_stride(const Tensor& t, const std::vector<int>& dims);

// Calls fn(element_offset) for every element of a strided layout, in row-major order.
template <typename Fn>
void for_each_offset(const Shape& shape, const Shape& strides, int64_t offset, Fn&& fn) {
  const int rank = int(shape.size());
  const int64_t n = shape_numel(shape);
  if (n == 0) return;
  if (rank == 0) {
    fn(offset);
    return;
  }
  std::vector<int64_t> index(rank, 0);
  int64_t pos = offset;
  const int64_t inner = shape[rank - 1], inner_stride = strides[rank - 1];
  for (int64_t done = 0; done < n; done += inner) {
    for (int64_t i = 0; i < inner; ++i) fn(pos + i * inner_stride);
    for (int d = rank - 2; d >= 0; --d) {
      pos += strides[d];
      if (++index[d] < shape[d]) break;
      pos -= strides[d] * shape[d];
      index[d] = 0;
    }
  }
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  LIBAI_CHECK(device().is_cpu(), "to_vector(): tensor is on ", device(), "; copy it to cpu first");
  Tensor src = *this;
  std::vector<T> out;
  out.reserve(size_t(numel()));
  auto* base = static_cast<const char*>(storage()->data);
  const size_t es = element_size();
  for_each_offset(shape(), strides(), offset(), [&](int64_t off) {
    const char* p = base + off * int64_t(es);
    switch (dtype()) {
      case DType::f32: out.push_back(T(*reinterpret_cast<const float*>(p))); break;
      case DType::f64: out.push_back(T(*reinterpret_cast<const double*>(p))); break;
      case DType::bf16: out.push_back(T(float(*reinterpret_cast<const bf16*>(p)))); break;
      case DType::f16: out.push_back(T(float(*reinterpret_cast<const f16*>(p)))); break;
      case DType::i64: out.push_back(T(*reinterpret_cast<const int64_t*>(p))); break;
      case DType::i32: out.push_back(T(*reinterpret_cast<const int32_t*>(p))); break;
      case DType::u8: out.push_back(T(*reinterpret_cast<const uint8_t*>(p))); break;
      case DType::boolean: out.push_back(T(*reinterpret_cast<const bool*>(p))); break;
    }
  });
  return out;
}

}  // namespace libai
