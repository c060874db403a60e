#include "ops/view.h"

#include <algorithm>
#include <limits>

#include "ops/broadcast.h"
#include "runtime/autograd.h"

namespace libai::ops {
namespace {

Tensor copy_to_contiguous(const Tensor& x) {
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  kernel<copy_strided_slot>(x.device())(x, out);
  return out;
}

Tensor contiguous_raw(const Tensor& x) { return x.is_contiguous() ? x : copy_to_contiguous(x); }

Shape infer_shape(const Tensor& x, Shape shape, const char* op) {
  int64_t known = 1;
  int inferred = -1;
  for (int i = 0; i < int(shape.size()); ++i) {
    if (shape[i] == -1) {
      LIBAI_CHECK(inferred < 0, op, ": more than one -1 in shape ", shape_str(shape));
      inferred = i;
    } else {
      LIBAI_CHECK(shape[i] >= 0, op, ": negative size in shape ", shape_str(shape));
      known *= shape[i];
    }
  }
  if (inferred >= 0) {
    LIBAI_CHECK(known != 0 && x.numel() % known == 0, op, ": cannot infer -1 in shape ",
                shape_str(shape), " for an input of shape ", shape_str(x.shape()), " (", x.numel(),
                " elements)");
    shape[inferred] = x.numel() / known;
  }
  LIBAI_CHECK(shape_numel(shape) == x.numel(), op, ": shape ", shape_str(shape), " (",
              shape_numel(shape), " elements) does not fit an input of shape ",
              shape_str(x.shape()), " (", x.numel(), " elements)");
  return shape;
}

// A view (if possible) or a contiguous copy of x with `shape`; no autograd.
Tensor reshape_raw(const Tensor& x, const Shape& shape) {
  if (shape == x.shape()) return x.detach();
  bool ok = false;
  Shape strides = view_strides(x.shape(), x.strides(), shape, ok);
  if (ok) return x.as_strided(shape, strides, x.offset());
  Tensor c = copy_to_contiguous(x);
  return c.as_strided(shape, contiguous_strides(shape), c.offset());
}

// Records a shape-only op whose backward reshapes the gradient back to the input's shape.
Tensor record_reshape(const Tensor& out, const char* name, const Tensor& x) {
  Shape in_shape = x.shape();
  return autograd::record(out, name, {x}, [in_shape](const Tensor& g) {
    return std::vector<Tensor>{reshape_raw(contiguous_raw(g), in_shape)};
  });
}

struct SliceBounds {
  int64_t start, length;
};

SliceBounds slice_bounds(int64_t size, int64_t start, int64_t end, int64_t step) {
  auto clamp = [size](int64_t i) {
    if (i < 0) i += size;
    return std::clamp<int64_t>(i, 0, size);
  };
  int64_t s = clamp(start), e = clamp(end);
  int64_t length = e > s ? (e - s - 1) / step + 1 : 0;  // no overflow for huge steps
  return {s, length};
}

// x's elements [start, start + length * step) along dim; no autograd.
Tensor slice_raw(const Tensor& x, int d, int64_t start, int64_t length, int64_t step) {
  Shape shape = x.shape(), strides = x.strides();
  int64_t offset = x.offset() + (length > 0 ? start * strides[d] : 0);
  shape[d] = length;
  strides[d] *= step;
  return x.as_strided(shape, strides, offset);
}

// Backward of a view that picks some elements of the input: the gradient lands in a zero
// tensor of the input's shape through the same view geometry.
Tensor scatter_into_zeros(const Tensor& g, const Shape& in_shape, int d, int64_t start,
                          int64_t length, int64_t step, bool drop_dim) {
  Tensor gx = Tensor::zeros(in_shape, g.dtype(), g.device());
  Tensor window = slice_raw(gx, d, start, length, step);
  if (drop_dim) {
    Shape shape = window.shape(), strides = window.strides();
    shape.erase(shape.begin() + d);
    strides.erase(strides.begin() + d);
    window = window.as_strided(shape, strides, window.offset());
  }
  kernel<copy_strided_slot>(g.device())(g, window);
  return gx;
}

Tensor record_slice(const Tensor& out, const char* name, const Tensor& x, int d, int64_t start,
                    int64_t length, int64_t step, bool drop_dim) {
  Shape in_shape = x.shape();
  return autograd::record(out, name, {x}, [=](const Tensor& g) {
    return std::vector<Tensor>{scatter_into_zeros(g, in_shape, d, start, length, step, drop_dim)};
  });
}

}  // namespace

Shape view_strides(const Shape& old_shape, const Shape& old_strides, const Shape& shape, bool& ok) {
  ok = true;
  const int64_t numel = shape_numel(old_shape);
  if (numel == 0 || old_shape.empty()) return contiguous_strides(shape);
  // Walk the old dims from the innermost, in chunks of dims that are contiguous with each
  // other; each chunk must be covered exactly by a run of new dims.
  Shape strides(shape.size(), 0);
  int view_d = int(shape.size()) - 1;
  int64_t chunk_base = old_strides.back(), tensor_numel = 1, view_numel = 1;
  for (int d = int(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    bool chunk_ends =
        d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
      strides[view_d] = view_numel * chunk_base;
      view_numel *= shape[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) {
      ok = false;
      return {};
    }
    if (d > 0) {
      chunk_base = old_strides[d - 1];
      tensor_numel = view_numel = 1;
    }
  }
  if (view_d != -1) {
    ok = false;
    return {};
  }
  return strides;
}

Tensor reshape(const Tensor& x, Shape shape) {
  shape = infer_shape(x, std::move(shape), "reshape");
  return record_reshape(reshape_raw(x, shape), "reshape", x);
}

Tensor view(const Tensor& x, Shape shape) {
  shape = infer_shape(x, std::move(shape), "view");
  bool ok = false;
  Shape strides = view_strides(x.shape(), x.strides(), shape, ok);
  LIBAI_CHECK(ok, "view: a tensor of shape ", shape_str(x.shape()), " and strides ",
              shape_str(x.strides()), " cannot be viewed as ", shape_str(shape),
              " without a copy; use reshape()");
  return record_reshape(x.as_strided(shape, strides, x.offset()), "view", x);
}

Tensor permute(const Tensor& x, std::vector<int64_t> dims) {
  LIBAI_CHECK(int(dims.size()) == x.dim(), "permute: ", dims.size(), " dims ", str_cat(dims),
              " for a tensor of rank ", x.dim(), " (shape ", shape_str(x.shape()), ")");
  std::vector<int64_t> inverse(dims.size(), -1);
  Shape shape(dims.size()), strides(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    int d = normalize_dim(dims[i], x.dim(), "permute");
    LIBAI_CHECK(inverse[d] < 0, "permute: dim ", dims[i], " repeated in ", str_cat(dims));
    inverse[d] = int64_t(i);
    shape[i] = x.shape()[d];
    strides[i] = x.strides()[d];
  }
  Tensor out = x.as_strided(shape, strides, x.offset());
  return autograd::record(out, "permute", {x}, [inverse](const Tensor& g) {
    Shape gs(inverse.size()), gst(inverse.size());
    for (size_t i = 0; i < inverse.size(); ++i) {
      gs[i] = g.shape()[inverse[i]];
      gst[i] = g.strides()[inverse[i]];
    }
    return std::vector<Tensor>{contiguous_raw(g.as_strided(gs, gst, g.offset()))};
  });
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  std::vector<int64_t> dims(size_t(x.dim()));
  for (int i = 0; i < x.dim(); ++i) dims[i] = i;
  std::swap(dims[normalize_dim(dim0, x.dim(), "transpose")],
            dims[normalize_dim(dim1, x.dim(), "transpose")]);
  return permute(x, dims);
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  int d = normalize_dim(dim, x.dim() + 1, "unsqueeze");
  Shape shape = x.shape(), strides = x.strides();
  int64_t stride = d < x.dim() ? strides[d] * shape[d] : 1;
  shape.insert(shape.begin() + d, 1);
  strides.insert(strides.begin() + d, stride);
  return record_reshape(x.as_strided(shape, strides, x.offset()), "unsqueeze", x);
}

Tensor squeeze(const Tensor& x) {
  Shape shape, strides;
  for (int d = 0; d < x.dim(); ++d) {
    if (x.shape()[d] == 1) continue;
    shape.push_back(x.shape()[d]);
    strides.push_back(x.strides()[d]);
  }
  return record_reshape(x.as_strided(shape, strides, x.offset()), "squeeze", x);
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  int d = normalize_dim(dim, x.dim(), "squeeze");
  Shape shape = x.shape(), strides = x.strides();
  if (shape[d] == 1) {
    shape.erase(shape.begin() + d);
    strides.erase(strides.begin() + d);
  }
  return record_reshape(x.as_strided(shape, strides, x.offset()), "squeeze", x);
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  if (x.dim() == 0) return reshape(x, {1});
  int s = normalize_dim(start_dim, x.dim(), "flatten");
  int e = normalize_dim(end_dim, x.dim(), "flatten");
  LIBAI_CHECK(s <= e, "flatten: start_dim ", start_dim, " is after end_dim ", end_dim,
              " for shape ", shape_str(x.shape()));
  Shape shape(x.shape().begin(), x.shape().begin() + s);
  int64_t merged = 1;
  for (int d = s; d <= e; ++d) merged *= x.shape()[d];
  shape.push_back(merged);
  shape.insert(shape.end(), x.shape().begin() + e + 1, x.shape().end());
  return reshape(x, shape);
}

Tensor expand(const Tensor& x, Shape shape) {
  LIBAI_CHECK(shape.size() >= size_t(x.dim()), "expand: cannot expand shape ", shape_str(x.shape()),
              " to ", shape_str(shape), " (fewer dims)");
  const size_t lead = shape.size() - size_t(x.dim());
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] != -1) continue;
    LIBAI_CHECK(i >= lead, "expand: -1 is not allowed for the new leading dim ", i, " in ",
                shape_str(shape));
    shape[i] = x.shape()[i - lead];
  }
  Tensor out = expand_view(x, shape);
  if (out.impl_ptr() == x.impl_ptr()) out = x.detach();
  Shape in_shape = x.shape();
  return autograd::record(out, "expand", {x}, [in_shape](const Tensor& g) {
    return std::vector<Tensor>{contiguous_raw(sum_to(g, in_shape))};
  });
}

Tensor contiguous(const Tensor& x) {
  if (x.is_contiguous()) return x;
  return autograd::record(copy_to_contiguous(x), "contiguous", {x},
                          [](const Tensor& g) { return std::vector<Tensor>{contiguous_raw(g)}; });
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  int d = normalize_dim(dim, x.dim(), "slice");
  LIBAI_CHECK(step > 0, "slice: step must be positive, got ", step);
  SliceBounds b = slice_bounds(x.shape()[d], start, end, step);
  Tensor out = slice_raw(x, d, b.start, b.length, step);
  return record_slice(out, "slice", x, d, b.start, b.length, step, false);
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  int d = normalize_dim(dim, x.dim(), "narrow");
  const int64_t size = x.shape()[d];
  int64_t s = start < 0 ? start + size : start;
  LIBAI_CHECK(s >= 0 && length >= 0 && s + length <= size, "narrow: start ", start, " length ",
              length, " do not fit dim ", dim, " of shape ", shape_str(x.shape()));
  return record_slice(slice_raw(x, d, s, length, 1), "narrow", x, d, s, length, 1, false);
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  int d = normalize_dim(dim, x.dim(), "select");
  const int64_t size = x.shape()[d];
  int64_t i = index < 0 ? index + size : index;
  LIBAI_CHECK(i >= 0 && i < size, "select: index ", index, " is out of range for dim ", dim,
              " of shape ", shape_str(x.shape()));
  Shape shape = x.shape(), strides = x.strides();
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  Tensor out = x.as_strided(shape, strides, x.offset() + i * x.strides()[d]);
  return record_slice(out, "select", x, d, i, 1, 1, true);
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  LIBAI_CHECK(!tensors.empty(), "cat: no tensors given");
  const Tensor& first = tensors[0];
  int d = normalize_dim(dim, first.dim(), "cat");
  Shape shape = first.shape();
  shape[d] = 0;
  for (size_t k = 0; k < tensors.size(); ++k) {
    const Tensor& t = tensors[k];
    check_same_device(first, t, "cat");
    check_same_dtype(first, t, "cat");
    bool fits = t.dim() == first.dim();
    for (int i = 0; fits && i < t.dim(); ++i) fits = i == d || t.shape()[i] == first.shape()[i];
    LIBAI_CHECK(fits, "cat: tensor ", k, " has shape ", shape_str(t.shape()),
                "; expected the shape of tensor 0 ", shape_str(first.shape()), " except along dim ",
                dim);
    shape[d] += t.shape()[d];
  }
  Tensor out = Tensor::empty(shape, first.dtype(), first.device());
  std::vector<int64_t> starts;
  int64_t start = 0;
  for (const Tensor& t : tensors) {
    starts.push_back(start);
    Tensor window = slice_raw(out, d, start, t.shape()[d], 1);
    kernel<copy_strided_slot>(t.device())(t, window);
    start += t.shape()[d];
  }
  std::vector<int64_t> sizes;
  std::vector<bool> wanted;
  for (const Tensor& t : tensors) {
    sizes.push_back(t.shape()[d]);
    wanted.push_back(autograd::needs_grad({t}));
  }
  return autograd::record(out, "cat", tensors, [d, starts, sizes, wanted](const Tensor& g) {
    std::vector<Tensor> grads(sizes.size());
    for (size_t k = 0; k < sizes.size(); ++k)
      if (wanted[k]) grads[k] = copy_to_contiguous(slice_raw(g, d, starts[k], sizes[k], 1));
    return grads;
  });
}

std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t dim) {
  int d = normalize_dim(dim, x.dim(), "split");
  LIBAI_CHECK(size > 0, "split: size must be positive, got ", size, " for shape ",
              shape_str(x.shape()));
  std::vector<int64_t> sizes;
  for (int64_t s = 0; s < x.shape()[d]; s += size)
    sizes.push_back(std::min(size, x.shape()[d] - s));
  if (sizes.empty()) sizes.push_back(0);
  return split(x, sizes, d);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  int d = normalize_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    LIBAI_CHECK(s >= 0, "split: negative size in ", str_cat(sizes));
    total += s;
  }
  LIBAI_CHECK(total == x.shape()[d], "split: sizes ", str_cat(sizes), " sum to ", total,
              " but dim ", dim, " of shape ", shape_str(x.shape()), " has ", x.shape()[d]);
  std::vector<Tensor> parts;
  int64_t start = 0;
  for (int64_t s : sizes) {
    parts.push_back(narrow(x, d, start, s));
    start += s;
  }
  return parts;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  int d = normalize_dim(dim, x.dim(), "chunk");
  LIBAI_CHECK(chunks > 0, "chunk: chunks must be positive, got ", chunks);
  int64_t size = (x.shape()[d] + chunks - 1) / chunks;
  return split(x, std::max<int64_t>(size, 1), d);
}

}  // namespace libai::ops
