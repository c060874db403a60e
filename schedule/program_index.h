// Internal to schedule/: a validated pipeline program with its actions numbered, so that the
// simulator and the quota computation look dependencies up by index, not by search.
//
// Programs are per device; an action's virtual stage is chunk * devices + device (one chunk
// per device outside interleaved programs: virtual stage = device). Data flows along virtual
// stages: forward k after forward k - 1, backward k after backward k + 1 (and after forward
// k), whichever devices run them.
#pragma once

#include <string>
#include <vector>

#include "schedule/program.h"

namespace libai::schedule::detail {

struct ProgramIndex {
  int num_stages = 0;  // devices (programs)
  int num_chunks = 1;  // virtual stages per device
  // Items are the (micro_batch, step) pairs the stages forward, numbered in the order virtual
  // stage 0 runs them.
  std::vector<Action> items;                  // forward actions (chunk 0), by item
  std::vector<std::vector<int>> item_at;      // [device][position] -> item
  std::vector<std::vector<int>> forward_at;   // [virtual stage][item] -> position on its device
  std::vector<std::vector<int>> backward_at;  // [virtual stage][item] -> position or -1
  std::vector<int> previous_step;             // [item] -> item of the step before, or -1
  std::vector<char> has_backward;             // [item]: every stage runs its backward
  int num_items() const { return int(items.size()); }
  int num_virtual() const { return num_stages * num_chunks; }
  int device_of(int virtual_stage) const { return virtual_stage % num_stages; }
  int virtual_of(int device, const Action& a) const { return a.chunk * num_stages + device; }
  // "stage 3", or "device 1 chunk 2" in an interleaved program.
  std::string where(int virtual_stage) const;
};

// Throws InvalidArgument for a malformed program (see simulate()).
ProgramIndex index_program(const PipelineProgram& program);

}  // namespace libai::schedule::detail
