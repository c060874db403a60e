#include "actors/packet.h"

#include <algorithm>
#include <cstring>

#include "runtime/error.h"

namespace libai::actors {

PackedPacket pack(const Packet& packet, std::uint32_t tag) {
  PackedPacket out;
  out.header.group = std::uint32_t(packet.group);
  out.header.step = std::uint32_t(packet.step);
  out.header.done = packet.done;
  out.header.tag = tag;
  out.header.gradient = packet.gradient;
  out.header.chunk = std::uint32_t(packet.chunk);
  // Larger elements first: every tensor then starts at a multiple of its element size.
  std::vector<std::pair<std::string, Tensor>> ordered(packet.tensors.begin(), packet.tensors.end());
  std::stable_sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) {
    return a.second.defined() && b.second.defined() &&
           a.second.element_size() > b.second.element_size();
  });
  std::vector<Tensor> parts;
  for (const auto& [name, tensor] : ordered) {
    LIBAI_CHECK(tensor.defined(), "packet ", describe(packet), ": tensor '", name, "' is undefined");
    LIBAI_CHECK(tensor.device().is_cpu(), "packet ", describe(packet), ": tensor '", name,
                "' is on ", tensor.device().str(), "; the data plane moves CPU tensors");
    Tensor t = tensor.is_contiguous() ? tensor : tensor.clone_raw();
    wire::TensorHeader h{t.dtype(), t.shape(), t.nbytes(), 0};
    out.header.tensors.push_back({name, std::move(h)});
    out.header.bytes += t.nbytes();
    parts.push_back(std::move(t));
  }
  out.bytes = Tensor::empty({int64_t(out.header.bytes)}, DType::u8);
  auto* dst = static_cast<std::uint8_t*>(out.bytes.data_ptr());
  for (const Tensor& t : parts) {
    std::memcpy(dst, t.data_ptr(), t.nbytes());
    dst += t.nbytes();
  }
  return out;
}

Tensor buffer_for(const wire::PacketHeader& header) {
  return Tensor::empty({int64_t(header.bytes)}, DType::u8);
}

Packet unpack(const wire::PacketHeader& header, const Tensor& bytes) {
  LIBAI_CHECK_KIND(CorruptInput, bytes.nbytes() == header.bytes, "packet group ", header.group,
                   " step ", header.step, ": ", bytes.nbytes(), " bytes arrived, the header says ",
                   header.bytes);
  Packet p;
  p.group = int(header.group);
  p.step = int(header.step);
  p.done = header.done;
  p.gradient = header.gradient;
  p.chunk = int(header.chunk);
  // The tensors alias the received buffer (no copy): each holds a reference to its storage.
  std::shared_ptr<void> owner = bytes.storage();
  auto* base = static_cast<std::uint8_t*>(bytes.data_ptr());
  std::uint64_t offset = 0;
  for (const wire::NamedTensor& t : header.tensors) {
    LIBAI_CHECK_KIND(CorruptInput, !p.tensors.count(t.name), "packet group ", header.group,
                     " step ", header.step, ": tensor '", t.name, "' appears twice");
    Tensor view = Tensor::from_blob(base + offset, t.header.shape, t.header.dtype, owner);
    // A peer that ordered its tensors differently: copy rather than read misaligned.
    p.tensors[t.name] = offset % dtype_size(t.header.dtype) == 0 ? view : view.clone_raw();
    offset += t.header.bytes;
  }
  return p;
}

std::string describe(const Packet& packet) {
  if (packet.gradient || packet.chunk != 0)
    return str_cat(packet.gradient ? "gradient" : "activation", " of micro-batch ", packet.group,
                   " step ", packet.step, " chunk ", packet.chunk);
  return str_cat("group ", packet.group, " step ", packet.step, packet.done ? " (done)" : "");
}

}  // namespace libai::actors
