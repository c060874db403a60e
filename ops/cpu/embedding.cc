// CPU kernels of ops/embedding.h.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "ops/embedding.h"
#include "runtime/threads.h"

namespace libai::ops::cpu {
namespace {

std::vector<int64_t> read_ids(const Tensor& ids) {
  const int64_t k = ids.numel();
  std::vector<int64_t> out(static_cast<size_t>(k));
  if (ids.dtype() == DType::i64) {
    std::copy_n(ids.data<int64_t>(), k, out.begin());
  } else {
    const int32_t* p = ids.data<int32_t>();
    for (int64_t j = 0; j < k; ++j) out[j] = p[j];
  }
  return out;
}

void index_select_forward_cpu(const Tensor& x, const Tensor& ids, Tensor& out) {
  // x [outer, n, inner], out [outer, k, inner]: whole rows move, so copy bytes.
  const int64_t outer = x.shape()[0], n = x.shape()[1], inner = x.shape()[2];
  const std::vector<int64_t> id = read_ids(ids);
  const int64_t k = int64_t(id.size());
  const size_t row_bytes = size_t(inner) * x.element_size();
  const char* src = static_cast<const char*>(x.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  parallel_for(0, outer * k, std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(inner, 1)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t r = begin; r < end; ++r) {
                   const int64_t o = r / k, j = r % k;
                   std::memcpy(dst + size_t(r) * row_bytes, src + size_t(o * n + id[j]) * row_bytes,
                               row_bytes);
                 }
               });
}

void index_add_backward_cpu(const Tensor& grad, const Tensor& ids, int64_t skip_id,
                            Tensor& grad_x) {
  // grad [outer, k, inner] -> grad_x [outer, n, inner]. Positions are grouped by id so that
  // each destination row is summed by one task, in position order: no races, and the result
  // does not depend on the thread count.
  const int64_t outer = grad.shape()[0], k = grad.shape()[1], inner = grad.shape()[2];
  const int64_t n = grad_x.shape()[1];
  const std::vector<int64_t> id = read_ids(ids);
  std::vector<int64_t> order(static_cast<size_t>(k));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return id[a] < id[b]; });
  std::vector<int64_t> group_start;  // into `order`
  for (int64_t i = 0; i < k; ++i)
    if (id[order[i]] != skip_id && (i == 0 || id[order[i]] != id[order[i - 1]]))
      group_start.push_back(i);
  const int64_t groups = int64_t(group_start.size());
  auto group_end = [&](int64_t g) {
    int64_t e = group_start[g] + 1;
    while (e < k && id[order[e]] == id[order[group_start[g]]]) ++e;
    return e;
  };
  dispatch_floating(grad.dtype(), "embedding backward", [&]<typename T>() {
    using C = compute_t<T>;
    const T* g = grad.data<T>();
    T* gx = grad_x.data<T>();
    parallel_for(0, outer * groups, std::max<int64_t>(1, 4096 / std::max<int64_t>(inner, 1)),
                 [&](int64_t begin, int64_t end) {
                   std::vector<C> acc(static_cast<size_t>(inner));
                   for (int64_t t = begin; t < end; ++t) {
                     const int64_t o = t / groups, grp = t % groups;
                     std::fill(acc.begin(), acc.end(), C(0));
                     const int64_t stop = group_end(grp);
                     for (int64_t i = group_start[grp]; i < stop; ++i) {
                       const T* row = g + (o * k + order[i]) * inner;  // [inner]
                       for (int64_t h = 0; h < inner; ++h) acc[h] += load(row[h]);
                     }
                     T* out = gx + (o * n + id[order[group_start[grp]]]) * inner;
                     for (int64_t h = 0; h < inner; ++h) out[h] = store<T>(load(out[h]) + acc[h]);
                   }
                 });
  });
}

}  // namespace

LIBAI_REGISTER_KERNEL(index_select_forward, DeviceType::cpu, index_select_forward_cpu);
LIBAI_REGISTER_KERNEL(index_add_backward, DeviceType::cpu, index_add_backward_cpu);

}  // namespace libai::ops::cpu
