#include "schedule/program.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <unordered_map>

#include "runtime/error.h"
#include "schedule/program_index.h"

namespace libai::schedule {
namespace {

void check_sizes(int stages, int micro_batches) {
  LIBAI_CHECK(stages >= 1, "a pipeline needs at least one stage, got ", stages);
  LIBAI_CHECK(micro_batches >= 1, "a pipeline needs at least one micro-batch, got ", micro_batches);
}

}  // namespace

PipelineProgram inference_forward(int num_stages, int num_micro_batches) {
  check_sizes(num_stages, num_micro_batches);
  PipelineProgram out(static_cast<size_t>(num_stages));
  for (auto& stage : out)
    for (int m = 0; m < num_micro_batches; ++m) stage.push_back({ActionKind::forward, m});
  return out;
}

PipelineProgram gpipe(int num_stages, int num_micro_batches) {
  PipelineProgram out = inference_forward(num_stages, num_micro_batches);
  for (auto& stage : out)
    for (int m = 0; m < num_micro_batches; ++m) stage.push_back({ActionKind::backward, m});
  return out;
}

PipelineProgram one_f_one_b(int num_stages, int num_micro_batches) {
  check_sizes(num_stages, num_micro_batches);
  PipelineProgram out(static_cast<size_t>(num_stages));
  for (int s = 0; s < num_stages; ++s) {
    int warmup = std::min(num_stages - 1 - s, num_micro_batches);
    int next_forward = 0, next_backward = 0;
    auto& program = out[size_t(s)];
    for (; next_forward < warmup; ++next_forward)
      program.push_back({ActionKind::forward, next_forward});
    while (next_backward < num_micro_batches) {
      if (next_forward < num_micro_batches)
        program.push_back({ActionKind::forward, next_forward++});
      program.push_back({ActionKind::backward, next_backward++});
    }
  }
  return out;
}

PipelineProgram decode_program(int num_stages, int num_groups, int num_steps) {
  LIBAI_CHECK(num_stages >= 1, "a pipeline needs at least one stage, got ", num_stages);
  LIBAI_CHECK(num_groups >= 1, "decoding needs at least one group of sequences, got ", num_groups);
  LIBAI_CHECK(num_steps >= 1, "decoding needs at least one step (the prefill), got ", num_steps);
  PipelineProgram out(static_cast<size_t>(num_stages));
  for (auto& stage : out)
    for (int t = 0; t < num_steps; ++t)
      for (int g = 0; g < num_groups; ++g) stage.push_back({ActionKind::forward, g, t});
  return out;
}

std::string to_string(const Action& action, bool show_step) {
  std::string out(1, action.kind == ActionKind::forward ? 'F' : 'B');
  out += std::to_string(action.micro_batch);
  if (show_step || action.step != 0) {
    out += '.';
    out += std::to_string(action.step);
  }
  return out;
}

std::string to_string(const PipelineProgram& program) {
  bool steps = false;
  for (const auto& stage : program)
    for (const Action& a : stage) steps |= a.step != 0;
  std::string out;
  for (size_t s = 0; s < program.size(); ++s) {
    out += "stage ";
    out += std::to_string(s);
    out += ':';
    for (const Action& a : program[s]) {
      out += ' ';
      out += to_string(a, steps);
    }
    out += "\n";
  }
  return out;
}

std::vector<int> peak_stashed_activations(const PipelineProgram& program) {
  std::vector<int> peak;
  for (const auto& stage : program) {
    int live = 0, best = 0;
    bool has_backward = false;
    for (const Action& a : stage) has_backward |= a.kind == ActionKind::backward;
    for (const Action& a : stage) {
      live += a.kind == ActionKind::forward ? 1 : -1;
      best = std::max(best, live);
    }
    peak.push_back(has_backward ? best : std::min(best, 1));
  }
  return peak;
}

namespace detail {

ProgramIndex index_program(const PipelineProgram& program) {
  const int S = int(program.size());
  LIBAI_CHECK(S >= 1, "empty pipeline program");
  auto key = [](const Action& a) {
    return (std::uint64_t(std::uint32_t(a.micro_batch)) << 32) | std::uint32_t(a.step);
  };
  ProgramIndex index;
  index.num_stages = S;
  std::unordered_map<std::uint64_t, int> item_of;
  for (const Action& a : program[0]) {
    LIBAI_CHECK(a.micro_batch >= 0 && a.step >= 0, "stage 0 runs ", to_string(a),
                ": micro-batches and steps count from 0");
    if (a.kind == ActionKind::forward && item_of.emplace(key(a), index.num_items()).second)
      index.items.push_back(a);
  }
  const int K = index.num_items();
  index.item_at.resize(size_t(S));
  index.forward_at.assign(size_t(S), std::vector<int>(size_t(K), -1));
  index.backward_at.assign(size_t(S), std::vector<int>(size_t(K), -1));
  for (int s = 0; s < S; ++s) {
    const StageProgram& stage = program[size_t(s)];
    auto& forward_at = index.forward_at[size_t(s)];
    auto& backward_at = index.backward_at[size_t(s)];
    for (size_t i = 0; i < stage.size(); ++i) {
      const Action& a = stage[i];
      LIBAI_CHECK(a.micro_batch >= 0 && a.step >= 0, "stage ", s, " runs ", to_string(a),
                  ": micro-batches and steps count from 0");
      auto it = item_of.find(key(a));
      if (a.kind == ActionKind::forward) {
        LIBAI_CHECK(it != item_of.end(), "stage ", s,
                    " forwards another set of micro-batches than stage 0 (stage 0 never runs ",
                    to_string(a), ")");
        LIBAI_CHECK(forward_at[size_t(it->second)] < 0, "stage ", s, " runs ", to_string(a),
                    " twice");
        forward_at[size_t(it->second)] = int(i);
      } else {
        LIBAI_CHECK(it != item_of.end() && forward_at[size_t(it->second)] >= 0, "stage ", s,
                    " runs ", to_string(a), " before its forward");
        LIBAI_CHECK(backward_at[size_t(it->second)] < 0, "stage ", s, " runs ", to_string(a),
                    " twice");
        backward_at[size_t(it->second)] = int(i);
      }
      index.item_at[size_t(s)].push_back(it->second);
    }
    for (int k = 0; k < K; ++k)
      LIBAI_CHECK(forward_at[size_t(k)] >= 0, "stage ", s,
                  " forwards another set of micro-batches than stage 0 (it never runs ",
                  to_string(index.items[size_t(k)]), ")");
  }
  index.has_backward.assign(size_t(K), 0);
  for (int k = 0; k < K; ++k) {
    const bool first = index.backward_at[0][size_t(k)] >= 0;
    index.has_backward[size_t(k)] = first;
    for (int s = 1; s < S; ++s) {
      Action b = index.items[size_t(k)];
      b.kind = ActionKind::backward;
      LIBAI_CHECK((index.backward_at[size_t(s)][size_t(k)] >= 0) == first, "stage ", s,
                  (first ? " never runs " : " runs "), to_string(b), " but stage 0 ",
                  (first ? "does" : "does not"),
                  ": every stage runs the backward of the same micro-batches");
    }
  }
  index.previous_step.assign(size_t(K), -1);
  for (int k = 0; k < K; ++k) {
    Action a = index.items[size_t(k)];
    if (a.step == 0) continue;
    Action before = a;
    before.step -= 1;
    auto it = item_of.find(key(before));
    LIBAI_CHECK(it != item_of.end(), "the program runs ", to_string(a), " but no stage runs ",
                to_string(before, true), ": a group's step needs the token of its step before");
    index.previous_step[size_t(k)] = it->second;
  }
  return index;
}

}  // namespace detail

std::vector<int> buffer_quota(const PipelineProgram& program) {
  const detail::ProgramIndex index = detail::index_program(program);
  const int S = index.num_stages, K = index.num_items();
  // held[s]: the most inputs stage s holds at once by its own program order (an input is
  // held from its forward until its backward, or through its forward when it has none).
  std::vector<int> held(size_t(S), 0);
  for (int s = 0; s < S; ++s) {
    int live = 0;
    for (size_t i = 0; i < program[size_t(s)].size(); ++i) {
      const Action& a = program[size_t(s)][i];
      const int item = index.item_at[size_t(s)][i];
      if (a.kind == ActionKind::forward) {
        held[size_t(s)] = std::max(held[size_t(s)], ++live);
        if (!index.has_backward[size_t(item)]) --live;
      } else {
        --live;
      }
    }
  }
  std::vector<int> quota = std::vector<int>(size_t(S));
  quota[0] = std::max(1, held[0]);
  for (int s = 1; s < S; ++s) {
    // One more than the stage holds (the next input arrives while it computes), and no less
    // than its producer may send ahead by its own order: the producer holds an input until
    // its backward, which waits for this stage's backward of the same micro-batch.
    int q = std::max(held[size_t(s) - 1], held[size_t(s)] + 1);
    quota[size_t(s)] = std::max(1, std::min(q, K));
  }
  return quota;
}

std::string render_timeline(const Timeline& timeline, int num_stages, int width) {
  std::vector<std::string> rows(static_cast<size_t>(num_stages),
                                std::string(static_cast<size_t>(width), '.'));
  const double scale = timeline.step_time > 0 ? double(width) / timeline.step_time : 0.0;
  for (const auto& e : timeline.events) {
    int from = std::min(width - 1, int(e.start * scale));
    int to = std::max(from + 1, std::min(width, int(e.end * scale + 0.5)));
    char mark = e.action.kind == ActionKind::forward ? char('0' + e.action.micro_batch % 10)
                                                     : char('a' + e.action.micro_batch % 26);
    for (int c = from; c < to; ++c) rows[size_t(e.stage)][size_t(c)] = mark;
  }
  std::string out;
  for (int s = 0; s < num_stages; ++s) {
    char label[64];
    std::snprintf(label, sizeof label, "stage %d |", s);
    const double used = s < int(timeline.utilisation.size()) ? timeline.utilisation[size_t(s)] : 0;
    out += label + rows[size_t(s)] + str_cat("| ", int(used * 100 + 0.5), "% busy\n");
  }
  return out;
}

}  // namespace libai::schedule
