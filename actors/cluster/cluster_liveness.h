// Liveness of a cluster run (Note [Liveness] in actors/cluster/cluster_node.h): node 0's view of every
// other node through their heartbeats, the watchdog over every stage's progress, and every
// other node's view of node 0. Pure bookkeeping over times given by the caller: the control
// loops of actors/cluster/cluster_scheduler.cc and actors/cluster/cluster_agent.cc send and receive the
// messages, and tests drive these classes with made-up clocks.
//
//   HeartbeatMonitor monitor(timeout, nodes, stage_names);   // node 0, once the job runs
//   if (monitor.due(now)) send (heartbeat_atom, monitor.next_seq()) to every agent;
//   monitor.heard(decoded_heartbeat, now);                    // an agent's answer
//   std::string failure = monitor.verdict(now, local_board.snapshot());   // "" while alive
#pragma once

#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "actors/wire/wire.h"

namespace libai::actors::cluster {

using LivenessClock = std::chrono::steady_clock;

// How often node 0 sends heartbeats for a timeout: several per timeout, so that one late
// message never decides, and at most one a second.
std::chrono::milliseconds heartbeat_period(std::chrono::milliseconds timeout);

// "stage 2 computing g5s0 for 0.4 s; 12 actions done": what a snapshot says, for messages.
std::string describe_progress(const wire::StageProgress& stage, double age_seconds = 0);

// A long pause of this process itself (SIGSTOP, a swapping host) is not the peers' silence:
// when the caller's loop did not run for half the timeout, every peer's clock restarts
// (Note [Liveness]).
class StallGuard {
 public:
  explicit StallGuard(std::chrono::milliseconds timeout) : threshold_(timeout / 2) {}
  // How long this process was away since the previous tick, when that is a stall; else 0.
  LivenessClock::duration tick(LivenessClock::time_point now);

 private:
  LivenessClock::duration threshold_;
  LivenessClock::time_point last_{};
};

// Node 0: the other nodes' heartbeats and every stage's progress.
class HeartbeatMonitor {
 public:
  // `stages_of_node[k]`: "stage 2, stage 3", the stages node k holds (for messages).
  HeartbeatMonitor(std::chrono::milliseconds timeout, std::vector<std::string> stages_of_node,
                   LivenessClock::time_point now);

  // True when the next round of heartbeats is due (then counted as sent).
  bool due(LivenessClock::time_point now);
  std::uint64_t seq() const { return seq_; }
  void heard(const wire::Heartbeat& beat, LivenessClock::time_point now);
  // A node that ended (seen dead, or told to end): never judged again.
  void forget(int node) { gone_.insert(node); }

  struct Verdict {
    std::string failure;   // "" while every node answers and every stage progresses
    int silent_node = -1;  // the node that stopped answering, if that is the failure
  };
  // The one failure that ends the job, naming the node, its stages and what they were doing
  // or waiting for. `local`: node 0's own stages, now.
  Verdict verdict(LivenessClock::time_point now, const std::vector<wire::StageProgress>& local);

 private:
  struct Peer {
    LivenessClock::time_point last_heard;
    bool ever_heard = false;
    wire::Heartbeat last;
  };
  std::chrono::milliseconds timeout_;
  std::vector<std::string> stages_of_node_;
  std::vector<Peer> peers_;  // by node rank (0: unused)
  std::set<int> gone_;
  LivenessClock::time_point next_due_;
  std::uint64_t seq_ = 0;
  StallGuard stall_;
};

// Nodes other than 0: node 0's heartbeats.
class NodeZeroWatch {
 public:
  NodeZeroWatch(std::chrono::milliseconds timeout, std::string node_zero,
                LivenessClock::time_point now);
  void heard(LivenessClock::time_point now) { last_heard_ = now; }
  // "" while node 0 answers; else why this node ends (with what `local`, this node's stages,
  // were doing).
  std::string verdict(LivenessClock::time_point now,
                      const std::vector<wire::StageProgress>& local = {});

 private:
  std::chrono::milliseconds timeout_;
  std::string node_zero_;  // "node 0 (the scheduler at ADDR:PORT)"
  LivenessClock::time_point last_heard_;
  StallGuard stall_;
};

}  // namespace libai::actors::cluster
