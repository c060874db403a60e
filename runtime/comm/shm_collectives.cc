#include "runtime/comm/shm_collectives.h"

#include <algorithm>
#include <cstring>

#include "runtime/error.h"

// Note [Shm collectives]
// A collective opens with a barrier of its group at which every rank publishes its header
// (op, dtype, count, root and its tensors' addresses) in its own segment; every rank then
// reads all headers and fails with the same message if they differ, before anything else is
// touched. It closes with another barrier, after which no rank touches another's memory, so
// each may return (and its caller free the tensor). Between the two:
// - cross-memory attach (above kSmallBytes, when every rank's probe succeeded): rank r owns
//   element slice r. For pieces of kPieceBytes (they stay in cache), it reads the piece of
//   every rank with process_vm_readv in rank order 0..n-1, reduces into an accumulator, stores
//   the result into its own tensor and writes it into every peer's with process_vm_writev.
//   Nobody else touches slice r, so in place needs no staging copy and no barrier in between;
//   each byte crosses the memory system about as often as in one memcpy of 2(n-1)/n of the
//   tensor, the bus-bandwidth minimum. reduce_scatter reads block r's pieces the same way,
//   all_gather and broadcast read the other ranks' tensors whole.
// - staged (small, or no CMA): the tensor goes through two staging halves of kStagingHalf in
//   each rank's segment, chunk by chunk, alternating halves. all_reduce: copy the chunk in;
//   barrier; rank r reduces slice r of the chunk over every rank's staging into its own
//   staging and tensor; barrier; copy the other slices out of their owners' staging. Chunk c+2
//   reuses chunk c's half only after the first barrier of chunk c+1, which every rank reaches
//   after it copied chunk c out, so two barriers per chunk suffice. The other ops need one.
// Either way each element's result is computed by exactly one rank, in rank order, and copied
// to the others: bit-identical everywhere and from run to run. bf16 and f16 accumulate in f32.

namespace libai::comm::shm {
namespace {

constexpr std::size_t kSmallBytes = 64u << 10;
constexpr std::size_t kPieceBytes = 256u << 10;

std::uint8_t* bytes_of(const Tensor& t) { return static_cast<std::uint8_t*>(t.data_ptr()); }


template <typename T, typename Acc>
void load(const T* x, Acc* acc, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) acc[i] = Acc(x[i]);
}

template <typename T, typename Acc>
void combine(ReduceOp op, Acc* acc, const T* x, std::int64_t n) {
  switch (op) {
    case ReduceOp::sum:
      for (std::int64_t i = 0; i < n; ++i) acc[i] += Acc(x[i]);
      break;
    case ReduceOp::max:  // a NaN anywhere stays NaN
      for (std::int64_t i = 0; i < n; ++i) {
        const Acc v = Acc(x[i]);
        acc[i] = (v > acc[i] || v != v) ? v : acc[i];
      }
      break;
    case ReduceOp::min:
      for (std::int64_t i = 0; i < n; ++i) {
        const Acc v = Acc(x[i]);
        acc[i] = (v < acc[i] || v != v) ? v : acc[i];
      }
      break;
  }
}

template <typename T, typename Acc>
void store(const Acc* acc, T* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = T(acc[i]);
}

// Calls fn(T{}, Acc{}) for a floating dtype.
template <typename Fn>
void with_types(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32: return fn(float{}, float{});
    case DType::f64: return fn(double{}, double{});
    case DType::bf16: return fn(bf16{}, float{});
    case DType::f16: return fn(f16{}, float{});
    default: LIBAI_ASSERT(false, "reduction of ", dtype);
  }
}

// out[0, n) = op over q = 0..ranks-1 of source(q)[0, n), in rank order, in pieces that fit the
// accumulator. source(q, begin, count) returns a pointer to rank q's elements [begin, begin +
// count) of the range (it may copy them somewhere first); done(begin, count) runs after each
// piece is stored, while it is still in cache.
template <typename T, typename Acc, typename Source, typename Done>
void reduce_range(ReduceOp op, int ranks, std::int64_t n, T* out, Source&& source, Done&& done) {
  constexpr std::int64_t kAccumulator = std::int64_t(kPieceBytes / sizeof(T));
  std::vector<Acc> acc(std::size_t(std::min(n, kAccumulator)));
  for (std::int64_t begin = 0; begin < n; begin += kAccumulator) {
    const std::int64_t m = std::min(kAccumulator, n - begin);
    load<T, Acc>(source(0, begin, m), acc.data(), m);
    for (int q = 1; q < ranks; ++q) combine<T, Acc>(op, acc.data(), source(q, begin, m), m);
    store<T, Acc>(acc.data(), out + begin, m);
    done(begin, m);
  }
}

template <typename T, typename Acc, typename Source>
void reduce_range(ReduceOp op, int ranks, std::int64_t n, T* out, Source&& source) {
  reduce_range<T, Acc>(op, ranks, n, out, source, [](std::int64_t, std::int64_t) {});
}

std::int64_t slice_begin(std::int64_t count, int n, int q) { return count * q / n; }

// --- cross-memory attach ---------------------------------------------------------------------

template <typename T, typename Acc>
void cma_all_reduce(Collective& c, const Tensor& tensor, ReduceOp op) {
  const int n = c.size(), r = c.rank();
  const std::int64_t count = tensor.numel();
  T* data = static_cast<T*>(tensor.data_ptr());
  const std::int64_t begin = slice_begin(count, n, r), end = slice_begin(count, n, r + 1);
  std::vector<T> scratch(std::size_t(std::min<std::int64_t>(end - begin, kPieceBytes / sizeof(T))));
  reduce_range<T, Acc>(
      op, n, end - begin, data + begin,
      [&](int q, std::int64_t at, std::int64_t m) -> const T* {
        if (q == r) return data + begin + at;
        c.read_from(q, scratch.data(), c.header(q).input + std::uint64_t(begin + at) * sizeof(T),
                    std::size_t(m) * sizeof(T));
        return scratch.data();
      },
      [&](std::int64_t at, std::int64_t m) {  // the reduced piece into every peer's tensor
        for (int q = 0; q < n; ++q) {
          if (q == r) continue;
          c.write_to(q, data + begin + at,
                     c.header(q).output + std::uint64_t(begin + at) * sizeof(T),
                     std::size_t(m) * sizeof(T));
        }
      });
}

template <typename T, typename Acc>
void cma_reduce_scatter(Collective& c, const Tensor& input, const Tensor& output, ReduceOp op) {
  const int n = c.size(), r = c.rank();
  const std::int64_t block = output.numel();
  const T* in = static_cast<const T*>(input.data_ptr()) + block * r;
  std::vector<T> scratch(std::size_t(std::min<std::int64_t>(block, kPieceBytes / sizeof(T))));
  reduce_range<T, Acc>(op, n, block, static_cast<T*>(output.data_ptr()),
                       [&](int q, std::int64_t at, std::int64_t m) -> const T* {
                         if (q == r) return in + at;
                         c.read_from(q, scratch.data(),
                                  c.header(q).input + std::uint64_t(block * r + at) * sizeof(T),
                                  std::size_t(m) * sizeof(T));
                         return scratch.data();
                       });
}

// --- staged through shared memory ------------------------------------------------------------

template <typename T, typename Acc>
void staged_all_reduce(Collective& c, const Tensor& tensor, ReduceOp op) {
  const int n = c.size(), r = c.rank();
  const std::int64_t count = tensor.numel();
  const std::int64_t chunk = std::int64_t(kStagingHalf / sizeof(T));
  T* data = static_cast<T*>(tensor.data_ptr());
  for (std::int64_t at = 0, k = 0; at < count; at += chunk, ++k) {
    const int half = int(k % 2);
    const std::int64_t m = std::min(chunk, count - at);
    std::memcpy(c.staging(r, half), data + at, std::size_t(m) * sizeof(T));
    c.barrier();
    const std::int64_t begin = slice_begin(m, n, r), end = slice_begin(m, n, r + 1);
    T* mine = reinterpret_cast<T*>(c.staging(r, half)) + begin;
    reduce_range<T, Acc>(op, n, end - begin, mine, [&](int q, std::int64_t i, std::int64_t) {
      return reinterpret_cast<const T*>(c.staging(q, half)) + begin + i;
    });
    std::memcpy(data + at + begin, mine, std::size_t(end - begin) * sizeof(T));
    c.barrier();
    for (int q = 0; q < n; ++q) {
      if (q == r) continue;
      const std::int64_t b = slice_begin(m, n, q), e = slice_begin(m, n, q + 1);
      std::memcpy(data + at + b, reinterpret_cast<const T*>(c.staging(q, half)) + b,
                  std::size_t(e - b) * sizeof(T));
    }
  }
}

template <typename T, typename Acc>
void staged_reduce_scatter(Collective& c, const Tensor& input, const Tensor& output, ReduceOp op) {
  const int n = c.size(), r = c.rank();
  const std::int64_t block = output.numel();
  const std::int64_t chunk = std::int64_t(kStagingHalf / sizeof(T)) / n;
  const T* in = static_cast<const T*>(input.data_ptr());
  T* out = static_cast<T*>(output.data_ptr());
  for (std::int64_t at = 0, k = 0; at < block; at += chunk, ++k) {
    const int half = int(k % 2);
    const std::int64_t m = std::min(chunk, block - at);
    T* staging = reinterpret_cast<T*>(c.staging(r, half));
    for (int q = 0; q < n; ++q)
      std::memcpy(staging + q * m, in + q * block + at, std::size_t(m) * sizeof(T));
    c.barrier();
    reduce_range<T, Acc>(op, n, m, out + at, [&](int q, std::int64_t i, std::int64_t) {
      return reinterpret_cast<const T*>(c.staging(q, half)) + r * m + i;
    });
  }
}

void staged_all_gather(Collective& c, const Tensor& input, const Tensor& output) {
  const int n = c.size(), r = c.rank();
  const std::size_t bytes = input.nbytes();
  const std::uint8_t* in = bytes_of(input);
  std::uint8_t* out = bytes_of(output);
  for (std::size_t at = 0, k = 0; at < bytes; at += kStagingHalf, ++k) {
    const int half = int(k % 2);
    const std::size_t m = std::min(kStagingHalf, bytes - at);
    std::memcpy(c.staging(r, half), in + at, m);
    c.barrier();
    for (int q = 0; q < n; ++q)
      std::memcpy(out + std::size_t(q) * bytes + at, q == r ? in + at : c.staging(q, half), m);
  }
}

void staged_broadcast(Collective& c, const Tensor& tensor, int root) {
  const int r = c.rank();
  const std::size_t bytes = tensor.nbytes();
  std::uint8_t* data = bytes_of(tensor);
  for (std::size_t at = 0, k = 0; at < bytes; at += kStagingHalf, ++k) {
    const int half = int(k % 2);
    const std::size_t m = std::min(kStagingHalf, bytes - at);
    if (r == root) std::memcpy(c.staging(r, half), data + at, m);
    c.barrier();
    if (r != root) std::memcpy(data + at, c.staging(root, half), m);
  }
}

bool use_cma(const Collective& c, std::size_t bytes) {
  return c.cross_memory_attach() && bytes > kSmallBytes;
}

}  // namespace

Collective::Collective(ShmWorld& world, GroupView& group, CollectiveOp op)
    : world_(world), group_(group), op_(op), sequence_(group.sequence++) {}

std::string Collective::what() const {
  return detail::collective_what("shm", op_, sequence_, group_);
}

const ProcessId& Collective::process(int group_rank) const {
  return world_.process(group_.world_ranks[std::size_t(group_rank)]);
}

std::uint8_t* Collective::staging(int group_rank, int half) {
  return world_.staging(group_.world_ranks[std::size_t(group_rank)], half);
}

void Collective::read_from(int q, void* local, std::uint64_t remote, std::size_t bytes) {
  const int peer = group_.world_ranks[std::size_t(q)];
  try {
    cma_read(world_.process(peer), local, remote, bytes,
             [&] { return str_cat(what(), ": reading rank ", q, "'s tensor"); });
  } catch (const CommunicationError&) {
    if (std::string cause = world_.peer_failure({peer}, false); !cause.empty())
      LIBAI_THROW(CommunicationError, what(), ": ", cause);
    throw;
  }
}

void Collective::write_to(int q, const void* local, std::uint64_t remote, std::size_t bytes) {
  const int peer = group_.world_ranks[std::size_t(q)];
  try {
    cma_write(world_.process(peer), local, remote, bytes,
              [&] { return str_cat(what(), ": writing rank ", q, "'s tensor"); });
  } catch (const CommunicationError&) {
    if (std::string cause = world_.peer_failure({peer}, false); !cause.empty())
      LIBAI_THROW(CommunicationError, what(), ": ", cause);
    throw;
  }
}

void Collective::barrier() {
  world_.barrier(group_, [this] { return what(); });
}

const std::vector<CollectiveHeader>& Collective::agree(const CollectiveHeader& mine) {
  world_.slot(world_.rank(), group_.id).header = mine;
  barrier();  // publishes the header with the arrival
  headers_.clear();
  for (int q : group_.world_ranks) headers_.push_back(world_.slot(q, group_.id).header);
  detail::check_same_collective(headers_, rank(), what());
  return headers_;
}

void run_all_reduce(Collective& c, const Tensor& tensor, ReduceOp op) {
  if (c.size() == 1 || tensor.numel() == 0) return;
  with_types(tensor.dtype(), [&](auto t, auto acc) {
    using T = decltype(t);
    using Acc = decltype(acc);
    if (use_cma(c, tensor.nbytes())) {
      cma_all_reduce<T, Acc>(c, tensor, op);
    } else {
      staged_all_reduce<T, Acc>(c, tensor, op);
    }
  });
}

void run_reduce_scatter(Collective& c, const Tensor& input, const Tensor& output, ReduceOp op) {
  if (c.size() == 1) {
    std::memmove(output.data_ptr(), input.data_ptr(), output.nbytes());
    return;
  }
  if (output.numel() == 0) return;
  with_types(input.dtype(), [&](auto t, auto acc) {
    using T = decltype(t);
    using Acc = decltype(acc);
    if (use_cma(c, input.nbytes())) {
      cma_reduce_scatter<T, Acc>(c, input, output, op);
    } else {
      staged_reduce_scatter<T, Acc>(c, input, output, op);
    }
  });
}

void run_all_gather(Collective& c, const Tensor& input, const Tensor& output) {
  const int n = c.size(), r = c.rank();
  const std::size_t bytes = input.nbytes();
  if (bytes == 0) return;
  if (n == 1 || !use_cma(c, output.nbytes())) {
    if (n == 1) {
      std::memmove(output.data_ptr(), input.data_ptr(), bytes);
    } else {
      staged_all_gather(c, input, output);
    }
    return;
  }
  std::uint8_t* out = bytes_of(output);
  if (out + std::size_t(r) * bytes != bytes_of(input))
    std::memcpy(out + std::size_t(r) * bytes, input.data_ptr(), bytes);
  for (int q = 0; q < n; ++q) {
    if (q != r)
      c.read_from(q, out + std::size_t(q) * bytes, c.header(q).input, bytes);
  }
}

void run_broadcast(Collective& c, const Tensor& tensor, int root) {
  if (c.size() == 1 || tensor.nbytes() == 0) return;
  if (!use_cma(c, tensor.nbytes())) return staged_broadcast(c, tensor, root);
  if (c.rank() != root)
    c.read_from(root, tensor.data_ptr(), c.header(root).input, tensor.nbytes());
}

}  // namespace libai::comm::shm
