// What a stage is doing, for the cluster's watchdog (Note [Liveness] in actors/cluster/cluster_node.h):
// the action on its pinned thread and since when, what its next action waits for, and how
// many actions it ended. The pinned thread and the stage actor write it; the node's control
// loop reads it (a snapshot) for node 0's heartbeat, from any thread, even when the stage's
// thread is stuck.
//
//   auto progress = board.add("stage 1");            // when the node spawns the stage
//   progress->begin("computing g5s0");                 // pinned thread: an action starts
//   progress->end();                                   // ...and ends: progress
//   progress->waiting("g6s0 from stage 0");            // the actor: its next action's input
//   wire::StageProgress now = progress->snapshot();    // any thread
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actors/wire/wire.h"

namespace libai::actors {

class StageProgress {
 public:
  explicit StageProgress(std::string stage);
  const std::string& stage() const { return stage_; }

  // Pinned thread: a piece of work starts ("receiving g5s0 from stage 1", "computing g5s0");
  // a later begin() replaces it (the previous piece ended: that is progress too).
  void begin(std::string doing);
  // Pinned thread: the action ended.
  void end();
  // The actor: what the next action waits for ("" once it waits for nothing of its own: idle
  // between steps, or done). Repeating the same text keeps its start time.
  void waiting(std::string what);

  wire::StageProgress snapshot() const;

 private:
  using Clock = std::chrono::steady_clock;
  const std::string stage_;
  mutable std::mutex mutex_;
  std::uint64_t actions_ = 0;
  std::string doing_, waiting_;
  Clock::time_point doing_since_{}, waiting_since_{};
};

// Every stage of one node, in spawn order.
class ProgressBoard {
 public:
  std::shared_ptr<StageProgress> add(const std::string& stage);
  std::vector<wire::StageProgress> snapshot() const;

 private:
  mutable std::mutex mutex_;
  std::vector<std::shared_ptr<StageProgress>> stages_;
};

// Marks a piece of work on the pinned thread and ends it when the scope ends, also when it
// throws (a failed action is reported by the stage's error, not by the watchdog).
class ProgressScope {
 public:
  ProgressScope(StageProgress* progress, std::string doing) : progress_(progress) {
    if (progress_) progress_->begin(std::move(doing));
  }
  ~ProgressScope() {
    if (progress_) progress_->end();
  }
  ProgressScope(const ProgressScope&) = delete;
  ProgressScope& operator=(const ProgressScope&) = delete;

 private:
  StageProgress* progress_;
};

}  // namespace libai::actors
