#include "runtime/comm/process_group_checks.h"

#include <algorithm>

#include "runtime/error.h"

namespace libai::comm::detail {

void check_group_options(const char* backend, const ProcessGroupOptions& options) {
  LIBAI_CHECK(options.size >= 1 && options.rank >= 0 && options.rank < options.size, backend,
              " communicator: rank ", options.rank, " is not in a world of size ", options.size);
  LIBAI_CHECK(options.timeout.count() > 0, backend,
              " communicator: the timeout must be positive");
}

RendezvousOptions rendezvous_options(const ProcessGroupOptions& options) {
  return RendezvousOptions{options.rank,    options.size,   options.addr,
                           options.port,    options.timeout, options.on_listening};
}

void check_tensor(const char* backend, const Tensor& t, const char* what, bool reduces) {
  LIBAI_CHECK(t.defined(), backend, " ", what, ": the tensor is undefined");
  LIBAI_CHECK(t.device().is_cpu(), backend, " ", what, ": the tensor is on ", t.device(),
              "; the ", backend, " backend moves host memory");
  LIBAI_CHECK(t.is_contiguous(), backend, " ", what, ": the tensor of shape ", t.shape(),
              " is not contiguous");
  LIBAI_CHECK(!reduces || is_floating(t.dtype()), backend, " ", what, ": cannot reduce dtype ",
              t.dtype(), " (needs f32, f64, bf16 or f16)");
}

void check_root(const char* backend, int root, int size) {
  LIBAI_CHECK(root >= 0 && root < size, backend, " broadcast: root ", root, " is not a rank of ",
              size);
}

void check_peer(const char* backend, const char* what, int peer, int rank, int size) {
  LIBAI_CHECK(peer >= 0 && peer < size && peer != rank, backend, " ", what, ": peer ", peer,
              " is not another rank of ", size);
}

void check_group_ranks(const char* backend, const std::vector<int>& ranks, int size) {
  LIBAI_CHECK(!ranks.empty() && std::is_sorted(ranks.begin(), ranks.end()) &&
                  std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end() &&
                  ranks.front() >= 0 && ranks.back() < size,
              backend, " new_group: ranks ", ranks, " must be sorted, distinct ranks of ", size);
}

std::string point_to_point_what(const char* backend, bool is_send, int peer, std::uint32_t tag,
                                std::size_t bytes, int rank, int size) {
  return str_cat(backend, " ", is_send ? "send to" : "recv from", " rank ", peer, " (tag ", tag,
                 ", ", bytes, " bytes) on rank ", rank, " of ", size);
}

}  // namespace libai::comm::detail
