// Writes seed inputs for fuzz_control_messages and fuzz_packet_header: one encoded message of
// every type the cluster receives, in the framing each target reads (see their headers).
// Built and run by tools/run_fuzzers.sh, so the seeds follow the schema as it is now.
//
//   write_seeds <folder for fuzz_control_messages> <folder for fuzz_packet_header>
#include <cstdio>
#include <fstream>
#include <string>

#include "actors/wire/wire.h"

namespace {

using namespace libai::wire;

void write(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

// fuzz_control_messages: the type's selector byte, then the message.
void control(const std::string& folder, int selector, const std::string& name, Bytes message) {
  message.insert(message.begin(), std::uint8_t(selector));
  write(folder + "/" + name, message);
}

// fuzz_packet_header: [u16 header length][header][mode 1: truthful][payload].
void packet(const std::string& folder, const std::string& name, const PacketHeader& header) {
  const Bytes encoded = encode(header);
  Bytes input{std::uint8_t(encoded.size() & 255), std::uint8_t(encoded.size() >> 8)};
  input.insert(input.end(), encoded.begin(), encoded.end());
  input.push_back(1);
  for (std::uint64_t i = 0; i < header.bytes; ++i) input.push_back(std::uint8_t(i * 13 + 5));
  write(folder + "/" + name, input);
}

NamedTensor tensor(const std::string& name, libai::DType dtype, std::vector<std::int64_t> shape) {
  std::uint64_t bytes = libai::dtype_size(dtype);
  for (auto d : shape) bytes *= std::uint64_t(d);
  return {name, TensorHeader{dtype, std::move(shape), bytes, 0}};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: write_seeds <control folder> <packet folder>\n");
    return 2;
  }
  const std::string c = argv[1];
  const DeviceProfile cpu{"cpu:0", 120.5, 30.25, 1ull << 34, 0.002, 0.0001};
  control(c, 0, "join", encode(JoinRequest{1, "s3cret", "node1", {cpu, cpu}, 0.0004, "host-a"}));
  control(c, 1, "join_reply", encode(JoinReply{false, "token mismatch"}));
  control(c, 2, "tensor", encode(TensorHeader{libai::DType::bf16, {2, 3, 4}, 48, 9}));
  control(c, 3, "device", encode(cpu));
  PacketHeader p{3,
                 7,
                 false,
                 {tensor("hidden_states", libai::DType::f32, {2, 3}),
                  tensor("attention_mask", libai::DType::i64, {2})},
                 0,
                 false,
                 0};
  p.bytes = 24 + 16;
  control(c, 4, "packet", encode(p));
  control(c, 5, "credit", encode(Credit{2, 0}));
  control(c, 6, "abort", encode(Abort{"node 2 died", 2}));
  control(
      c, 7, "assignment",
      encode(Assignment{
          "model:\n  name: gpt2\n", {0, 0, 1, 1}, {0, 1}, 4242, {cpu, cpu}, 1e-5, 4e-4, "shm"}));
  control(c, 8, "report", encode(StageReport{"stage 1", 1, 2.5, 40, 1 << 20}));
  control(c, 9, "summary", encode(StepSummary{3.5, 8, 1.25, false, {{"lr", 1e-4}, {"mfu", 0.3}}}));
  control(c, 10, "train_control",
          encode(TrainControl{TrainControlKind::save, "out", "model_0000100", 3, 100, 800, 0.5,
                              true, 42}));
  control(c, 11, "heartbeat",
          encode(Heartbeat{5,
                           1,
                           {{"stage 1", 14, "computing F3 s0", 0.2, "", 0},
                            {"stage 2", 12, "", 0, "g5s0 from stage 1", 0.1}}}));

  const std::string k = argv[2];
  packet(k, "two_tensors", p);
  PacketHeader training{1, 2, false, {tensor("grad", libai::DType::bf16, {4, 1, 3})}, 24, true, 1};
  packet(k, "gradient", training);
  packet(k, "done", PacketHeader{4, 9, true, {}, 0, false, 0});
  PacketHeader empty{0, 0, false, {tensor("e", libai::DType::u8, {0, 5})}, 0, false, 0};
  packet(k, "empty_tensor", empty);
  return 0;
}
