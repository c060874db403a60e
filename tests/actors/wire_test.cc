// Control messages round-trip through real Cap'n Proto bytes, and bytes from a broken or
// hostile peer become CorruptInput, never a crash or a wild read.
#include "actors/wire/wire.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace libai::wire {
namespace {

JoinRequest sample_join() {
  JoinRequest m{7,
                "cluster-token",
                "node7.example",
                {{"cpu:0", 371.5, 18.25, 8ull << 30}, {"cuda:0", 60000.0, 3300.0, 80ull << 30}}};
  m.control_rtt_seconds = 0.0004;
  m.host_key = "boot 1234 ipc 4026531839 pid 4026531836";
  m.control_bandwidth_gbs = 1.25;
  return m;
}

TEST(Wire, JoinRequestRoundTrips) {
  const JoinRequest in = sample_join();
  EXPECT_EQ(decode<JoinRequest>(encode(in)), in);
}

TEST(Wire, JoinReplyRoundTrips) {
  const JoinReply refused{false, "wrong cluster token from node 3"};
  EXPECT_EQ(decode<JoinReply>(encode(refused)), refused);
  const JoinReply accepted{true, ""};
  EXPECT_EQ(decode<JoinReply>(encode(accepted)), accepted);
}

TEST(Wire, DeviceProfileRoundTrips) {
  DeviceProfile in{"cpu:1", 104.0, 12.5, 1ull << 33, 0.0021};
  EXPECT_EQ(decode<DeviceProfile>(encode(in)), in);
  in.timings = {{"f32", 0.002, 0.0005}, {"q4:32", 0.001, 0.0001}};
  EXPECT_EQ(decode<DeviceProfile>(encode(in)), in);
}

TEST(Wire, TensorHeaderRoundTrips) {
  const TensorHeader in{DType::bf16, {4, 1024, 768}, 4ull * 1024 * 768 * 2, 0xabcdef0123ull};
  EXPECT_EQ(decode<TensorHeader>(encode(in)), in);
  const TensorHeader scalar{DType::i64, {}, 8, 1};
  EXPECT_EQ(decode<TensorHeader>(encode(scalar)), scalar);
}

TEST(Wire, DecodesFromUnalignedBytes) {
  const Bytes bytes = encode(sample_join());
  std::vector<std::uint8_t> shifted(bytes.size() + 1);
  std::copy(bytes.begin(), bytes.end(), shifted.begin() + 1);
  EXPECT_EQ(decode<JoinRequest>(std::span(shifted).subspan(1)), sample_join());
}

TEST(Wire, TensorHeaderThatLiesAboutItsSizeIsCorrupt) {
  EXPECT_THROW(decode<TensorHeader>(encode(TensorHeader{DType::f32, {2, 3}, 25, 1})), CorruptInput);
  EXPECT_THROW(decode<TensorHeader>(encode(TensorHeader{DType::f32, {-2, 3}, 24, 1})),
               CorruptInput);
  EXPECT_THROW(decode<TensorHeader>(encode(TensorHeader{DType::f32, {1ll << 40, 1ll << 40}, 0, 1})),
               CorruptInput);
}

// Note [Bounded tensor headers]: each of these passed the old `bytes == numel * size` check
// (in unsigned 64-bit arithmetic) and made the receiver's Tensor::empty overflow int64.
TEST(Wire, TensorHeaderBeyondWhatATensorCanHoldIsCorrupt) {
  auto refused = [](TensorHeader h, const std::string& why) {
    try {
      (void)decode<TensorHeader>(encode(h));
      ADD_FAILURE() << "accepted " << dtype_name(h.dtype) << " " << str_cat(h.shape);
    } catch (const CorruptInput& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  // 2^63 elements: fits uint64, not int64.
  refused(TensorHeader{DType::u8, {1ll << 62, 2}, 1ull << 63, 0}, "exceeds");
  // No bytes at all, but the first stride is 2^80.
  refused(TensorHeader{DType::f32, {0, 1ll << 40, 1ll << 40}, 0, 0}, "exceeds");
  // Just above the bound, and a rank no tensor has.
  refused(TensorHeader{DType::u8, {int64_t(kMaxTensorBytes) + 1}, kMaxTensorBytes + 1, 0}, "exceeds");
  refused(TensorHeader{DType::u8, std::vector<std::int64_t>(kMaxTensorRank + 1, 1), 1, 0}, "rank");
  // At the bounds, and empty tensors of reasonable shape, are fine.
  const TensorHeader largest{DType::u8, {int64_t(kMaxTensorBytes)}, kMaxTensorBytes, 0};
  EXPECT_EQ(decode<TensorHeader>(encode(largest)), largest);
  const TensorHeader empty{DType::f64, {0, 1 << 20, 7}, 0, 0};
  EXPECT_EQ(decode<TensorHeader>(encode(empty)), empty);
  const TensorHeader ranked{DType::f32, std::vector<std::int64_t>(kMaxTensorRank, 1), 4, 0};
  EXPECT_EQ(decode<TensorHeader>(encode(ranked)), ranked);
}

// Note [Amplified lists]: 32 bytes that claim a list of 100000 zero-sized structs (a root whose
// one pointer is a composite list, its tag counting the elements) decoded to 100000 empty
// stages, allocated from a few dozen bytes. The lists are now bounded by the message's size.
TEST(Wire, AmplifiedListsAreCorrupt) {
  const std::uint64_t words[] = {
      std::uint64_t(3) << 32,                        // segment table: one segment of 3 words
      std::uint64_t(1) << 48,                        // root: struct, no data, one pointer
      1 | (std::uint64_t(7) << 32),                  // pointer 0: composite list, no words
      std::uint64_t(100000) << 2,                    // its tag: 100000 elements of no size
  };
  Bytes bytes(sizeof words);
  std::memcpy(bytes.data(), words, sizeof words);
  try {
    const Heartbeat decoded = decode<Heartbeat>(bytes);
    ADD_FAILURE() << "decoded " << decoded.stages.size() << " stages from 32 bytes";
  } catch (const CorruptInput& e) {
    EXPECT_NE(std::string(e.what()).find("a list of 100000 stages cannot fit"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(decode<PacketHeader>(bytes), CorruptInput);
  EXPECT_THROW(decode<JoinRequest>(bytes), CorruptInput);
  EXPECT_THROW(decode<StepSummary>(bytes), CorruptInput);
}

TEST(Wire, EmptyAndRaggedBytesAreCorrupt) {
  EXPECT_THROW(decode<JoinRequest>(Bytes{}), CorruptInput);
  Bytes bytes = encode(sample_join());
  bytes.push_back(0);
  EXPECT_THROW(decode<JoinRequest>(bytes), CorruptInput);
}

TEST(Wire, EveryTruncationIsCorrupt) {
  const Bytes bytes = encode(sample_join());
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_THROW(decode<JoinRequest>(std::span(bytes).first(n)), CorruptInput) << "kept " << n;
  }
}

TEST(Wire, TrailingBytesAreCorrupt) {
  Bytes bytes = encode(JoinReply{true, "ok"});
  bytes.resize(bytes.size() + 16, 0);
  EXPECT_THROW(decode<JoinReply>(bytes), CorruptInput);
}

TEST(Wire, GarbageIsCorrupt) {
  const Bytes all_ones(64, 0xff);  // segment count 2^32: no such message
  EXPECT_THROW(decode<JoinRequest>(all_ones), CorruptInput);
  // One segment of 4 words whose root pointer points far outside it.
  Bytes wild(40, 0);
  wild[4] = 4;
  const std::uint64_t far_struct = (std::uint64_t{1} << 32) | (std::uint64_t{0x7ffffff} << 2);
  std::memcpy(wild.data() + 8, &far_struct, 8);
  EXPECT_THROW(decode<JoinRequest>(wild), CorruptInput);
}

// The traversal limit bounds the work a peer's message can cause: a message larger than the
// limit is refused instead of read.
TEST(Wire, TraversalLimitBoundsTheReader) {
  JoinRequest big = sample_join();
  big.devices.resize(256, DeviceProfile{"cpu:0", 1, 1, 1});
  const Bytes bytes = encode(big);
  EXPECT_EQ(decode<JoinRequest>(bytes), big);
  EXPECT_THROW(decode<JoinRequest>(bytes, ReadLimits{.traversal_limit_words = 256}), CorruptInput);
}

// Random bit flips: every outcome is either a decoded value or CorruptInput; anything else
// (another exception type, a crash under the sanitizers) fails.
TEST(Wire, RandomCorruptionNeverEscapesAsAnythingButCorruptInput) {
  const Bytes good = encode(sample_join());
  std::mt19937 rng(1234);
  int corrupt = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    Bytes bytes = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) bytes[rng() % bytes.size()] ^= std::uint8_t(1u << (rng() % 8));
    try {
      (void)decode<JoinRequest>(bytes);
    } catch (const CorruptInput&) {
      ++corrupt;
    }
  }
  EXPECT_GT(corrupt, 0);
}

PacketHeader sample_packet() {
  PacketHeader h;
  h.group = 3;
  h.step = 17;
  h.tensors = {{"hidden_states", {DType::f32, {2, 1, 48}, 2 * 48 * 4, 0}},
               {"attention_mask", {DType::boolean, {2, 18}, 36, 0}}};
  h.bytes = 2 * 48 * 4 + 36;
  return h;
}

TEST(Wire, PipelineMessagesRoundTrip) {
  EXPECT_EQ(decode<PacketHeader>(encode(sample_packet())), sample_packet());
  PacketHeader done{.group = 1, .step = 9, .done = true, .tensors = {}, .bytes = 0};
  EXPECT_EQ(decode<PacketHeader>(encode(done)), done);
  EXPECT_EQ(decode<Credit>(encode(Credit{2})), Credit{2});
  EXPECT_EQ(decode<Credit>(encode(Credit{1, 3})), (Credit{1, 3}));
  PacketHeader gradient = sample_packet();
  gradient.gradient = true;
  gradient.chunk = 2;
  EXPECT_EQ(decode<PacketHeader>(encode(gradient)), gradient);
  const StepSummary summary{2.5, 8, 0.75, true, {{"forwards", 8}, {"tokens", 1024}}};
  EXPECT_EQ(decode<StepSummary>(encode(summary)), summary);
  const Abort abort{"node 2 died (stage 2)", 0};
  EXPECT_EQ(decode<Abort>(encode(abort)), abort);
  Assignment a{"job: {_target_: generate}\n", {0, 0, 1, 1}, {1, 0}, 40123, {{"node0:cpu:0", 90, 15, 1ull << 33}}};
  a.transport = "shm";
  a.inter_node_bandwidth_gbs = 1.5;
  EXPECT_EQ(decode<Assignment>(encode(a)), a);
  const StageReport r{"stage 1 (dp 0, tp 1)", 1, 0.25, 52, 1 << 20};
  EXPECT_EQ(decode<StageReport>(encode(r)), r);
  const Heartbeat beat{41,
                       2,
                       {{"stage 2", 12, "computing g5s0", 0.25, "", 0},
                        {"stage 3", 7, "", 0, "a credit from stage 4", 1.5}}};
  EXPECT_EQ(decode<Heartbeat>(encode(beat)), beat);
  EXPECT_EQ(decode<Heartbeat>(encode(Heartbeat{})), Heartbeat{});
  const TrainControl save{
      TrainControlKind::save, "/out", "model_0000100", 3, 100, 400, 2.5, true, 7};
  EXPECT_EQ(decode<TrainControl>(encode(save)), save);
  const TrainControl evaluate{.kind = TrainControlKind::evaluate};
  EXPECT_EQ(decode<TrainControl>(encode(evaluate)), evaluate);
}

// A packet header that lies about its bytes would make the receiver read past its buffer or
// mis-slice the tensors: each lie is refused by name.
TEST(Wire, PacketHeadersThatLieAreRefused) {
  auto refused = [](PacketHeader h, const std::string& why) {
    try {
      (void)decode<PacketHeader>(encode(h));
      ADD_FAILURE() << "accepted: " << why;
    } catch (const CorruptInput& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  PacketHeader total = sample_packet();
  total.bytes += 1;
  refused(total, "tensors hold");
  PacketHeader tensor = sample_packet();
  tensor.tensors[0].header.bytes = 8;
  refused(tensor, "needs");
  PacketHeader negative = sample_packet();
  negative.tensors[1].header.shape = {-2, 18};
  negative.tensors[1].header.bytes = 0;
  refused(negative, "negative dimension");
  PacketHeader done = sample_packet();
  done.done = true;
  refused(done, "a done packet carries tensors");
  EXPECT_THROW(decode<Credit>(encode(Credit{0})), CorruptInput);
}

TEST(Wire, RandomCorruptionOfPacketHeadersIsCorruptInput) {
  const Bytes good = encode(sample_packet());
  std::mt19937 rng(99);
  for (int trial = 0; trial < 2000; ++trial) {
    Bytes bytes = good;
    bytes[rng() % bytes.size()] ^= std::uint8_t(1u << (rng() % 8));
    try {
      const PacketHeader h = decode<PacketHeader>(bytes);
      std::uint64_t sum = 0;
      for (const auto& t : h.tensors) sum += t.header.bytes;
      EXPECT_EQ(sum, h.bytes);  // whatever decodes is consistent
    } catch (const CorruptInput&) {
    }
  }
}

}  // namespace
}  // namespace libai::wire
