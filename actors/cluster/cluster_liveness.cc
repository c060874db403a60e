#include "actors/cluster/cluster_liveness.h"

#include <algorithm>
#include <cstdio>

#include "runtime/error.h"

namespace libai::actors::cluster {

namespace {

std::string seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", s);
  return text;
}

double seconds_between(LivenessClock::time_point from, LivenessClock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

std::string timeout_text(std::chrono::milliseconds timeout) {
  return str_cat("train.cluster.heartbeat_timeout ", seconds(double(timeout.count()) / 1000.0));
}

}  // namespace

std::chrono::milliseconds heartbeat_period(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 6, std::chrono::milliseconds(20), std::chrono::milliseconds(1000));
}

std::string describe_progress(const wire::StageProgress& stage, double age_seconds) {
  std::string out = stage.name;
  if (!stage.doing.empty())
    out += str_cat(" ", stage.doing, " for ", seconds(stage.doing_seconds + age_seconds));
  else if (!stage.waiting.empty())
    out += str_cat(" waiting for ", stage.waiting, " for ",
                   seconds(stage.waiting_seconds + age_seconds));
  else
    out += " idle";
  return str_cat(out, ", ", stage.actions, " action(s) done");
}

LivenessClock::duration StallGuard::tick(LivenessClock::time_point now) {
  const auto gap =
      last_ == LivenessClock::time_point{} ? LivenessClock::duration::zero() : now - last_;
  last_ = now;
  return gap > threshold_ ? gap : LivenessClock::duration::zero();
}

HeartbeatMonitor::HeartbeatMonitor(std::chrono::milliseconds timeout,
                                   std::vector<std::string> stages_of_node,
                                   LivenessClock::time_point now)
    : timeout_(timeout),
      stages_of_node_(std::move(stages_of_node)),
      peers_(stages_of_node_.size()),
      next_due_(now),
      stall_(timeout) {
  for (Peer& peer : peers_) peer.last_heard = now;
  stall_.tick(now);
}

bool HeartbeatMonitor::due(LivenessClock::time_point now) {
  if (now < next_due_) return false;
  next_due_ = now + heartbeat_period(timeout_);
  ++seq_;
  return true;
}

void HeartbeatMonitor::heard(const wire::Heartbeat& beat, LivenessClock::time_point now) {
  if (beat.node <= 0 || size_t(beat.node) >= peers_.size()) return;
  Peer& peer = peers_[size_t(beat.node)];
  peer.last_heard = now;
  peer.ever_heard = true;
  peer.last = beat;
}

HeartbeatMonitor::Verdict HeartbeatMonitor::verdict(LivenessClock::time_point now,
                                                    const std::vector<wire::StageProgress>& local) {
  // This process was away itself: nobody's silence counts for that time.
  if (const auto away = stall_.tick(now); away > LivenessClock::duration::zero())
    for (Peer& peer : peers_) peer.last_heard += away;
  // A silent node first: its stages' last reports grow stale with it.
  for (size_t k = 1; k < peers_.size(); ++k) {
    if (gone_.count(int(k))) continue;
    const Peer& peer = peers_[k];
    const double silent = seconds_between(peer.last_heard, now);
    if (silent * 1000.0 <= double(timeout_.count())) continue;
    std::string last = "it never answered a heartbeat";
    if (peer.ever_heard) {
      last = "last seen: ";
      for (size_t i = 0; i < peer.last.stages.size(); ++i)
        last += (i ? "; " : "") + describe_progress(peer.last.stages[i]);
      if (peer.last.stages.empty()) last += "no stages";
    }
    return {str_cat("node ", k, " (", stages_of_node_[k], ") stopped answering for ",
                    seconds(silent), " (", timeout_text(timeout_), "); ", last),
            int(k)};
  }
  // Note [Liveness]: one piece of work on a stage's thread beyond the timeout is a hang.
  auto stuck = [&](const wire::StageProgress& stage, int node) -> std::string {
    if (stage.doing.empty() || stage.doing_seconds * 1000.0 <= double(timeout_.count())) return "";
    return str_cat(stage.name, " on node ", node, " made no progress for ",
                   seconds(stage.doing_seconds), " (", timeout_text(timeout_), "): ", stage.doing,
                   "; ", stage.actions, " action(s) done");
  };
  for (const wire::StageProgress& stage : local)
    if (std::string failure = stuck(stage, 0); !failure.empty()) return {failure};
  for (size_t k = 1; k < peers_.size(); ++k) {
    if (gone_.count(int(k))) continue;
    for (const wire::StageProgress& stage : peers_[k].last.stages)
      if (std::string failure = stuck(stage, int(k)); !failure.empty()) return {failure};
  }
  return {};
}

NodeZeroWatch::NodeZeroWatch(std::chrono::milliseconds timeout, std::string node_zero,
                             LivenessClock::time_point now)
    : timeout_(timeout), node_zero_(std::move(node_zero)), last_heard_(now), stall_(timeout) {
  stall_.tick(now);
}

std::string NodeZeroWatch::verdict(LivenessClock::time_point now,
                                   const std::vector<wire::StageProgress>& local) {
  if (const auto away = stall_.tick(now); away > LivenessClock::duration::zero())
    last_heard_ += away;
  const double silent = seconds_between(last_heard_, now);
  if (silent * 1000.0 <= double(timeout_.count())) return "";
  std::string mine;
  for (size_t i = 0; i < local.size(); ++i) mine += (i ? "; " : "") + describe_progress(local[i]);
  return str_cat(node_zero_, " stopped answering for ", seconds(silent), " (",
                 timeout_text(timeout_), ")", mine.empty() ? "" : "; here: " + mine);
}

}  // namespace libai::actors::cluster
