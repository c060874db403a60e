// read_packet (actors/packet_message.h) on messages held in memory: a packet comes back bit for
// bit, and every header that does not describe its payload, or asks for more than the limits
// allow, is refused before any tensor is allocated or any payload byte is read.
#include "actors/packet_message.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>

namespace libai::actors {
namespace {

// A message whose header and payload are in memory; it counts what the reader takes.
class HeldMessage final : public comm::IncomingMessage {
 public:
  HeldMessage(wire::Bytes header, std::vector<std::uint8_t> payload)
      : header_(std::move(header)), payload_(std::move(payload)) {}
  int from() const override { return 3; }
  std::uint32_t channel() const override { return 5; }
  std::span<const std::uint8_t> header() const override { return header_; }
  std::size_t payload_bytes() const override { return payload_.size(); }
  void read(void* dst, std::size_t bytes) override {
    LIBAI_CHECK_KIND(CommunicationError, bytes <= payload_.size() - read_, "read past the end");
    std::memcpy(dst, payload_.data() + read_, bytes);
    read_ += bytes;
    ++reads;
  }
  int reads = 0;

 private:
  wire::Bytes header_;
  std::vector<std::uint8_t> payload_;
  std::size_t read_ = 0;
};

wire::NamedTensor named(const std::string& name, DType dtype, Shape shape) {
  const std::uint64_t bytes = std::uint64_t(shape_numel(shape)) * dtype_size(dtype);
  return {name, wire::TensorHeader{dtype, std::move(shape), bytes, 0}};
}

wire::PacketHeader header_of(std::vector<wire::NamedTensor> tensors) {
  wire::PacketHeader h;
  h.group = 4;
  h.step = 9;
  h.tensors = std::move(tensors);
  for (const auto& t : h.tensors) h.bytes += t.header.bytes;
  return h;
}

std::vector<std::uint8_t> counting(std::size_t n) {
  std::vector<std::uint8_t> bytes(n);
  for (std::size_t i = 0; i < n; ++i) bytes[i] = std::uint8_t(i * 7 + 1);
  return bytes;
}

std::string refusal(HeldMessage& m, const PacketLimits& limits = {}) {
  try {
    (void)read_packet(m, limits);
  } catch (const CorruptInput& e) {
    return e.what();
  }
  return "accepted";
}

TEST(ReadPacket, TensorsComeBackInPayloadOrder) {
  // Map order is name order; the header's list order is the payload's.
  const auto header = header_of({named("z", DType::i32, {2, 3}), named("a", DType::u8, {5})});
  const auto payload = counting(29);
  HeldMessage m(wire::encode(header), payload);
  const Packet p = read_packet(m);
  EXPECT_EQ(p.group, 4);
  EXPECT_EQ(p.step, 9);
  ASSERT_EQ(p.tensors.size(), 2u);
  EXPECT_EQ(p.tensors.at("z").shape(), (Shape{2, 3}));
  EXPECT_EQ(std::memcmp(p.tensors.at("z").data_ptr(), payload.data(), 24), 0);
  EXPECT_EQ(std::memcmp(p.tensors.at("a").data_ptr(), payload.data() + 24, 5), 0);
}

TEST(ReadPacket, APacketAboveTheLimitIsRefusedBeforeAnyRead) {
  HeldMessage m(wire::encode(header_of({named("x", DType::f32, {64})})), counting(256));
  EXPECT_NE(refusal(m, PacketLimits{.max_bytes = 255})
                .find("a packet of 256 bytes, more than the "
                      "255 one packet may hold"),
            std::string::npos);
  EXPECT_EQ(m.reads, 0);
  HeldMessage at_limit(wire::encode(header_of({named("x", DType::f32, {64})})), counting(256));
  EXPECT_EQ(read_packet(at_limit, PacketLimits{.max_bytes = 256}).tensors.size(), 1u);
}

TEST(ReadPacket, ADuplicateNameIsRefusedBeforeAnyRead) {
  HeldMessage m(wire::encode(header_of({named("x", DType::u8, {4}), named("x", DType::u8, {4})})),
                counting(8));
  EXPECT_NE(refusal(m).find("tensor 'x' appears twice"), std::string::npos);
  EXPECT_EQ(m.reads, 0);
}

TEST(ReadPacket, APayloadOfAnotherSizeIsRefused) {
  HeldMessage m(wire::encode(header_of({named("x", DType::f32, {4})})), counting(8));
  EXPECT_NE(refusal(m).find("its header says 16 bytes, the message carries 8"), std::string::npos);
  EXPECT_EQ(m.reads, 0);
}

// Packet keeps group, step and chunk as int: a larger value would have turned negative.
TEST(ReadPacket, CountersBeyondIntAreRefused) {
  auto header = header_of({});
  header.step = std::uint32_t(std::numeric_limits<int>::max()) + 1;
  HeldMessage m(wire::encode(header), {});
  EXPECT_NE(refusal(m).find("out of range"), std::string::npos);
  header.step = std::numeric_limits<int>::max();
  HeldMessage largest(wire::encode(header), {});
  EXPECT_EQ(read_packet(largest).step, std::numeric_limits<int>::max());
}

// Note [Bounded tensor headers]: a header whose element count overflows int64 is refused by
// the wire before the inbox sizes anything (it used to reach Tensor::empty).
TEST(ReadPacket, ATensorTooLargeToHoldIsRefused) {
  wire::PacketHeader header = header_of({});
  header.tensors = {{"x", wire::TensorHeader{DType::u8, {1ll << 62, 2}, 1ull << 63, 0}}};
  header.bytes = 1ull << 63;
  HeldMessage m(wire::encode(header), {});
  EXPECT_NE(refusal(m).find("exceeds"), std::string::npos);
  EXPECT_EQ(m.reads, 0);
}

TEST(PacketLimits, DefaultIsTheHostMemory) {
  const std::uint64_t memory = PacketLimits::host_memory_bytes();
  EXPECT_GT(memory, 1ull << 26);  // any machine that runs the tests has more than 64 MiB
  EXPECT_EQ(PacketLimits{}.max_bytes, memory);
}

}  // namespace
}  // namespace libai::actors
