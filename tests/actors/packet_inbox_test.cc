// Packets and credits between two ranks of a message plane (a local group's threads) through
// the packet inbox: every tensor arrives bit for bit (dtypes, odd sizes, special float bits,
// empty and non-contiguous tensors), credits arrive as the local credit message, and what the
// inbox cannot deliver (an unknown channel, a malformed header, a header that does not
// describe its payload) fails the plane with an error naming the node, sender and channel.
#include "actors/packet_inbox.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <random>
#include <thread>

#include "runtime/comm/local_communicator.h"

namespace libai::actors {
namespace {

using namespace std::chrono_literals;

// A tensor whose bytes are random bits (NaNs with payloads, denormals, -0 included).
Tensor random_bits(const Shape& shape, DType dtype, std::uint32_t seed) {
  Tensor t = Tensor::empty(shape, dtype);
  std::mt19937 rng(seed);
  auto* bytes = static_cast<std::uint8_t*>(t.data_ptr());
  for (std::size_t i = 0; i < t.nbytes(); ++i) bytes[i] = std::uint8_t(rng());
  if (dtype == DType::boolean)
    for (std::size_t i = 0; i < t.nbytes(); ++i) bytes[i] &= 1;
  return t;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor x = a.is_contiguous() ? a : a.clone_raw();
  const Tensor y = b.is_contiguous() ? b : b.clone_raw();
  return x.nbytes() == 0 || std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

struct Errors {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::string> seen;
  comm::MessagePlane::ErrorHandler handler() {
    return [this](const std::string& e) {
      std::lock_guard lock(mutex);
      seen.push_back(e);
      changed.notify_all();
    };
  }
  std::string first(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex);
    changed.wait_for(lock, timeout, [&] { return !seen.empty(); });
    return seen.empty() ? std::string() : seen.front();
  }
};

class PacketInboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config.set("scheduler.max-threads", 2);
    system = std::make_unique<caf::actor_system>(config);
    receiver = std::make_unique<caf::scoped_actor>(*system);
    comms = comm::LocalGroup::create(2, 10s);
    sender = comm::make_p2p_message_plane(comms[0], 5s);
    plane = comm::make_p2p_message_plane(comms[1], 5s);
    inbox = std::make_shared<PacketInbox>(1);
    sender->start([](comm::IncomingMessage&) {}, sender_errors.handler());
    plane->start([this](comm::IncomingMessage& m) { inbox->handle(m); }, errors.handler());
  }
  void TearDown() override {
    // A plane that failed says no goodbye: end both at once rather than wait for one.
    if (plane->broken()) sender->abort("the test ended");
    // Each plane's close waits for the other's goodbye: close them at once.
    std::thread other([this] { sender.reset(); });
    plane.reset();
    other.join();
    inbox.reset();
    receiver.reset();
  }

  caf::actor_system_config config;
  std::unique_ptr<caf::actor_system> system;
  std::unique_ptr<caf::scoped_actor> receiver;
  std::vector<std::shared_ptr<comm::Communicator>> comms;
  std::shared_ptr<comm::MessagePlane> sender, plane;
  std::shared_ptr<PacketInbox> inbox;
  Errors errors, sender_errors;
};

TEST_F(PacketInboxTest, PacketsArriveBitForBit) {
  inbox->add(7, caf::actor{*receiver});
  const Tensor wide = random_bits({6, 5}, DType::f32, 4);
  Packet sent{.group = 3, .step = 11, .done = false, .tensors = {}, .gradient = true, .chunk = 2};
  sent.tensors = {{"hidden_states", random_bits({2, 3, 1000}, DType::f32, 1)},
                  {"half", random_bits({7, 3}, DType::bf16, 2)},
                  {"position_ids", random_bits({5}, DType::i64, 3)},
                  {"attention_mask", random_bits({3, 5}, DType::boolean, 5)},
                  {"odd", random_bits({3}, DType::u8, 6)},
                  {"empty", Tensor::empty({0, 4}, DType::f32)},
                  {"strided", wide.as_strided({5, 3}, {1, 10}, 2)},  // not contiguous
                  {"large", random_bits({1 << 20}, DType::f32, 7)}};
  ASSERT_FALSE(sent.tensors.at("strided").is_contiguous());
  send_packet(*sender, 1, 7, sent);
  send_packet(*sender, 1, 7, Packet{.group = 4, .step = 12, .done = true, .tensors = {}});
  PacketPtr got, done;
  (*receiver)->receive([&](packet_atom, const PacketPtr& p) { got = p; }, caf::after(10s) >> [] {});
  (*receiver)->receive([&](packet_atom, const PacketPtr& p) { done = p; },
                       caf::after(10s) >> [] {});
  ASSERT_TRUE(got && done) << errors.first(0ms);
  EXPECT_EQ(got->group, 3);
  EXPECT_EQ(got->step, 11);
  EXPECT_FALSE(got->done);
  EXPECT_TRUE(got->gradient);
  EXPECT_EQ(got->chunk, 2);
  ASSERT_EQ(got->tensors.size(), sent.tensors.size());
  for (const auto& [name, tensor] : sent.tensors) {
    ASSERT_TRUE(got->tensors.count(name)) << name;
    EXPECT_TRUE(same_bits(got->tensors.at(name), tensor)) << name;
    EXPECT_TRUE(got->tensors.at(name).is_contiguous()) << name;
  }
  EXPECT_EQ(done->group, 4);
  EXPECT_TRUE(done->done);
  EXPECT_TRUE(done->tensors.empty());
  std::uint64_t bytes = 0;
  for (const auto& [name, tensor] : sent.tensors) bytes += tensor.nbytes();
  EXPECT_EQ(inbox->bytes_received(), bytes);
  EXPECT_EQ(errors.first(0ms), "");
}

TEST_F(PacketInboxTest, CreditsArriveAsTheLocalCreditMessage) {
  inbox->add(credit_channel(9), caf::actor{*receiver});
  send_credit_message(*sender, 1, 9, 3);
  std::uint32_t slots = 0, link = 0;
  (*receiver)->receive(
      [&](credit_atom, std::uint32_t s, std::uint32_t l) {
        slots = s;
        link = l;
      },
      caf::after(10s) >> [] {});
  EXPECT_EQ(slots, 3u);
  EXPECT_EQ(link, 9u);
}

TEST_F(PacketInboxTest, AChannelTakesOneReceiver) {
  inbox->add(7, caf::actor{*receiver});
  EXPECT_THROW(inbox->add(7, caf::actor{*receiver}), InvalidArgument);
}

TEST_F(PacketInboxTest, AnUnknownChannelIsANamedError) {
  inbox->add(7, caf::actor{*receiver});
  send_packet(*sender, 1, 99,
              Packet{.group = 0, .step = 0, .done = false, .tensors = {{"x", Tensor::zeros({4})}}});
  const std::string error = errors.first(10s);
  EXPECT_NE(error.find("node 1: a packet from node 0 on channel 99, which no actor of this node "
                       "receives"),
            std::string::npos)
      << error;
  EXPECT_TRUE(plane->broken());
}

TEST_F(PacketInboxTest, AMalformedHeaderIsANamedError) {
  inbox->add(7, caf::actor{*receiver});
  const std::vector<std::uint8_t> garbage{1, 2, 3, 4, 5, 6, 7, 8, 9};
  sender->send(1, 7, garbage, {});
  const std::string error = errors.first(10s);
  EXPECT_NE(error.find("node 1: a packet from node 0 on channel 7: "), std::string::npos) << error;
  EXPECT_NE(error.find("malformed"), std::string::npos) << error;
}

TEST_F(PacketInboxTest, AHeaderThatDoesNotDescribeItsPayloadIsANamedError) {
  inbox->add(7, caf::actor{*receiver});
  wire::PacketHeader header;
  header.tensors = {{"x", wire::TensorHeader{DType::f32, {4}, 16, 0}}};
  header.bytes = 16;
  const std::vector<std::uint8_t> eight(8);
  const std::vector<comm::ConstBlock> payload{{eight.data(), eight.size()}};
  sender->send(1, 7, wire::encode(header), payload);
  const std::string error = errors.first(10s);
  EXPECT_NE(error.find("its header says 16 bytes, the message carries 8"), std::string::npos)
      << error;
}

// The inbox's limits (actors/packet_message.h) stop a packet larger than this node will hold
// before it allocates anything; the error names the node, sender and channel like any other.
TEST_F(PacketInboxTest, APacketAboveTheInboxLimitIsANamedError) {
  inbox = std::make_shared<PacketInbox>(1, PacketLimits{.max_bytes = 15});
  inbox->add(7, caf::actor{*receiver});
  send_packet(*sender, 1, 7,
              Packet{.group = 0, .step = 0, .done = false, .tensors = {{"x", Tensor::zeros({4})}}});
  const std::string error = errors.first(10s);
  EXPECT_NE(error.find("node 1: a packet from node 0 on channel 7: a packet of 16 bytes, more "
                       "than the 15 one packet may hold"),
            std::string::npos)
      << error;
}

}  // namespace
}  // namespace libai::actors
