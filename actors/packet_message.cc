#include "actors/packet_message.h"

#include <unistd.h>

#include <limits>

#include "runtime/error.h"

namespace libai::actors {

std::uint64_t PacketLimits::host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return wire::kMaxTensorBytes;  // unknown: the wire's own bound
  return std::uint64_t(pages) * std::uint64_t(page);
}

Packet read_packet(comm::IncomingMessage& m, const PacketLimits& limits) {
  const wire::PacketHeader header = wire::decode<wire::PacketHeader>(m.header());
  LIBAI_CHECK_KIND(CorruptInput, header.bytes == m.payload_bytes(), "its header says ",
                   header.bytes, " bytes, the message carries ", m.payload_bytes());
  LIBAI_CHECK_KIND(CorruptInput, header.bytes <= limits.max_bytes, "a packet of ", header.bytes,
                   " bytes, more than the ", limits.max_bytes, " one packet may hold");
  // Packet keeps these as int (a job has far fewer micro-batches, steps and chunks).
  constexpr std::uint32_t int_max = std::numeric_limits<int>::max();
  LIBAI_CHECK_KIND(
      CorruptInput, header.group <= int_max && header.step <= int_max && header.chunk <= int_max,
      "group ", header.group, ", step ", header.step, " or chunk ", header.chunk, " out of range");
  Packet packet{.group = int(header.group),
                .step = int(header.step),
                .done = header.done,
                .tensors = {},
                .gradient = header.gradient,
                .chunk = int(header.chunk)};
  // Every name first: a duplicate must not cost the allocations before it.
  for (const wire::NamedTensor& t : header.tensors) {
    LIBAI_CHECK_KIND(CorruptInput, packet.tensors.emplace(t.name, Tensor()).second, "tensor '",
                     t.name, "' appears twice");
  }
  for (const wire::NamedTensor& t : header.tensors) {
    // The cpu allocator caches blocks by size, so a stream of same-shaped packets reuses its
    // memory; the bytes land in the tensor itself.
    Tensor tensor = Tensor::empty(t.header.shape, t.header.dtype);
    if (tensor.nbytes() > 0) m.read(tensor.data_ptr(), tensor.nbytes());
    packet.tensors[t.name] = std::move(tensor);
  }
  return packet;
}

}  // namespace libai::actors
