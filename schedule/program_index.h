// Internal to schedule/: a validated pipeline program with its actions numbered, so that the
// simulator and the quota computation look dependencies up by index, not by search.
#pragma once

#include <vector>

#include "schedule/program.h"

namespace libai::schedule::detail {

struct ProgramIndex {
  int num_stages = 0;
  // Items are the (micro_batch, step) pairs the stages forward, numbered in stage 0's order.
  std::vector<Action> items;                  // forward actions, by item
  std::vector<std::vector<int>> item_at;      // [stage][position] -> item
  std::vector<std::vector<int>> forward_at;   // [stage][item] -> position
  std::vector<std::vector<int>> backward_at;  // [stage][item] -> position or -1
  std::vector<int> previous_step;             // [item] -> item of the step before, or -1
  std::vector<char> has_backward;             // [item]: every stage runs its backward
  int num_items() const { return int(items.size()); }
};

// Throws InvalidArgument for a malformed program (see simulate()).
ProgramIndex index_program(const PipelineProgram& program);

}  // namespace libai::schedule::detail
