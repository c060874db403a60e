// The discrete-event replay behind simulate(): see Note [Input slots and credits] in
// program.h for what a slot is and when it is taken and freed.
#include <algorithm>
#include <cmath>
#include <queue>
#include <tuple>

#include "runtime/error.h"
#include "schedule/program.h"
#include "schedule/program_index.h"

namespace libai::schedule {
namespace {

constexpr double kNotDone = -1.0;

// Note [Replaying programs in time order]
// Devices are the only resource, each runs its program in order, and every input buffer (one
// per virtual stage, Note [Virtual stages]) has exactly one writer (virtual stage k - 1, or
// the driver for stage 0), so an action's start is the earliest time at which its device is
// free, its inputs have arrived and (for a forward) a slot is free downstream. Events are processed
// in time order: a stage that cannot start now is retried when what it waits for happens (an action
// ends, a slot frees) or at the future time an input arrives. Each action costs O(log n), so a
// thousand stages replay in milliseconds.
class Replay {
 public:
  Replay(const PipelineProgram& program, const StageCosts& costs, std::vector<int> quota)
      : program_(program),
        costs_(costs),
        index_(detail::index_program(program)),
        quota_(std::move(quota)) {
    S_ = index_.num_stages;
    V_ = index_.num_virtual();
    chunked_ = index_.num_chunks > 1;
    for (const Action& a : index_.items) show_steps_ |= a.step > 0;
    check_costs();
    end_.resize(size_t(S_));
    for (int s = 0; s < S_; ++s) end_[size_t(s)].assign(program[size_t(s)].size(), kNotDone);
    next_.assign(size_t(S_), 0);
    running_.assign(size_t(S_), false);
    wake_at_.assign(size_t(S_), -1.0);
    held_.assign(size_t(V_), 0);
    written_at_.assign(size_t(index_.num_items()), kNotDone);
    timeline_.busy.assign(size_t(S_), 0.0);
  }

  Timeline run() {
    size_t remaining = 0;
    for (const auto& p : program_) remaining += p.size();
    feed_stage_zero();
    for (int s = 0; s < S_; ++s) try_start(s);
    while (!events_.empty()) {
      const auto [time, seq, kind, stage] = events_.top();
      events_.pop();
      now_ = time;
      if (kind == kEnd) {
        finish(stage);
        --remaining;
      } else if (kind == kWakeDriver) {
        feed_stage_zero();
      } else {
        wake_at_[size_t(stage)] = -1.0;
        try_start(stage);
      }
    }
    if (remaining > 0) report_deadlock();
    std::stable_sort(timeline_.events.begin(), timeline_.events.end(),
                     [](const TimelineEvent& x, const TimelineEvent& y) {
                       return std::tie(x.start, x.stage) < std::tie(y.start, y.stage);
                     });
    for (double b : timeline_.busy)
      timeline_.utilisation.push_back(timeline_.step_time > 0 ? b / timeline_.step_time : 0.0);
    return std::move(timeline_);
  }

 private:
  enum EventKind { kEnd = 0, kWakeDriver = 1, kWakeStage = 2 };
  using Event = std::tuple<double, long, int, int>;  // time, sequence, kind, device

  std::string stages_named() const {
    return chunked_
               ? str_cat(V_, " virtual stages (", S_, " devices x ", index_.num_chunks, " chunks)")
               : str_cat(S_, " stages");
  }

  void check_costs() const {
    LIBAI_CHECK(int(costs_.forward.size()) == V_, "costs give ", costs_.forward.size(),
                " forward times for ", stages_named());
    bool any_backward = false, any_step = false;
    for (const Action& a : index_.items) any_step |= a.step > 0;
    for (char b : index_.has_backward) any_backward |= b != 0;
    LIBAI_CHECK(!any_backward || int(costs_.backward.size()) == V_, "costs give ",
                costs_.backward.size(), " backward times for ", stages_named());
    LIBAI_CHECK(!any_step || costs_.decode.empty() || int(costs_.decode.size()) == V_,
                "costs give ", costs_.decode.size(), " decode times for ", stages_named());
    auto non_negative = [](const std::vector<double>& v, const char* what) {
      for (size_t s = 0; s < v.size(); ++s)
        LIBAI_CHECK(v[s] >= 0 && std::isfinite(v[s]), "costs: ", what, " time of stage ", s, " is ",
                    v[s], "; expected a finite number of seconds >= 0");
    };
    non_negative(costs_.forward, "forward");
    non_negative(costs_.backward, "backward");
    non_negative(costs_.decode, "decode");
    LIBAI_CHECK(costs_.transfer >= 0 && std::isfinite(costs_.transfer), "costs: transfer time is ",
                costs_.transfer, "; expected a finite number of seconds >= 0");
    LIBAI_CHECK(costs_.sample >= 0 && std::isfinite(costs_.sample), "costs: sample time is ",
                costs_.sample, "; expected a finite number of seconds >= 0");
    LIBAI_CHECK(int(quota_.size()) == V_, "input quotas: ", quota_.size(), " given for ",
                stages_named());
    for (int v = 0; v < V_; ++v)
      LIBAI_CHECK(quota_[size_t(v)] >= 0, "input quota of ", index_.where(v), " is ",
                  quota_[size_t(v)], "; expected a number of slots >= 0");
  }

  std::string name(const Action& a) const { return to_string(a, show_steps_, chunked_); }
  // `a` as virtual stage v runs it.
  std::string name_on(Action a, int v) const {
    a.chunk = v / S_;
    return name(a);
  }
  std::string device_label(int s) const { return str_cat(chunked_ ? "device " : "stage ", s); }

  int device(int v) const { return index_.device_of(v); }
  double duration(int v, const Action& a) const {
    if (a.kind == ActionKind::backward) return costs_.backward[size_t(v)];
    if (a.step > 0 && !costs_.decode.empty()) return costs_.decode[size_t(v)];
    return costs_.forward[size_t(v)];
  }
  // Between two chunks of one device nothing moves.
  double hop(int from, int to) const { return device(from) == device(to) ? 0.0 : costs_.transfer; }
  double return_delay() const { return hop(V_ - 1, 0) + costs_.sample; }
  double end_of(int s, int position) const {
    return position < 0 ? kNotDone : end_[size_t(s)][size_t(position)];
  }
  double forward_end(int v, int item) const {
    return end_of(device(v), index_.forward_at[size_t(v)][size_t(item)]);
  }
  double backward_end(int v, int item) const {
    return end_of(device(v), index_.backward_at[size_t(v)][size_t(item)]);
  }
  // The position (on its device) of the action that frees the slot `item` takes in virtual
  // stage v's input buffer.
  int release_position(int v, int item) const {
    return index_.has_backward[size_t(item)] ? index_.backward_at[size_t(v)][size_t(item)]
                                             : index_.forward_at[size_t(v)][size_t(item)];
  }

  void push(double time, EventKind kind, int stage) {
    events_.emplace(time, sequence_++, int(kind), stage);
  }
  void wake(int s, double time) {
    if (wake_at_[size_t(s)] == time) return;
    wake_at_[size_t(s)] = time;
    push(time, kWakeStage, s);
  }

  // The driver writes virtual stage 0's inputs in its program order (items are numbered in
  // that order), each once it exists (a decoding step's token once the last stage has
  // produced it) and a slot is free.
  void feed_stage_zero() {
    bool wrote = false;
    while (fed_ < index_.num_items() && held_[0] < quota_[0]) {
      double ready = 0.0;
      if (const int before = index_.previous_step[size_t(fed_)]; before >= 0) {
        const double done = forward_end(V_ - 1, before);
        if (done == kNotDone) break;  // retried when the last stage finishes it
        ready = done + return_delay();
      }
      if (ready > now_) {
        if (driver_wake_at_ != ready) push(ready, kWakeDriver, 0);
        driver_wake_at_ = ready;
        break;
      }
      written_at_[size_t(fed_++)] = now_;
      ++held_[0];
      wrote = true;
    }
    if (wrote) try_start(0);
  }

  void try_start(int s) {
    if (running_[size_t(s)]) return;
    const size_t pos = next_[size_t(s)];
    if (pos >= program_[size_t(s)].size()) return;
    const Action& a = program_[size_t(s)][pos];
    const int item = index_.item_at[size_t(s)][pos], v = index_.virtual_of(s, a);
    double ready = 0.0;
    if (a.kind == ActionKind::forward) {
      if (v == 0) {
        if (item >= fed_) return;  // the driver calls again once it has written it
        ready = written_at_[size_t(item)];
      } else {
        const double done = forward_end(v - 1, item);
        if (done == kNotDone) return;
        ready = done + hop(v - 1, v);
      }
    } else if (v + 1 < V_) {
      const double done = backward_end(v + 1, item);
      if (done == kNotDone) return;
      ready = done + hop(v + 1, v);
    }
    if (ready > now_) {
      wake(s, ready);
      return;
    }
    const bool needs_slot = a.kind == ActionKind::forward && v + 1 < V_;
    if (needs_slot && held_[size_t(v) + 1] >= quota_[size_t(v) + 1]) return;
    if (needs_slot) ++held_[size_t(v) + 1];
    running_[size_t(s)] = true;
    const double d = duration(v, a);
    timeline_.events.push_back({s, a, now_, now_ + d});
    timeline_.busy[size_t(s)] += d;
    timeline_.step_time = std::max(timeline_.step_time, now_ + d);
    push(now_ + d, kEnd, s);
  }

  void finish(int s) {
    const size_t pos = next_[size_t(s)]++;
    running_[size_t(s)] = false;
    end_[size_t(s)][pos] = now_;
    const Action& a = program_[size_t(s)][pos];
    const int item = index_.item_at[size_t(s)][pos], v = index_.virtual_of(s, a);
    if (release_position(v, item) == int(pos)) {
      --held_[size_t(v)];
      if (v == 0)
        feed_stage_zero();
      else
        try_start(device(v - 1));
    }
    if (a.kind == ActionKind::forward) {
      if (v + 1 < V_) try_start(device(v + 1));
      if (v == V_ - 1) feed_stage_zero();  // a decoding token came back
    } else if (v > 0) {
      try_start(device(v - 1));
    }
    try_start(s);
  }

  // The items holding a slot of virtual stage v's input buffer: written (by the driver, or
  // by virtual stage v - 1 starting their forward) and not yet released.
  std::string held_by(int v) const {
    std::string out;
    int count = 0;
    for (int item = 0; item < index_.num_items(); ++item) {
      bool written;
      if (v == 0) {
        written = item < fed_;
      } else {
        const int producer = device(v - 1);
        const size_t p = size_t(index_.forward_at[size_t(v) - 1][size_t(item)]);
        written = p < next_[size_t(producer)] ||
                  (p == next_[size_t(producer)] && running_[size_t(producer)]);
      }
      if (!written || end_of(device(v), release_position(v, item)) != kNotDone) continue;
      if (++count > 4) continue;
      Action release = index_.items[size_t(item)];
      if (index_.has_backward[size_t(item)]) release.kind = ActionKind::backward;
      out += str_cat(count > 1 ? ", " : "", name_on(index_.items[size_t(item)], v), " until ",
                     index_.where(v), " finishes ", name_on(release, v));
    }
    if (count > 4) out += str_cat(" and ", count - 4, " more");
    return out;
  }

  std::string full_buffer(int v) const {
    if (quota_[size_t(v)] == 0) return str_cat(index_.where(v), "'s input quota is 0 slots");
    return str_cat(index_.where(v), "'s input buffer is full (quota ", quota_[size_t(v)],
                   quota_[size_t(v)] == 1 ? " slot" : " slots", ", held by ", held_by(v), ")");
  }

  std::string why_blocked(int s) const {
    const size_t pos = next_[size_t(s)];
    const Action& a = program_[size_t(s)][pos];
    const int item = index_.item_at[size_t(s)][pos], v = index_.virtual_of(s, a);
    const std::string what = str_cat(device_label(s), " at ", name(a), " waits for ");
    if (a.kind == ActionKind::forward && v == 0 && item >= fed_) {
      // Not yet written: the driver is stuck on input `fed_` (this one or an earlier one).
      const int before = index_.previous_step[size_t(fed_)];
      if (before >= 0 && forward_end(V_ - 1, before) == kNotDone)
        return what + str_cat("its input", fed_ == item ? "" : ", behind ",
                              fed_ == item ? "" : name(index_.items[size_t(fed_)]),
                              ", which needs the token of ",
                              name_on(index_.items[size_t(before)], V_ - 1), " from ",
                              index_.where(V_ - 1));
      return what + "its input: " + full_buffer(0);
    }
    if (a.kind == ActionKind::forward && v > 0 && forward_end(v - 1, item) == kNotDone)
      return what + str_cat(name_on(a, v - 1), " from ", index_.where(v - 1));
    if (a.kind == ActionKind::backward && v + 1 < V_ && backward_end(v + 1, item) == kNotDone)
      return what + str_cat(name_on(a, v + 1), " from ", index_.where(v + 1));
    return what + "a free slot: " + full_buffer(v + 1);
  }

  [[noreturn]] void report_deadlock() const {
    std::string stages, reasons;
    for (int s = 0; s < S_; ++s) {
      if (next_[size_t(s)] >= program_[size_t(s)].size()) continue;
      const Action& a = program_[size_t(s)][next_[size_t(s)]];
      stages += str_cat(stages.empty() ? "" : ", ", device_label(s), " at ", name(a));
      reasons += str_cat(reasons.empty() ? "" : "; ", why_blocked(s));
    }
    LIBAI_THROW(InvalidArgument, "pipeline program deadlocks: ", stages,
                " wait for inputs or slots that never come: ", reasons);
  }

  const PipelineProgram& program_;
  const StageCosts& costs_;
  const detail::ProgramIndex index_;
  const std::vector<int> quota_;  // [virtual stage]
  int S_ = 0;                     // devices
  int V_ = 0;                     // virtual stages
  bool chunked_ = false;          // an interleaved program: name actions with their chunks
  bool show_steps_ = false;       // a decoding program: name actions with their steps
  double now_ = 0.0;
  long sequence_ = 0;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  std::vector<std::vector<double>> end_;  // [device][position]: end time or kNotDone
  std::vector<size_t> next_;              // [device]: position of the next action
  std::vector<bool> running_;
  std::vector<double> wake_at_;
  std::vector<int> held_;           // [virtual stage]: slots of its input buffer in use
  std::vector<double> written_at_;  // [item]: when the driver wrote it into stage 0's buffer
  int fed_ = 0;                     // items the driver has written (in item order)
  double driver_wake_at_ = -1.0;
  Timeline timeline_;
};

}  // namespace

Timeline simulate(const PipelineProgram& program, const StageCosts& costs) {
  return simulate(program, costs,
                  std::vector<int>(program.size() * size_t(num_chunks(program)), kUnboundedQuota));
}

Timeline simulate(const PipelineProgram& program, const StageCosts& costs,
                  const std::vector<int>& input_quota) {
  return Replay(program, costs, input_quota).run();
}

}  // namespace libai::schedule
