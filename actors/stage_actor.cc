#include "actors/stage_actor.h"

#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <thread>

#include "actors/credits.h"
#include "actors/packet_inbox.h"
#include "actors/pinned_thread.h"
#include "runtime/device_profile.h"
#include "runtime/error.h"
#include "runtime/logging.h"

namespace libai::actors {

StageOutput prepare_output(Packet packet, const Route& to, int from_node,
                           comm::MessagePlane* plane) {
  StageOutput out;
  out.done = packet.done;
  if (!to.actor) return out;
  if (to.node == from_node) {
    out.packet = std::make_shared<const Packet>(std::move(packet));
    return out;
  }
  LIBAI_CHECK(plane != nullptr, "a packet for node ", to.node, " but this process has no message plane");
  send_packet(*plane, to.node, to.channel, packet);
  return out;
}

void deliver(caf::event_based_actor* self, const Route& to, const StageOutput& output) {
  if (to.actor && output.packet) self->send(to.actor, packet_atom::value, output.packet);
}

void send_credit(caf::event_based_actor* self, const Route& to, int from_node,
                 comm::MessagePlane* plane, std::uint32_t slots) {
  if (!to.actor) return;
  if (to.node == from_node) {
    self->send(to.actor, credit_atom::value, slots, to.channel);
    return;
  }
  LIBAI_CHECK(plane != nullptr, "a credit for node ", to.node, " but this process has no message plane");
  send_credit_message(*plane, to.node, to.channel, slots);
}

namespace {

using Key = std::pair<int, int>;  // (step, group): program order is step-major

std::string key_name(Key key) { return str_cat("g", key.second, "s", key.first); }

// Note [Stage programs]: step-major over the groups still active.
class ProgramCursor {
 public:
  explicit ProgramCursor(std::vector<int> groups) : active_(std::move(groups)) {}
  bool finished() const { return active_.empty(); }
  Key next() const { return {step_, active_[index_]}; }
  // By arrival: `group` sent its done packet.
  void drop(int group) { std::erase(active_, group); }
  void advance(bool group_done) {
    if (group_done)
      active_.erase(active_.begin() + std::ptrdiff_t(index_));
    else
      ++index_;
    if (index_ >= active_.size()) {
      index_ = 0;
      ++step_;
    }
  }

 private:
  std::vector<int> active_;
  std::size_t index_ = 0;
  int step_ = 0;
};

struct StageState {
  StageSetup setup;
  std::optional<ProgramCursor> cursor;
  StageRoutesPtr routes;
  Credits credits;  // toward the downstream consumer
  // Actions fired and not yet computed, in firing order: up to kStageActionsInFlight (done
  // packets aside), so that the pinned thread has its next action queued when the current one
  // ends (Note [Keeping the pinned thread fed]).
  std::deque<Key> fired;
  bool finished = false;
  std::map<Key, PacketPtr> arrivals;
  std::deque<Key> arrival_order;  // by_arrival: the keys of `arrivals` as they came
  // Input slots in use: packets with tensors received whose credit has not gone back yet
  // (Note [Receiving ahead]).
  int inputs_held = 0;
  double busy_seconds = 0;
  std::uint64_t actions = 0;
  std::uint64_t bytes_received = 0;  // of packets from other nodes
  std::unique_ptr<PinnedThread> thread;
  static inline const char* name = "libai.stage";
};

using Self = caf::stateful_actor<StageState>;

void trace(Self* self, const std::string& event) {
  if (self->state.setup.trace) self->state.setup.trace(event);
}

void fail(Self* self, const std::string& what) {
  if (self->state.finished) return;
  self->state.finished = true;
  self->send(self->state.setup.parent, failed_atom::value, what);
  self->quit(caf::exit_reason::user_shutdown);
}

// Runs one action on the pinned thread and reports (computed_atom, output) to the actor.
void run_action(caf::actor me, const StageSetup& setup, const StageRoutes& routes,
                const PacketPtr& in) {
  try {
    // Note [Liveness] in actors/cluster/cluster_node.h: each action is a piece of progress.
    ProgressScope progress(setup.progress.get(), "computing " + key_name({in->step, in->group}));
    Packet result{.group = in->group, .step = in->step, .done = in->done, .tensors = {}};
    double seconds = 0;
    if (in->done)
      setup.compute->release(in->group);
    else
      seconds = EmulatedSpeed(setup.slowdown).run(
          [&] { result.tensors = setup.compute->forward(in->group, in->tensors); });
    StageOutput out =
        prepare_output(std::move(result), routes.downstream, setup.node, setup.plane.get());
    out.seconds = seconds;
    caf::anon_send(me, computed_atom::value,
                   StageOutputPtr(std::make_shared<const StageOutput>(std::move(out))));
  } catch (const std::exception& e) {
    caf::anon_send(me, failed_atom::value, str_cat(setup.name, ": ", e.what()));
  }
}

// Every action ran and its output left (a packet for another node is sent before its
// action's `computed` message): report and stop.
void finish(Self* self) {
  auto& st = self->state;
  st.finished = true;
  const wire::StageReport report{st.setup.name, st.setup.node, st.busy_seconds, st.actions,
                                 st.bytes_received};
  self->send(st.setup.parent, finished_atom::value, wire::encode(report));
  st.thread->stop();
  self->quit();
}

std::uint64_t tensor_bytes(const Packet& packet) {
  std::uint64_t bytes = 0;
  for (const auto& [name, t] : packet.tensors) bytes += t.nbytes();
  return bytes;
}

// Note [Done packets]
// A group's done packet carries no tensors, so it needs no input slot: producers send it
// without a credit and consumers return none for it. Were it to take a slot, the end of a job
// (one done packet per group through every stage, all at once) would run at one credit round
// trip per quota's worth of groups and hop, which across processes was most of the runtime's
// overhead on short jobs. Arrivals of done packets are bounded by the number of groups. For the
// same reason a stage queues every done packet on its thread at once, beyond the two actions
// in flight of the Note below: each costs microseconds, a round trip through the actor ~80 us.

// Note [Keeping the pinned thread fed]
// After each action the pinned thread would otherwise idle for a round trip through the actor
// (its `computed` message, a CAF worker's wake-up, the next post): 60-180 us per action on a
// 2-core VM, which is 5% of a 2 ms stage. So a stage fires its next action as soon as its
// input and a credit are there, even while the current one computes: the thread runs them
// back to back. Program order is kept (the cursor advances at firing; the thread runs jobs in
// post order), credits are taken at firing, and the upstream's credit returns when an action
// is computed, so the quotas bound memory exactly as before.
// What the stage waits for, for the watchdog (Note [Liveness] in actors/cluster/cluster_node.h).
void waiting(Self* self, std::string what) {
  if (self->state.setup.progress) self->state.setup.progress->waiting(std::move(what));
}

void try_fire(Self* self) {
  auto& st = self->state;
  while (!st.finished && st.routes) {
    if (st.cursor->finished()) {
      waiting(self, "");
      if (st.fired.empty()) finish(self);
      return;
    }
    if (st.setup.by_arrival && st.arrival_order.empty()) {
      waiting(self, str_cat("an input from ", st.routes->upstream.name));
      return;
    }
    const Key key = st.setup.by_arrival ? st.arrival_order.front() : st.cursor->next();
    auto it = st.arrivals.find(key);
    if (it == st.arrivals.end()) {
      waiting(self, str_cat(key_name(key), " from ", st.routes->upstream.name));
      return;
    }
    const bool done = it->second->done;
    // A done packet only releases caches: it may queue behind the others (Note [Done packets]).
    if (!done && int(st.fired.size()) >= kStageActionsInFlight) {
      waiting(self, "");  // its own thread's work
      return;
    }
    // A done packet holds no tensors: it takes no input slot (Note [Done packets]).
    const bool needs_credit = st.routes->downstream.actor != nullptr && !done;
    if (needs_credit && st.credits.available() == 0) {
      waiting(self, str_cat("a credit from ", st.routes->downstream.name));
      return;
    }
    if (needs_credit) st.credits.take();
    st.fired.push_back(key);
    PacketPtr packet = std::move(it->second);
    st.arrivals.erase(it);
    if (st.setup.by_arrival) {
      st.arrival_order.pop_front();
      if (done) st.cursor->drop(key.second);
    } else {
      st.cursor->advance(done);
    }
    if (st.routes->upstream.node != st.setup.node) st.bytes_received += tensor_bytes(*packet);
    trace(self, "fire " + key_name(key));
    caf::actor me = caf::actor_cast<caf::actor>(self);
    // The setup and routes outlive the job: the state owns them and joins the thread first.
    const StageSetup* setup = &st.setup;
    StageRoutesPtr routes = st.routes;
    st.thread->post([me, setup, routes, packet = std::move(packet)] {
      run_action(me, *setup, *routes, packet);
    });
  }
}

// Note [Receiving ahead]
// A packet from another node is taken off the wire as its bytes arrive, whatever the stage is
// doing: the node's message plane always has a receive posted, and its receive thread (the
// packet inbox) allocates the tensors from the header and reads the payload straight into
// them, then hands the stage a complete packet. So the bytes cross while the previous action
// computes, never in series with it, and the stage's thread never waits for the network.
// Memory stays bounded by the quotas: a producer sends a packet only with a credit for it
// (done packets and gradients aside, Note [Done packets], Note [Training credits]).
// A producer that sends beyond its credits fails the stage (StageRoutes::input_slots).
bool within_quota(Self* self) {
  auto& st = self->state;
  if (!st.routes || st.routes->input_slots <= 0 || st.inputs_held <= st.routes->input_slots)
    return true;
  fail(self, str_cat(st.setup.name, ": ", st.routes->upstream.name, " sent ", st.inputs_held,
                     " packets without their credits coming back; its quota is ",
                     st.routes->input_slots, " input slot(s)"));
  return false;
}

void accept(Self* self, const PacketPtr& packet) {
  auto& st = self->state;
  const Key key{packet->step, packet->group};
  trace(self, "arrive " + key_name(key));
  if (st.finished) return;
  if (st.arrivals.count(key)) {
    fail(self, str_cat(st.setup.name, ": received ", key_name(key), " twice"));
    return;
  }
  if (!packet->done) ++st.inputs_held;  // a done packet takes no slot (Note [Done packets])
  if (!within_quota(self)) return;
  st.arrivals.emplace(key, packet);
  if (st.setup.by_arrival) st.arrival_order.push_back(key);
  try_fire(self);
}

caf::behavior stage_behavior(Self* self, StageSetup setup) {
  auto& st = self->state;
  st.cursor.emplace(setup.groups);
  st.thread = std::make_unique<PinnedThread>(setup.name, setup.device);
  st.setup = std::move(setup);
  self->set_exit_handler([self](caf::exit_msg& msg) {
    self->state.thread->stop();
    self->quit(msg.reason);
  });
  return {
      [=](routes_atom, const StageRoutesPtr& routes) {
        self->state.routes = routes;
        self->state.credits = Credits(routes->downstream_slots);
        if (within_quota(self)) try_fire(self);
      },
      [=](packet_atom, const PacketPtr& packet) { accept(self, packet); },
      [=](credit_atom, std::uint32_t slots, std::uint32_t link) {
        auto& s = self->state;
        if (s.finished) return;
        if (!s.routes || link != s.routes->downstream.channel) {
          fail(self, str_cat(s.setup.name, ": a credit for link ", link, ", which it does not feed"));
          return;
        }
        trace(self, "credit");
        try {
          s.credits.give_back(slots, str_cat(s.routes->downstream.name, " on link ", link));
        } catch (const Error& e) {
          fail(self, str_cat(s.setup.name, ": ", e.what()));
          return;
        }
        try_fire(self);
      },
      [=](computed_atom, const StageOutputPtr& out) {
        auto& s = self->state;
        if (s.finished) return;
        s.busy_seconds += out->seconds;
        ++s.actions;
        const Key key = s.fired.front();
        s.fired.pop_front();
        // The input slot is free again (a done packet took none).
        try {
          if (!out->done) {
            --s.inputs_held;
            send_credit(self, s.routes->upstream, s.setup.node, s.setup.plane.get());
          }
        } catch (const std::exception& e) {
          fail(self, str_cat(s.setup.name, ": ", e.what()));
          return;
        }
        trace(self, "send " + key_name(key) + (out->done ? " done" : ""));
        deliver(self, s.routes->downstream, *out);
        try_fire(self);
      },
      [=](failed_atom, const std::string& what) {
        self->state.thread->stop();
        fail(self, what);
      },
      [=](abort_atom, const std::string&) {
        self->state.finished = true;
        self->state.thread->stop();
        self->quit(caf::exit_reason::user_shutdown);
      },
  };
}

}  // namespace

caf::actor spawn_stage(caf::actor_system& system, StageSetup setup) {
  LIBAI_CHECK(setup.compute != nullptr, setup.name, ": no compute");
  return system.spawn(stage_behavior, std::move(setup));
}

}  // namespace libai::actors
