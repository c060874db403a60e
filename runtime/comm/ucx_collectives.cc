#include "runtime/comm/ucx_collectives.h"

#include <algorithm>
#include <cstring>

#include "runtime/error.h"

// Note [UCX collectives]
// Every collective sends a CollectiveHeader to every rank of its group and receives theirs
// (all to all: each rank sees every rank's op, dtype and count and fails with the same message
// on a mismatch). The sequence number is in the tag instead (Note [UCX tags]), so messages of
// different collectives never match at all. The algorithm posts its first transfers at once,
// but its first wait checks the headers before any received data is used; so a small
// collective costs one round trip, not two, and a mismatch is still reported as one, never as
// a truncated message. Then:
// - small (at most kSmallMessageBytes per rank): direct. Every rank sends what each other
//   rank needs straight to it and reduces what it received in rank order 0, 1, ..., n-1, so
//   every rank computes the bit-identical result in one latency.
// - large: the ring. Rank r sends to r+1 and receives from r-1. Reduce-scatter: n-1 steps, in
//   step s rank r sends chunk r-s-1 and adds the received chunk r-s-2 into its own, so that it
//   ends with the complete chunk r (each chunk is summed in one fixed order around the ring).
//   All-gather: n-1 steps passing the complete chunks on. All-reduce is the two in turn:
//   2(n-1)/n of the tensor leaves each rank, the minimum. Broadcast pipelines 1 MiB pieces
//   down the ring from the root.
// Reductions accumulate bf16 and f16 in f32 (f32 in f32, f64 in f64): the ring reduce-scatter
// runs on an f32 copy (so partial sums travel in f32), the all-gather phase in the tensor's
// own dtype. Results are the same from run to run and on every rank.

namespace libai::comm::detail {
namespace {

using Bytes = std::shared_ptr<std::uint8_t[]>;
Bytes scratch(std::size_t bytes) {
  return Bytes(new std::uint8_t[std::max<std::size_t>(bytes, 1)]);
}

int mod(int a, int n) { return ((a % n) + n) % n; }
// Chunk c of `count` elements split in n nearly equal chunks.
std::int64_t chunk_begin(std::int64_t count, int n, int c) { return count * c / n; }
std::int64_t chunk_size(std::int64_t count, int n, int c) {
  return chunk_begin(count, n, c + 1) - chunk_begin(count, n, c);
}

template <typename Acc>
void combine(ReduceOp op, Acc* acc, const Acc* in, std::int64_t n) {
  switch (op) {
    case ReduceOp::sum:
      for (std::int64_t i = 0; i < n; ++i) acc[i] += in[i];
      break;
    case ReduceOp::max:  // a NaN anywhere stays NaN
      for (std::int64_t i = 0; i < n; ++i)
        acc[i] = (in[i] > acc[i] || in[i] != in[i]) ? in[i] : acc[i];
      break;
    case ReduceOp::min:
      for (std::int64_t i = 0; i < n; ++i)
        acc[i] = (in[i] < acc[i] || in[i] != in[i]) ? in[i] : acc[i];
      break;
  }
}

template <typename Acc>
void load(DType dtype, const void* src, Acc* dst, std::int64_t n) {
  switch (dtype) {
    case DType::bf16:
      for (std::int64_t i = 0; i < n; ++i) dst[i] = Acc(float(static_cast<const bf16*>(src)[i]));
      break;
    case DType::f16:
      for (std::int64_t i = 0; i < n; ++i) dst[i] = Acc(float(static_cast<const f16*>(src)[i]));
      break;
    default: std::memcpy(dst, src, std::size_t(n) * sizeof(Acc));  // f32 in f32, f64 in f64
  }
}

template <typename Acc>
void store(DType dtype, const Acc* src, void* dst, std::int64_t n) {
  switch (dtype) {
    case DType::bf16:
      for (std::int64_t i = 0; i < n; ++i) static_cast<bf16*>(dst)[i] = bf16(float(src[i]));
      break;
    case DType::f16:
      for (std::int64_t i = 0; i < n; ++i) static_cast<f16*>(dst)[i] = f16(float(src[i]));
      break;
    default: std::memcpy(dst, src, std::size_t(n) * sizeof(Acc));
  }
}

// Calls fn(Acc{}) with the accumulation type of `dtype`.
template <typename Fn>
void with_accumulator(DType dtype, Fn&& fn) {
  if (dtype == DType::f64) {
    fn(double{});
  } else {
    fn(float{});
  }
}

std::uint8_t* bytes_of(const Tensor& t) { return static_cast<std::uint8_t*>(t.data_ptr()); }

// Ring reduce-scatter in place over `work` (count elements of Acc): rank r ends with the
// reduction of chunk r. Steps [0, n-1).
template <typename Acc>
void ring_reduce_scatter(Collective& c, Acc* work, std::int64_t count, ReduceOp op,
                         const std::shared_ptr<const void>& owner) {
  const int n = c.size(), r = c.rank(), next = mod(r + 1, n), prev = mod(r - 1, n);
  const Bytes received = scratch(std::size_t(count / n + 1) * sizeof(Acc));
  auto* in = reinterpret_cast<Acc*>(received.get());
  for (int s = 0; s < n - 1; ++s) {
    const int out_chunk = mod(r - s - 1, n), in_chunk = mod(r - s - 2, n);
    c.send(next, std::uint32_t(s), work + chunk_begin(count, n, out_chunk),
           std::size_t(chunk_size(count, n, out_chunk)) * sizeof(Acc), owner);
    c.recv(prev, std::uint32_t(s), in, std::size_t(chunk_size(count, n, in_chunk)) * sizeof(Acc),
           received);
    c.wait_all();
    combine(op, work + chunk_begin(count, n, in_chunk), in, chunk_size(count, n, in_chunk));
  }
}

// Ring all-gather in place over `data` (count elements of `element` bytes) where rank r holds
// chunk r. Steps [n, 2n-1), after a reduce-scatter's.
void ring_all_gather(Collective& c, std::uint8_t* data, std::int64_t count, std::size_t element,
                     const std::shared_ptr<const void>& owner) {
  const int n = c.size(), r = c.rank(), next = mod(r + 1, n), prev = mod(r - 1, n);
  for (int s = 0; s < n - 1; ++s) {
    const int out_chunk = mod(r - s, n), in_chunk = mod(r - s - 1, n);
    c.send(next, std::uint32_t(n + s), data + chunk_begin(count, n, out_chunk) * element,
           std::size_t(chunk_size(count, n, out_chunk)) * element, owner);
    c.recv(prev, std::uint32_t(n + s), data + chunk_begin(count, n, in_chunk) * element,
           std::size_t(chunk_size(count, n, in_chunk)) * element, owner);
    c.wait_all();
  }
}

// Slot of rank q among the n-1 others' buffers of rank r.
int slot(int q, int r) { return q < r ? q : q - 1; }

// Receives `bytes` from every other rank (after sending each its `part(q)`) and returns them
// in one buffer by slot().
Bytes exchange_direct(Collective& c, std::size_t bytes, const std::shared_ptr<const void>& owner,
                      const std::function<const std::uint8_t*(int)>& part) {
  const int n = c.size(), r = c.rank();
  Bytes received = scratch(std::size_t(n - 1) * bytes);
  for (int q = 0; q < n; ++q) {
    if (q == r) continue;
    c.send(q, 0, part(q), bytes, owner);
    c.recv(q, 0, received.get() + std::size_t(slot(q, r)) * bytes, bytes, received);
  }
  c.wait_all();
  return received;
}

// out = op over ranks q = 0..n-1 of rank_data(q) (count elements of dtype), in rank order.
void reduce_in_rank_order(int n, DType dtype, ReduceOp op, std::int64_t count, void* out,
                          const std::function<const void*(int)>& rank_data) {
  with_accumulator(dtype, [&](auto zero) {
    using Acc = decltype(zero);
    std::vector<Acc> acc(static_cast<std::size_t>(count)), next(static_cast<std::size_t>(count));
    load(dtype, rank_data(0), acc.data(), count);
    for (int q = 1; q < n; ++q) {
      load(dtype, rank_data(q), next.data(), count);
      combine(op, acc.data(), next.data(), count);
    }
    store(dtype, acc.data(), out, count);
  });
}

}  // namespace

Collective::Collective(UcxWorld& world, const GroupView& group, std::uint32_t sequence,
                       CollectiveOp op, std::int64_t* bytes_sent)
    : world_(world), group_(group), sequence_(sequence), op_(op), bytes_sent_(bytes_sent) {}

std::string Collective::what() const {
  return collective_what("ucx", op_, sequence_, group_);
}

TransferPtr Collective::send(int to, std::uint32_t step, const void* data, std::size_t bytes,
                             std::shared_ptr<const void> owner) {
  const std::uint64_t tag =
      collective_tag(TagKind::data, group_.id, world_.rank(), sequence_, step);
  *bytes_sent_ += std::int64_t(bytes);
  return pending_.emplace_back(
      world_.send(group_.world_ranks[std::size_t(to)], tag, data, bytes, std::move(owner)));
}

TransferPtr Collective::recv(int from, std::uint32_t step, void* data, std::size_t bytes,
                             std::shared_ptr<const void> owner) {
  const int peer = group_.world_ranks[std::size_t(from)];
  const std::uint64_t tag = collective_tag(TagKind::data, group_.id, peer, sequence_, step);
  return pending_.emplace_back(world_.recv(peer, tag, data, bytes, std::move(owner)));
}

void Collective::announce(const CollectiveHeader& mine) {
  const int n = size(), r = rank();
  headers_ = std::make_shared<std::vector<CollectiveHeader>>(std::size_t(n));
  (*headers_)[std::size_t(r)] = mine;
  for (int q = 0; q < n; ++q) {
    if (q == r) continue;
    const int peer = group_.world_ranks[std::size_t(q)];
    header_transfers_.push_back(
        world_.send(peer, collective_tag(TagKind::header, group_.id, world_.rank(), sequence_, 0),
                    &(*headers_)[std::size_t(r)], sizeof mine, headers_));
    header_transfers_.push_back(
        world_.recv(peer, collective_tag(TagKind::header, group_.id, peer, sequence_, 0),
                    &(*headers_)[std::size_t(q)], sizeof mine, headers_));
  }
}

const std::vector<CollectiveHeader>& Collective::agree() {
  LIBAI_ASSERT(headers_ != nullptr, "agree() before announce()");
  if (agreed_) return *headers_;
  world_.wait(header_transfers_, Clock::now() + world_.timeout(), [this] { return what(); });
  header_transfers_.clear();
  check_same_collective(*headers_, rank(), what());
  agreed_ = true;
  return *headers_;
}

void Collective::wait(const TransferPtr& transfer) {
  agree();  // never trust data before every rank is known to run the same collective
  world_.wait({&transfer, 1}, Clock::now() + world_.timeout(), [this] { return what(); });
}

void Collective::wait_all() {
  agree();
  world_.wait(pending_, Clock::now() + world_.timeout(), [this] { return what(); });
  pending_.clear();
}

void run_all_reduce(Collective& c, const Tensor& tensor, ReduceOp op) {
  const int n = c.size(), r = c.rank();
  const std::int64_t count = tensor.numel();
  const DType dtype = tensor.dtype();
  const std::shared_ptr<const void> owner = tensor.storage();
  std::uint8_t* data = bytes_of(tensor);
  if (n == 1 || count == 0) return;
  if (tensor.nbytes() <= kSmallMessageBytes) {
    const std::size_t bytes = tensor.nbytes();
    const Bytes others = exchange_direct(c, bytes, owner, [&](int) { return data; });
    reduce_in_rank_order(n, dtype, op, count, data, [&](int q) -> const void* {
      return q == r ? data : others.get() + std::size_t(slot(q, r)) * bytes;
    });
    return;
  }
  with_accumulator(dtype, [&](auto zero) {
    using Acc = decltype(zero);
    if (dtype == DType::f32 || dtype == DType::f64) {  // in place
      ring_reduce_scatter(c, reinterpret_cast<Acc*>(data), count, op, owner);
    } else {  // bf16 / f16: reduce in an f32 copy, then gather in the tensor's dtype
      const Bytes work = scratch(std::size_t(count) * sizeof(Acc));
      auto* acc = reinterpret_cast<Acc*>(work.get());
      load(dtype, data, acc, count);
      ring_reduce_scatter(c, acc, count, op, work);
      const std::int64_t begin = chunk_begin(count, n, r);
      store(dtype, acc + begin, data + begin * std::int64_t(tensor.element_size()),
            chunk_size(count, n, r));
    }
  });
  ring_all_gather(c, data, count, tensor.element_size(), owner);
}

void run_reduce_scatter(Collective& c, const Tensor& input, const Tensor& output, ReduceOp op) {
  const int n = c.size(), r = c.rank();
  const std::int64_t block = output.numel();
  const DType dtype = input.dtype();
  const std::size_t block_bytes = output.nbytes();
  const std::uint8_t* in = bytes_of(input);
  if (n == 1) {
    std::memcpy(bytes_of(output), in, block_bytes);
    return;
  }
  if (block == 0) return;
  if (input.nbytes() <= kSmallMessageBytes) {
    const Bytes others = exchange_direct(c, block_bytes, input.storage(),
                                         [&](int q) { return in + std::size_t(q) * block_bytes; });
    reduce_in_rank_order(n, dtype, op, block, output.data_ptr(), [&](int q) -> const void* {
      return q == r ? in + std::size_t(r) * block_bytes
                    : others.get() + std::size_t(slot(q, r)) * block_bytes;
    });
    return;
  }
  with_accumulator(dtype, [&](auto zero) {
    using Acc = decltype(zero);
    const std::int64_t count = block * n;
    const Bytes work = scratch(std::size_t(count) * sizeof(Acc));
    auto* acc = reinterpret_cast<Acc*>(work.get());
    load(dtype, in, acc, count);
    ring_reduce_scatter(c, acc, count, op, work);
    store(dtype, acc + std::int64_t(r) * block, output.data_ptr(), block);
  });
}

void run_all_gather(Collective& c, const Tensor& input, const Tensor& output) {
  const int n = c.size(), r = c.rank();
  const std::size_t bytes = input.nbytes();
  std::uint8_t* out = bytes_of(output);
  std::memcpy(out + std::size_t(r) * bytes, input.data_ptr(), bytes);
  if (n == 1 || bytes == 0) return;
  if (bytes <= kSmallMessageBytes) {
    for (int q = 0; q < n; ++q) {
      if (q == r) continue;
      c.send(q, 0, input.data_ptr(), bytes, input.storage());
      c.recv(q, 0, out + std::size_t(q) * bytes, bytes, output.storage());
    }
    c.wait_all();
    return;
  }
  ring_all_gather(c, out, input.numel() * n, input.element_size(), output.storage());
}

void run_broadcast(Collective& c, const Tensor& tensor, int root) {
  const int n = c.size(), r = c.rank();
  const std::size_t bytes = tensor.nbytes();
  const std::shared_ptr<const void> owner = tensor.storage();
  std::uint8_t* data = bytes_of(tensor);
  if (n == 1 || bytes == 0) return;
  if (bytes <= kSmallMessageBytes) {
    if (r == root) {
      for (int q = 0; q < n; ++q) {
        if (q != root) c.send(q, 0, data, bytes, owner);
      }
    } else {
      c.recv(root, 0, data, bytes, owner);
    }
    c.wait_all();
    return;
  }
  // Ring pipeline from the root: receive piece k from the previous rank, pass it on.
  const std::size_t piece =
      std::max(kPipelineChunkBytes, (bytes + kMaxSteps - 2) / (kMaxSteps - 1));
  const std::size_t pieces = (bytes + piece - 1) / piece;
  const int position = mod(r - root, n), next = mod(r + 1, n), prev = mod(r - 1, n);
  std::vector<TransferPtr> incoming(pieces);
  for (std::size_t k = 0; k < pieces && position != 0; ++k) {
    incoming[k] =
        c.recv(prev, std::uint32_t(k), data + k * piece, std::min(piece, bytes - k * piece), owner);
  }
  for (std::size_t k = 0; k < pieces; ++k) {
    if (position != 0) c.wait(incoming[k]);
    if (position != n - 1) {
      c.send(next, std::uint32_t(k), data + k * piece, std::min(piece, bytes - k * piece), owner);
    }
  }
  c.wait_all();
}

}  // namespace libai::comm::detail
