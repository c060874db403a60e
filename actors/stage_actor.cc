#include "actors/stage_actor.h"

#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <thread>

#include "actors/pinned_thread.h"
#include "runtime/device_profile.h"
#include "runtime/error.h"
#include "runtime/logging.h"

namespace libai::actors {

std::uint32_t packet_tag(std::uint32_t channel, std::uint32_t seq) {
  return (channel << 16) | (seq & 0xffffu);
}

StageOutput prepare_output(Packet packet, const Route& to, int from_node,
                           comm::Communicator* data_plane, std::uint32_t seq,
                           std::vector<comm::WorkHandle>* pending_sends) {
  StageOutput out;
  out.done = packet.done;
  if (!to.actor) return out;
  if (to.node == from_node) {
    out.packet = std::make_shared<const Packet>(std::move(packet));
    return out;
  }
  LIBAI_CHECK(data_plane != nullptr, "a packet for node ", to.node,
              " but this process has no data plane");
  PackedPacket packed = pack(packet, packet_tag(to.channel, seq));
  if (packed.header.bytes > 0)
    pending_sends->push_back(data_plane->send_async(packed.bytes, to.node, packed.header.tag));
  out.header = wire::encode(packed.header);
  return out;
}

void deliver(caf::event_based_actor* self, const Route& to, const StageOutput& output) {
  if (!to.actor) return;
  if (output.packet)
    self->send(to.actor, packet_atom::value, output.packet);
  else
    self->send(to.actor, packet_atom::value, output.header);
}

Packet receive_packet(const wire::PacketHeader& header, int from_node,
                      comm::Communicator& data_plane) {
  Tensor buffer = buffer_for(header);
  if (header.bytes > 0) data_plane.recv(buffer, from_node, header.tag);
  return unpack(header, buffer);
}

void send_credit(caf::event_based_actor* self, const Route& to, int from_node, std::uint32_t slots) {
  if (!to.actor) return;
  if (to.node == from_node)
    self->send(to.actor, credit_atom::value, slots);
  else
    self->send(to.actor, credit_atom::value, wire::encode(wire::Credit{slots}));
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

struct Arrival {
  PacketPtr packet;                    // from this process
  std::optional<wire::PacketHeader> header;  // from another: bytes on the data plane
  // The receive of those bytes, posted when the header arrives (Note [Receiving ahead]).
  Tensor buffer;
  comm::WorkHandle receive;
};

// What the pinned thread owns (touched only there, one job at a time).
struct ThreadSide {
  std::uint32_t seq_out = 0;
  std::vector<comm::WorkHandle> pending_sends;
  std::uint64_t bytes_received = 0;
};

struct StageState {
  StageSetup setup;
  std::optional<ProgramCursor> cursor;
  StageRoutesPtr routes;
  int credits = 0;
  // Actions fired and not yet computed, in firing order: up to kStageActionsInFlight (done
  // packets aside), so that the pinned thread has its next action queued when the current one
  // ends (Note [Keeping the pinned thread fed]).
  std::deque<Key> fired;
  bool finished = false;
  std::map<Key, Arrival> arrivals;
  double busy_seconds = 0;
  std::uint64_t actions = 0;
  std::shared_ptr<ThreadSide> thread_side = std::make_shared<ThreadSide>();
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
                const std::shared_ptr<ThreadSide>& side, Arrival arrival) {
  try {
    // Note [Liveness] in actors/cluster_node.h: each piece of the action is progress.
    const std::string name =
        arrival.packet ? key_name({arrival.packet->step, arrival.packet->group})
                       : key_name({int(arrival.header->step), int(arrival.header->group)});
    ProgressScope progress(setup.progress.get(), "computing " + name);
    Packet in;
    if (arrival.packet) {
      in = *arrival.packet;  // shares the tensors
    } else {
      if (setup.progress)
        setup.progress->begin(str_cat("receiving ", name, " from ", routes.upstream.name));
      if (arrival.receive) arrival.receive->wait();
      in = unpack(*arrival.header, arrival.buffer);
      side->bytes_received += arrival.header->bytes;
      if (setup.progress) setup.progress->begin("computing " + name);
    }
    Packet result{.group = in.group, .step = in.step, .done = in.done, .tensors = {}};
    double seconds = 0;
    if (in.done)
      setup.compute->release(in.group);
    else
      seconds = EmulatedSpeed(setup.slowdown).run(
          [&] { result.tensors = setup.compute->forward(in.group, in.tensors); });
    StageOutput out = prepare_output(std::move(result), routes.downstream, setup.node,
                                     setup.data_plane.get(), side->seq_out++,
                                     &side->pending_sends);
    out.seconds = seconds;
    // Reap the sends UCX has finished (their buffers can go).
    std::erase_if(side->pending_sends, [](const comm::WorkHandle& w) { return w->completed(); });
    caf::anon_send(me, computed_atom::value,
                   StageOutputPtr(std::make_shared<const StageOutput>(std::move(out))));
  } catch (const std::exception& e) {
    caf::anon_send(me, failed_atom::value, str_cat(setup.name, ": ", e.what()));
  }
}

void finish(Self* self) {
  auto& st = self->state;
  st.finished = true;
  // The last sends must leave before the stage reports: wait for them on the pinned thread.
  caf::actor me = caf::actor_cast<caf::actor>(self);
  wire::StageReport report{st.setup.name, st.setup.node, st.busy_seconds, st.actions, 0};
  auto side = st.thread_side;
  const std::string name = st.setup.name;
  st.thread->post([me, side, report, name, progress = st.setup.progress]() mutable {
    try {
      ProgressScope sending(progress.get(), "sending its last packets");
      for (auto& w : side->pending_sends) w->wait();
      side->pending_sends.clear();
      report.bytes_received = side->bytes_received;
      caf::anon_send(me, finished_atom::value, wire::encode(report));
    } catch (const std::exception& e) {
      caf::anon_send(me, failed_atom::value, str_cat(name, ": ", e.what()));
    }
  });
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
// What the stage waits for, for the watchdog (Note [Liveness] in actors/cluster_node.h).
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
    const Key key = st.cursor->next();
    auto it = st.arrivals.find(key);
    if (it == st.arrivals.end()) {
      waiting(self, str_cat(key_name(key), " from ", st.routes->upstream.name));
      return;
    }
    const bool done = it->second.packet ? it->second.packet->done : it->second.header->done;
    // A done packet only releases caches: it may queue behind the others (Note [Done packets]).
    if (!done && int(st.fired.size()) >= kStageActionsInFlight) {
      waiting(self, "");  // its own thread's work
      return;
    }
    // A done packet holds no tensors: it takes no input slot (Note [Done packets]).
    const bool needs_credit = st.routes->downstream.actor != nullptr && !done;
    if (needs_credit && st.credits == 0) {
      waiting(self, str_cat("a credit from ", st.routes->downstream.name));
      return;
    }
    if (needs_credit) --st.credits;
    st.fired.push_back(key);
    Arrival arrival = std::move(it->second);
    st.arrivals.erase(it);
    st.cursor->advance(done);
    trace(self, "fire " + key_name(key));
    caf::actor me = caf::actor_cast<caf::actor>(self);
    // The setup and routes outlive the job: the state owns them and joins the thread first.
    const StageSetup* setup = &st.setup;
    StageRoutesPtr routes = st.routes;
    auto side = st.thread_side;
    st.thread->post([me, setup, routes, side, arrival = std::move(arrival)]() mutable {
      run_action(me, *setup, *routes, side, std::move(arrival));
    });
  }
}

// Note [Receiving ahead]
// A packet from another process comes as a header through CAF while its bytes wait on the
// data plane. The stage posts the receive as soon as the header is there, on the actor (the
// communicator takes calls from any thread), not when the action starts on the pinned thread:
// the bytes then cross while the previous action computes instead of in series with it (UCX
// moves a large message only once its receive is posted). The buffer is the one a quota slot
// accounts for, so memory stays bounded by the quotas.
void post_receive(Self* self, Arrival& arrival) {
  auto& st = self->state;
  if (!arrival.header || arrival.receive || arrival.buffer.defined() || !st.routes) return;
  arrival.buffer = buffer_for(*arrival.header);
  if (arrival.header->bytes == 0) return;
  LIBAI_CHECK(st.setup.data_plane != nullptr, "a packet from node ", st.routes->upstream.node,
              " but this process has no data plane");
  arrival.receive = st.setup.data_plane->recv_async(arrival.buffer, st.routes->upstream.node,
                                                    arrival.header->tag);
}

void accept(Self* self, Key key, Arrival arrival) {
  auto& st = self->state;
  trace(self, "arrive " + key_name(key));
  if (st.finished) return;
  if (st.arrivals.count(key)) {
    fail(self, str_cat(st.setup.name, ": received ", key_name(key), " twice"));
    return;
  }
  try {
    post_receive(self, arrival);
  } catch (const std::exception& e) {
    fail(self, str_cat(st.setup.name, ": ", e.what()));
    return;
  }
  st.arrivals.emplace(key, std::move(arrival));
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
        self->state.credits = routes->downstream_slots;
        try {
          for (auto& [key, arrival] : self->state.arrivals) post_receive(self, arrival);
        } catch (const std::exception& e) {
          fail(self, str_cat(self->state.setup.name, ": ", e.what()));
          return;
        }
        try_fire(self);
      },
      [=](packet_atom, const PacketPtr& packet) {
        accept(self, {packet->step, packet->group}, Arrival{packet, std::nullopt});
      },
      [=](packet_atom, const wire::Bytes& header_bytes) {
        try {
          auto header = wire::decode<wire::PacketHeader>(header_bytes);
          const Key key{int(header.step), int(header.group)};
          accept(self, key, Arrival{nullptr, std::move(header)});
        } catch (const std::exception& e) {
          fail(self, str_cat(self->state.setup.name, ": ", e.what()));
        }
      },
      [=](credit_atom, std::uint32_t slots) {
        trace(self, "credit");
        self->state.credits += int(slots);
        try_fire(self);
      },
      [=](credit_atom, const wire::Bytes& bytes) {
        try {
          self->state.credits += int(wire::decode<wire::Credit>(bytes).slots);
          trace(self, "credit");
          try_fire(self);
        } catch (const std::exception& e) {
          fail(self, str_cat(self->state.setup.name, ": ", e.what()));
        }
      },
      [=](computed_atom, const StageOutputPtr& out) {
        auto& s = self->state;
        if (s.finished) return;
        s.busy_seconds += out->seconds;
        ++s.actions;
        const Key key = s.fired.front();
        s.fired.pop_front();
        // The input slot is free again (a done packet took none).
        if (!out->done) send_credit(self, s.routes->upstream, s.setup.node);
        trace(self, "send " + key_name(key) + (out->done ? " done" : ""));
        deliver(self, s.routes->downstream, *out);
        try_fire(self);
      },
      [=](finished_atom, const wire::Bytes& report) {
        self->send(self->state.setup.parent, finished_atom::value, report);
        self->state.thread->stop();
        self->quit();
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
