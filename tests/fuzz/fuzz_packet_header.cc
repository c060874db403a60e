// Fuzz target: a packet message as a node's inbox receives it (actors/packet_message.h
// read_packet): a Cap'n Proto header with its tensor descriptors, a declared payload size, and
// the payload bytes. Input: [u16 header length][header][u8 mode][u64 declared size]?[payload].
// Mode bit 0 set: the message declares its true payload size; clear: it declares the next 8
// bytes (a sender's frame may claim anything) and a read past the bytes present fails as a
// dead sender's would. Contract: CorruptInput or CommunicationError, or a packet whose
// tensors are exactly the header's, hold exactly the payload's bytes in list order and stay
// within the limit; no allocation above the limit (checked before it happens).
#include <cstring>

#include "actors/packet_message.h"
#include "tests/fuzz/fuzz_harness.h"

namespace {

using namespace libai;

constexpr std::uint64_t kLimit = 1u << 20;

class FuzzMessage final : public comm::IncomingMessage {
 public:
  FuzzMessage(std::span<const std::uint8_t> header, std::span<const std::uint8_t> payload,
              std::uint64_t declared)
      : header_(header), payload_(payload), declared_(declared) {}
  int from() const override { return 1; }
  std::uint32_t channel() const override { return 0; }
  std::span<const std::uint8_t> header() const override { return header_; }
  std::size_t payload_bytes() const override { return std::size_t(declared_); }
  void read(void* dst, std::size_t bytes) override {
    if (bytes > declared_ - read_) __builtin_trap();  // the reader passed what the header said
    if (bytes > payload_.size() - read_)
      LIBAI_THROW(CommunicationError, "the sender went away after ", payload_.size(), " bytes");
    std::memcpy(dst, payload_.data() + read_, bytes);
    read_ += bytes;
  }
  std::size_t read_bytes() const { return read_; }

 private:
  std::span<const std::uint8_t> header_;
  std::span<const std::uint8_t> payload_;
  std::uint64_t declared_;
  std::size_t read_ = 0;
};

void check(const actors::Packet& packet, const FuzzMessage& m,
           std::span<const std::uint8_t> payload) {
  // The header decodes on its own (read_packet accepted it) and describes the packet.
  const wire::PacketHeader header = wire::decode<wire::PacketHeader>(m.header());
  if (header.bytes > kLimit || m.read_bytes() != header.bytes) __builtin_trap();
  if (packet.tensors.size() != header.tensors.size()) __builtin_trap();
  std::size_t offset = 0;
  for (const wire::NamedTensor& t : header.tensors) {
    const Tensor& tensor = packet.tensors.at(t.name);
    if (tensor.shape() != t.header.shape || tensor.dtype() != t.header.dtype) __builtin_trap();
    if (tensor.nbytes() != t.header.bytes) __builtin_trap();
    if (tensor.nbytes() > 0 &&
        std::memcmp(tensor.data_ptr(), payload.data() + offset, tensor.nbytes()) != 0)
      __builtin_trap();
    offset += tensor.nbytes();
  }
}

void read_one(const uint8_t* data, size_t size) {
  if (size < 3) return;
  const std::size_t header_size = std::min<std::size_t>(data[0] | (data[1] << 8), size - 2);
  const std::span<const std::uint8_t> header(data + 2, header_size);
  std::span<const std::uint8_t> rest(data + 2 + header_size, size - 2 - header_size);
  if (rest.empty()) return;
  const bool truthful = rest[0] & 1;
  rest = rest.subspan(1);
  std::uint64_t declared = rest.size();
  if (!truthful) {
    if (rest.size() < 8) return;
    std::memcpy(&declared, rest.data(), 8);
    rest = rest.subspan(8);
  }
  FuzzMessage m(header, rest, declared);
  try {
    check(actors::read_packet(m, actors::PacketLimits{.max_bytes = kLimit}), m, rest);
  } catch (const CommunicationError&) {
    // A sender that declared more than it sent; the plane reports it as a dead sender.
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  libai::fuzz::run_one(data, size, read_one);
  return 0;
}
