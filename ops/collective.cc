#include "ops/collective.h"

#include "ops/view.h"
#include "runtime/autograd.h"

namespace libai::ops {

namespace {

bool trivial(const CommunicatorPtr& group) { return !group || group->size() == 1; }

// A contiguous copy that the collective may overwrite (never the caller's storage).
Tensor owned_copy(const Tensor& x) { return x.clone_raw(); }

Tensor all_reduced(const Tensor& x, const CommunicatorPtr& group) {
  Tensor out = owned_copy(x);
  group->all_reduce(out);
  return out;
}

// [..., n] on every rank -> [..., size * n]: rank r's block at [r * n, (r + 1) * n).
Tensor gathered(const Tensor& x, const CommunicatorPtr& group) {
  const int size = group->size();
  // all_gather concatenates whole tensors; move the last dim to the front to gather it.
  const int rank_dims = x.dim();
  std::vector<int64_t> to_front(rank_dims);
  to_front[0] = rank_dims - 1;
  for (int i = 1; i < rank_dims; ++i) to_front[i] = i - 1;
  Tensor front = contiguous(permute(x.detach(), to_front)).clone_raw();  // [n, ...]
  Shape gathered_shape = front.shape();
  gathered_shape[0] *= size;
  Tensor all = Tensor::empty(gathered_shape, x.dtype(), x.device());
  group->all_gather(front, all);
  std::vector<int64_t> to_back(rank_dims);
  for (int i = 0; i < rank_dims - 1; ++i) to_back[i] = i + 1;
  to_back[rank_dims - 1] = 0;
  return contiguous(permute(all, to_back)).detach();
}

Tensor own_slice(const Tensor& x, const CommunicatorPtr& group) {
  const int64_t n = x.size(-1);
  LIBAI_CHECK(n % group->size() == 0, "split_last_dim: last dim ", n, " is not divisible by the group size ",
              group->size());
  const int64_t part = n / group->size();
  return contiguous(narrow(x.detach(), -1, group->rank() * part, part)).detach();
}

}  // namespace

Tensor copy_to_group(const Tensor& x, const CommunicatorPtr& group) {
  if (trivial(group)) return x;
  return autograd::record(x.detach(), "copy_to_group", {x}, [group](const Tensor& g) {
    return std::vector<Tensor>{all_reduced(g, group)};
  });
}

Tensor reduce_from_group(const Tensor& x, const CommunicatorPtr& group) {
  if (trivial(group)) return x;
  return autograd::record(all_reduced(x, group), "reduce_from_group", {x},
                          [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

Tensor gather_last_dim(const Tensor& x, const CommunicatorPtr& group) {
  if (trivial(group)) return x;
  return autograd::record(gathered(x, group), "gather_last_dim", {x}, [group](const Tensor& g) {
    return std::vector<Tensor>{own_slice(g, group)};
  });
}

Tensor split_last_dim(const Tensor& x, const CommunicatorPtr& group) {
  if (trivial(group)) return x;
  return autograd::record(own_slice(x, group), "split_last_dim", {x}, [group](const Tensor& g) {
    return std::vector<Tensor>{gathered(g, group)};
  });
}

}  // namespace libai::ops
