// A packet is what travels between pipeline stages: one work item (a group of sequences at
// one decoding step, or one micro-batch of an encoding job) and its named tensors.
//
//   Packet p{.group = 2, .step = 5, .tensors = {{"hidden_states", h}, {"attention_mask", m}}};
//
// In one process a packet moves by pointer (PacketPtr) and is never copied; between processes
// its header and its tensors' bytes travel as one message on the message plane
// (actors/packet_inbox.h), and the receiving node's inbox rebuilds it.
#pragma once

#include <memory>

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

// "group 3 step 7" (or "group 3 step 7 (done)"), as logs and errors name work items.
std::string describe(const Packet& packet);

}  // namespace libai::actors
