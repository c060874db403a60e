#include "schedule/program.h"

#include <algorithm>
#include <map>
#include <set>

#include "runtime/error.h"

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

std::string to_string(const Action& action) {
  std::string out(1, action.kind == ActionKind::forward ? 'F' : 'B');
  out += std::to_string(action.micro_batch);
  return out;
}

std::string to_string(const PipelineProgram& program) {
  std::string out;
  for (size_t s = 0; s < program.size(); ++s) {
    out += "stage ";
    out += std::to_string(s);
    out += ':';
    for (const Action& a : program[s]) {
      out += ' ';
      out += to_string(a);
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

namespace {

void validate_programs(const PipelineProgram& program) {
  const int S = int(program.size());
  LIBAI_CHECK(S >= 1, "empty pipeline program");
  std::set<int> reference;
  for (const Action& a : program[0])
    if (a.kind == ActionKind::forward) reference.insert(a.micro_batch);
  for (int s = 0; s < S; ++s) {
    std::set<std::pair<int, int>> seen;
    std::set<int> forwards;
    for (const Action& a : program[size_t(s)]) {
      LIBAI_CHECK(seen.insert({int(a.kind), a.micro_batch}).second, "stage ", s, " runs ",
                  to_string(a), " twice");
      if (a.kind == ActionKind::forward)
        forwards.insert(a.micro_batch);
      else
        LIBAI_CHECK(forwards.count(a.micro_batch), "stage ", s, " runs ", to_string(a),
                    " before its forward");
    }
    LIBAI_CHECK(forwards == reference, "stage ", s,
                " forwards another set of micro-batches than stage 0");
  }
}

}  // namespace

Timeline simulate(const PipelineProgram& program, const StageCosts& costs) {
  validate_programs(program);
  const int S = int(program.size());
  LIBAI_CHECK(int(costs.forward.size()) == S, "costs give ", costs.forward.size(),
              " forward times for ", S, " stages");
  bool any_backward = false;
  for (const auto& p : program)
    for (const Action& a : p) any_backward |= a.kind == ActionKind::backward;
  LIBAI_CHECK(!any_backward || int(costs.backward.size()) == S, "costs give ",
              costs.backward.size(), " backward times for ", S, " stages");
  // done[(stage, kind, micro_batch)] = finish time.
  std::map<std::tuple<int, int, int>, double> done;
  std::vector<size_t> next(static_cast<size_t>(S), 0);
  std::vector<double> free_at(static_cast<size_t>(S), 0.0);
  Timeline t;
  t.busy.assign(static_cast<size_t>(S), 0.0);
  // Dependencies of an action, as (stage, kind, micro_batch) and the transfer it needs.
  auto ready_time = [&](int s, const Action& a, double& when) {
    when = free_at[size_t(s)];
    auto need = [&](int stage, ActionKind kind, double transfer) {
      auto it = done.find({stage, int(kind), a.micro_batch});
      if (it == done.end()) return false;
      when = std::max(when, it->second + transfer);
      return true;
    };
    if (a.kind == ActionKind::forward)
      return s == 0 || need(s - 1, ActionKind::forward, costs.transfer);
    if (!need(s, ActionKind::forward, 0.0)) return false;
    return s == S - 1 || need(s + 1, ActionKind::backward, costs.transfer);
  };
  size_t remaining = 0;
  for (const auto& p : program) remaining += p.size();
  while (remaining > 0) {
    // Run the stage whose next action can start earliest (ties: lower stage).
    int pick = -1;
    double best = 0;
    for (int s = 0; s < S; ++s) {
      if (next[size_t(s)] >= program[size_t(s)].size()) continue;
      double when;
      if (ready_time(s, program[size_t(s)][next[size_t(s)]], when) && (pick < 0 || when < best)) {
        pick = s;
        best = when;
      }
    }
    if (pick < 0) {
      std::string blocked;
      for (int s = 0; s < S; ++s)
        if (next[size_t(s)] < program[size_t(s)].size())
          blocked += str_cat(blocked.empty() ? "" : ", ", "stage ", s, " at ",
                             to_string(program[size_t(s)][next[size_t(s)]]));
      LIBAI_THROW(InvalidArgument, "pipeline program deadlocks: ", blocked,
                  " wait for inputs that are never produced");
    }
    const Action& a = program[size_t(pick)][next[size_t(pick)]++];
    double duration =
        a.kind == ActionKind::forward ? costs.forward[size_t(pick)] : costs.backward[size_t(pick)];
    double end = best + duration;
    done[{pick, int(a.kind), a.micro_batch}] = end;
    free_at[size_t(pick)] = end;
    t.busy[size_t(pick)] += duration;
    t.events.push_back({pick, a, best, end});
    t.step_time = std::max(t.step_time, end);
    --remaining;
  }
  std::sort(t.events.begin(), t.events.end(),
            [](const TimelineEvent& x, const TimelineEvent& y) { return x.start < y.start; });
  for (double b : t.busy) t.utilisation.push_back(t.step_time > 0 ? b / t.step_time : 0.0);
  return t;
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
    out += label + rows[size_t(s)] +
           str_cat("| ", int(timeline.utilisation[size_t(s)] * 100 + 0.5), "% busy\n");
  }
  return out;
}

}  // namespace libai::schedule
