#include "actors/train_stage_actor.h"

#include <deque>
#include <map>
#include <optional>
#include <tuple>

#include "actors/credits.h"
#include "actors/pinned_thread.h"
#include "runtime/device_profile.h"
#include "runtime/error.h"

namespace libai::actors {

std::string train_action_name(const schedule::Action& action) {
  return str_cat(action.kind == schedule::ActionKind::forward ? "F" : "B", action.micro_batch,
                 action.chunk != 0 ? str_cat("c", action.chunk) : std::string());
}

int train_input_quota(const schedule::StageProgram& program, int chunk) {
  int stashed = 0, peak = 0;
  for (const schedule::Action& a : program) {
    if (a.chunk != chunk) continue;
    stashed += a.kind == schedule::ActionKind::forward ? 1 : -1;
    peak = std::max(peak, stashed);
  }
  // The next input arriving while the stage computes, and the action queued on its thread.
  return peak + 1 + (kStageActionsInFlight - 1);
}

namespace {

using schedule::Action;
using schedule::ActionKind;

// (step, gradient, chunk, micro-batch): what an arrival feeds.
using Key = std::tuple<int, bool, int, int>;

std::string key_name(const Key& key) {
  const auto& [step, gradient, chunk, micro_batch] = key;
  return str_cat(train_action_name({gradient ? ActionKind::backward : ActionKind::forward,
                                    micro_batch, 0, chunk}),
                 " s", step);
}

struct TrainState {
  TrainStageSetup setup;
  TrainRoutesPtr routes;
  std::vector<Credits> credits;  // per chunk, toward its consumer
  int step = -1;             // the step running; -1: idle
  int last_step = -1;        // the last step started
  std::optional<int> pending_step;  // a step asked for before the routes came
  size_t position = 0;       // the next action of the program
  std::deque<Action> fired;  // fired, not yet computed (at most kStageActionsInFlight)
  bool ending = false;       // end_step is on the thread
  bool controlling = false;  // a control is on the thread (Note [Train controls])
  bool stopping = false;     // told to stop: its last sends drain, then it reports
  bool finished = false;     // failed or aborted
  std::map<Key, PacketPtr> arrivals;
  // Per chunk: its input quota (train_input_quota), and the activations received whose credit
  // has not gone back yet. A producer beyond its credits fails the stage instead of growing
  // `arrivals` (a bug, or a hostile peer).
  std::vector<int> input_quota;
  std::vector<int> inputs_held;
  double busy_seconds = 0;
  std::uint64_t actions = 0;
  std::uint64_t bytes_received = 0;  // of packets from other nodes
  std::unique_ptr<PinnedThread> thread;
  static inline const char* name = "libai.train_stage";
};

using Self = caf::stateful_actor<TrainState>;

void trace(Self* self, const std::string& event) {
  if (self->state.setup.trace) self->state.setup.trace(event);
}

void fail(Self* self, const std::string& what) {
  if (self->state.finished) return;
  self->state.finished = true;
  self->state.thread->stop();
  self->send(self->state.setup.parent, failed_atom::value, what);
  self->quit(caf::exit_reason::user_shutdown);
}

std::string name_of(const Action& a, int step) { return str_cat(train_action_name(a), " s", step); }

// One action on the pinned thread; (computed_atom, output) back to the actor.
void run_action(caf::actor me, const TrainStageSetup& setup, const TrainRoutes& routes,
                Action action, int step, const PacketPtr& arrival) {
  try {
    static const models::TensorMap kNoInputs;
    const models::TensorMap& in = arrival ? arrival->tensors : kNoInputs;
    const TrainLink& link = routes.chunks[size_t(action.chunk)];
    const bool forward = action.kind == ActionKind::forward;
    // Note [Liveness] in actors/cluster/cluster_node.h: each action is a piece of progress.
    ProgressScope progress(setup.progress.get(), "computing " + name_of(action, step));
    Packet result{.group = action.micro_batch, .step = step, .done = false, .tensors = {},
                  .gradient = !forward,
                  .chunk = forward ? link.downstream_chunk : link.upstream_chunk};
    const double seconds = EmulatedSpeed(setup.slowdown).run([&] {
      result.tensors = forward
                           ? setup.compute->forward(step, action.chunk, action.micro_batch, in)
                           : setup.compute->backward(step, action.chunk, action.micro_batch, in);
    });
    const Route& to = forward ? link.downstream : link.upstream;
    StageOutput out = prepare_output(std::move(result), to, setup.node, setup.plane.get());
    out.seconds = seconds;
    caf::anon_send(me, computed_atom::value,
                   StageOutputPtr(std::make_shared<const StageOutput>(std::move(out))));
  } catch (const std::exception& e) {
    caf::anon_send(me, failed_atom::value,
                   str_cat(setup.name, ": ", name_of(action, step), ": ", e.what()));
  }
}

void end_step(Self* self) {
  auto& st = self->state;
  st.ending = true;
  caf::actor me = caf::actor_cast<caf::actor>(self);
  auto compute = st.setup.compute;
  const std::string name = st.setup.name;
  const int step = st.step;
  st.thread->post([me, compute, name, step, progress = st.setup.progress] {
    try {
      ProgressScope ending(progress.get(), str_cat("ending step ", step));
      const wire::Bytes summary = wire::encode(compute->end_step(step));
      caf::anon_send(me, step_done_atom::value, step, summary);
    } catch (const std::exception& e) {
      caf::anon_send(me, failed_atom::value, str_cat(name, ": end of step ", step, ": ", e.what()));
    }
  });
}

// Fires the program's next actions while their inputs and credits are there (Note [Keeping the
// pinned thread fed] in stage_actor.cc: up to kStageActionsInFlight queued on the thread).
// What the stage waits for, for the watchdog (Note [Liveness] in actors/cluster/cluster_node.h).
void waiting(Self* self, std::string what) {
  if (self->state.setup.progress) self->state.setup.progress->waiting(std::move(what));
}

void try_fire(Self* self) {
  auto& st = self->state;
  while (!st.finished && !st.stopping && st.routes && st.step >= 0 && !st.ending) {
    const auto& program = st.setup.program;
    if (st.position == program.size()) {
      waiting(self, "");
      if (st.fired.empty()) end_step(self);
      return;
    }
    if (int(st.fired.size()) >= kStageActionsInFlight) {
      waiting(self, "");  // its own thread's work
      return;
    }
    const Action action = program[st.position];
    const TrainLink& link = st.routes->chunks[size_t(action.chunk)];
    const bool forward = action.kind == ActionKind::forward;
    const bool first = !link.upstream.actor, last = !link.downstream.actor;
    PacketPtr arrival;
    const Key key{st.step, !forward, action.chunk, action.micro_batch};
    if (forward ? !first : !last) {
      auto it = st.arrivals.find(key);
      if (it == st.arrivals.end()) {
        waiting(self,
                str_cat(forward ? "the input of " : "the gradient of ", name_of(action, st.step),
                        " from ", forward ? link.upstream.name : link.downstream.name));
        return;
      }
      arrival = it->second;
    }
    if (forward && !last) {
      if (st.credits[size_t(action.chunk)].available() == 0) {
        waiting(self,
                str_cat("a credit from ", link.downstream.name, " for ", name_of(action, st.step)));
        return;
      }
      st.credits[size_t(action.chunk)].take();
    }
    if (arrival) {
      st.arrivals.erase(key);
      const Route& from = forward ? link.upstream : link.downstream;
      if (from.node != st.setup.node)
        for (const auto& [name, t] : arrival->tensors) st.bytes_received += t.nbytes();
    }
    ++st.position;
    st.fired.push_back(action);
    trace(self, "fire " + name_of(action, st.step));
    caf::actor me = caf::actor_cast<caf::actor>(self);
    const TrainStageSetup* setup = &st.setup;  // the state owns it and joins the thread first
    st.thread->post([me, setup, routes = st.routes, action, step = st.step,
                     arrival = std::move(arrival)] {
      run_action(me, *setup, *routes, action, step, arrival);
    });
  }
}

// Packets from other nodes arrive complete (Note [Receiving ahead] in stage_actor.cc).
void accept(Self* self, const PacketPtr& packet) {
  auto& st = self->state;
  const Key key{packet->step, packet->gradient, packet->chunk, packet->group};
  trace(self, "arrive " + key_name(key));
  if (st.finished) return;
  if (std::get<0>(key) <= st.last_step && std::get<0>(key) != st.step) {
    fail(self, str_cat(st.setup.name, ": received ", key_name(key), " after its step ended"));
    return;
  }
  if (st.arrivals.count(key)) {
    fail(self, str_cat(st.setup.name, ": received ", key_name(key), " twice"));
    return;
  }
  const int chunk = packet->chunk;
  if (chunk < 0 || chunk >= int(st.input_quota.size())) {
    fail(self, str_cat(st.setup.name, ": received ", key_name(key), " for chunk ", chunk,
                       ", which its program does not run"));
    return;
  }
  if (!packet->gradient && ++st.inputs_held[size_t(chunk)] > st.input_quota[size_t(chunk)]) {
    fail(self, str_cat(st.setup.name, ": received ", key_name(key), " beyond its credits: ",
                       st.inputs_held[size_t(chunk)], " activations of chunk ", chunk,
                       " held, its quota is ", st.input_quota[size_t(chunk)], " input slot(s)"));
    return;
  }
  st.arrivals.emplace(key, packet);
  try_fire(self);
}

void start_control(Self* self, const wire::Bytes& command) {
  auto& st = self->state;
  if (st.step >= 0 || st.controlling) {
    fail(self, str_cat(st.setup.name, ": asked to run a control while ",
                       st.step >= 0 ? str_cat("running step ", st.step) : "running another"));
    return;
  }
  st.controlling = true;
  caf::actor me = caf::actor_cast<caf::actor>(self);
  auto compute = st.setup.compute;
  const std::string name = st.setup.name;
  st.thread->post([me, compute, name, command, progress = st.setup.progress] {
    try {
      const wire::TrainControl control = wire::decode<wire::TrainControl>(command);
      const char* kinds[] = {"saving a checkpoint", "loading a checkpoint", "evaluating"};
      ProgressScope controlling(progress.get(), kinds[int(control.kind)]);
      caf::anon_send(me, control_done_atom::value, wire::encode(compute->control(control)));
    } catch (const std::exception& e) {
      caf::anon_send(me, failed_atom::value, str_cat(name, ": ", e.what()));
    }
  });
}

void start_step(Self* self, int step) {
  auto& st = self->state;
  if (st.controlling) {
    fail(self, str_cat(st.setup.name, ": asked to run step ", step, " while running a control"));
    return;
  }
  if (st.step >= 0 || step <= st.last_step) {
    fail(self, str_cat(st.setup.name, ": asked to run step ", step, " while ",
                       st.step >= 0 ? str_cat("running step ", st.step)
                                    : str_cat("step ", st.last_step, " already ran")));
    return;
  }
  st.step = step;
  st.last_step = step;
  st.position = 0;
  trace(self, str_cat("step s", step));
  try_fire(self);
}

// Told to stop between steps: every action ran and its output left (a packet for another
// node is sent before its action's `computed` message), so report and stop.
void finish(Self* self) {
  auto& st = self->state;
  st.stopping = true;
  const wire::StageReport report{st.setup.name, st.setup.node, st.busy_seconds, st.actions,
                                 st.bytes_received};
  self->send(st.setup.parent, finished_atom::value, wire::encode(report));
  st.thread->stop();
  self->quit();
}

// A credit for `link`: the consumer of the chunk that feeds it freed `slots` input slots.
void add_credit(Self* self, std::uint32_t slots, std::uint32_t link) {
  auto& st = self->state;
  for (size_t c = 0; st.routes && c < st.routes->chunks.size(); ++c)
    if (st.routes->chunks[c].downstream.actor && st.routes->chunks[c].downstream.channel == link) {
      trace(self, str_cat("credit c", c));
      try {
        st.credits[c].give_back(slots, str_cat(st.routes->chunks[c].downstream.name, " on link ", link));
      } catch (const Error& e) {
        fail(self, str_cat(st.setup.name, ": ", e.what()));
        return;
      }
      try_fire(self);
      return;
    }
  fail(self, str_cat(st.setup.name, ": a credit for link ", link, ", which none of its chunks feeds"));
}

caf::behavior train_stage_behavior(Self* self, TrainStageSetup setup) {
  auto& st = self->state;
  st.thread = std::make_unique<PinnedThread>(setup.name, setup.device);
  st.setup = std::move(setup);
  for (const Action& a : st.setup.program) {
    while (int(st.input_quota.size()) <= a.chunk)
      st.input_quota.push_back(train_input_quota(st.setup.program, int(st.input_quota.size())));
  }
  st.inputs_held.assign(st.input_quota.size(), 0);
  self->set_exit_handler([self](caf::exit_msg& msg) {
    self->state.thread->stop();
    self->quit(msg.reason);
  });
  return {
      [=](routes_atom, const TrainRoutesPtr& routes) {
        auto& s = self->state;
        int chunks = 0;
        for (const Action& a : s.setup.program) chunks = std::max(chunks, a.chunk + 1);
        if (int(routes->chunks.size()) < chunks) {
          fail(self, str_cat(s.setup.name, ": its program runs ", chunks, " chunks, its routes ",
                             routes->chunks.size()));
          return;
        }
        s.routes = routes;
        s.credits.clear();
        for (const TrainLink& link : routes->chunks) s.credits.emplace_back(link.downstream_slots);
        if (s.pending_step) {
          const int step = *s.pending_step;
          s.pending_step.reset();
          start_step(self, step);
        }
      },
      [=](step_atom, int step) {
        if (self->state.finished) return;
        if (!self->state.routes)
          self->state.pending_step = step;
        else
          start_step(self, step);
      },
      [=](control_atom, const wire::Bytes& command) {
        if (self->state.finished) return;
        start_control(self, command);
      },
      [=](control_done_atom, const wire::Bytes& summary) {
        auto& s = self->state;
        if (s.finished) return;
        s.controlling = false;
        if (!s.routes) {
          fail(self, str_cat(s.setup.name, ": a control ended before the routes came"));
          return;
        }
        self->send(s.routes->driver, control_done_atom::value, s.setup.slot, summary);
      },
      [=](packet_atom, const PacketPtr& packet) { accept(self, packet); },
      [=](credit_atom, std::uint32_t slots, std::uint32_t link) {
        if (!self->state.finished) add_credit(self, slots, link);
      },
      [=](computed_atom, const StageOutputPtr& out) {
        auto& s = self->state;
        if (s.finished) return;
        s.busy_seconds += out->seconds;
        ++s.actions;
        const Action action = s.fired.front();
        s.fired.pop_front();
        const TrainLink& link = s.routes->chunks[size_t(action.chunk)];
        trace(self, "computed " + name_of(action, s.step));
        if (action.kind == ActionKind::forward) {
          deliver(self, link.downstream, *out);
        } else {
          deliver(self, link.upstream, *out);
          // The input slot held this micro-batch's stash until now (Note [Training credits]).
          if (link.upstream.actor) {
            --s.inputs_held[size_t(action.chunk)];
            try {
              send_credit(self, Route{link.upstream.actor, link.upstream.node, link.input_channel},
                          s.setup.node, s.setup.plane.get());
            } catch (const std::exception& e) {
              fail(self, str_cat(s.setup.name, ": ", e.what()));
              return;
            }
            trace(self, "free " + name_of({ActionKind::forward, action.micro_batch, 0, action.chunk}, s.step));
          }
        }
        try_fire(self);
      },
      [=](step_done_atom, int step, const wire::Bytes& summary) {
        auto& s = self->state;
        if (s.finished) return;
        trace(self, str_cat("step_done s", step));
        s.step = -1;
        s.ending = false;
        waiting(self, str_cat("the driver's next step (step ", step, " is done)"));
        self->send(s.routes->driver, step_done_atom::value, s.setup.slot, step, summary);
      },
      [=](stop_atom) {
        auto& s = self->state;
        if (s.finished || s.stopping) return;
        if (s.step >= 0 || s.controlling) {
          fail(self, str_cat(s.setup.name, ": told to stop while running ",
                             s.controlling ? std::string("a control") : str_cat("step ", s.step)));
          return;
        }
        finish(self);
      },
      [=](failed_atom, const std::string& what) { fail(self, what); },
      [=](abort_atom, const std::string&) {
        self->state.finished = true;
        self->state.thread->stop();
        self->quit(caf::exit_reason::user_shutdown);
      },
  };
}

}  // namespace

caf::actor spawn_train_stage(caf::actor_system& system, TrainStageSetup setup) {
  LIBAI_CHECK(setup.compute != nullptr, setup.name, ": no compute");
  for (const schedule::Action& a : setup.program)
    LIBAI_CHECK(a.chunk >= 0 && a.micro_batch >= 0, setup.name, ": action ",
                train_action_name(a), " has a negative chunk or micro-batch");
  return system.spawn(train_stage_behavior, std::move(setup));
}

}  // namespace libai::actors
