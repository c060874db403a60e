// A packet is what travels between pipeline stages: one work item (a group of sequences at
// one decoding step, or one micro-batch of an encoding job) and its named tensors.
//
//   Packet p{.group = 2, .step = 5, .tensors = {{"hidden_states", h}, {"attention_mask", m}}};
//   PackedPacket wire = pack(p, tag);        // Cap'n Proto header + one contiguous byte tensor
//   // ... the header goes over the control plane, wire.bytes over UCX ...
//   Tensor buffer = buffer_for(wire.header); // the receiver's buffer, sized from the header
//   Packet back = unpack(wire.header, buffer);
//
// In one process a packet moves by pointer (PacketPtr) and is never copied.
#pragma once

#include <memory>

#include "actors/wire/wire.h"
#include "models/model.h"

namespace libai::actors {

// Training packets (actors/train_stage_actor.h) use `group` for the micro-batch and `step` for
// the training step, and say which way they flow and which model chunk receives them.
struct Packet {
  int group = 0;
  int step = 0;
  bool done = false;  // the group has finished: no tensors; stages drop it from later steps
  models::TensorMap tensors;
  bool gradient = false;  // training: an input gradient flowing upstream (else an activation)
  int chunk = 0;          // training: the receiving stage's model chunk (virtual stage)
};
using PacketPtr = std::shared_ptr<const Packet>;

struct PackedPacket {
  wire::PacketHeader header;
  Tensor bytes;  // u8, every tensor's bytes concatenated in header order (CPU)
};

PackedPacket pack(const Packet& packet, std::uint32_t tag);
Tensor buffer_for(const wire::PacketHeader& header);
Packet unpack(const wire::PacketHeader& header, const Tensor& bytes);

// "group 3 step 7" (or "group 3 step 7 (done)"), as logs and errors name work items.
std::string describe(const Packet& packet);

}  // namespace libai::actors
