#include "actors/pipeline.h"

#include <condition_variable>
#include <mutex>

#include "runtime/error.h"
#include "schedule/program.h"

namespace libai::actors {

std::string SlotSpec::name() const {
  if (alone) return str_cat("stage ", stage);
  return str_cat("stage ", stage, " (dp ", replica, ", tp ", rank, ")");
}

int PipelineLayout::replica_of_group(int group) const {
  for (size_t r = 0; r < groups.size(); ++r)
    for (int g : groups[r])
      if (g == group) return int(r);
  LIBAI_THROW(InvalidArgument, "no replica serves group ", group);
}

PipelineLayout make_layout(LayoutSizes sizes, int num_groups) {
  LIBAI_CHECK(sizes.dp >= 1 && sizes.pp >= 1 && sizes.tp >= 1, "pipeline layout: sizes dp ",
              sizes.dp, ", pp ", sizes.pp, ", tp ", sizes.tp, " must be at least 1");
  LIBAI_CHECK(num_groups >= sizes.dp, "pipeline layout: ", num_groups,
              " groups cannot feed ", sizes.dp, " data-parallel replicas");
  PipelineLayout layout;
  layout.sizes = sizes;
  for (int r = 0; r < sizes.dp; ++r)
    for (int s = 0; s < sizes.pp; ++s)
      for (int t = 0; t < sizes.tp; ++t)
        layout.slots.push_back({.replica = r,
                                .stage = s,
                                .rank = t,
                                .node = 0,
                                .device = Device::cpu(),
                                .slowdown = 1.0,
                                .alone = sizes.dp == 1 && sizes.tp == 1});
  layout.groups.resize(size_t(sizes.dp));
  for (int g = 0; g < num_groups; ++g) layout.groups[size_t(g % sizes.dp)].push_back(g);
  // The quotas schedule/ validated for this program (Note [Input slots and credits]): double
  // buffering after stage 0. Stage 0 takes whatever the job submits, in submit order rather
  // than program order, so it gets one slot per group: each group has at most one step
  // waiting (its next step needs its previous one's output).
  int most = 0;
  for (const auto& gs : layout.groups) most = std::max(most, int(gs.size()));
  layout.input_slots = schedule::buffer_quota(schedule::inference_forward(sizes.pp, most));
  // A stage queues its next action on its thread while the current one runs (Note [Keeping
  // the pinned thread fed] in stage_actor.cc): that input holds a slot too.
  for (int& slots : layout.input_slots) slots += kStageActionsInFlight - 1;
  layout.input_slots[0] = most;
  return layout;
}

std::uint32_t channel_into_slot(int slot) { return std::uint32_t(slot + 1); }
std::uint32_t channel_to_driver(int replica) { return 0xf000u + std::uint32_t(replica); }

namespace {

// The link slot i sends its outputs on: into the next stage's slot, or (the last stage's rank
// 0) to the driver; 0 when its outputs are dropped.
std::uint32_t output_link(const PipelineLayout& layout, int i) {
  const SlotSpec& slot = layout.slots[size_t(i)];
  if (slot.stage + 1 < layout.sizes.pp)
    return channel_into_slot(layout.index(slot.replica, slot.stage + 1, slot.rank));
  return slot.rank == 0 ? channel_to_driver(slot.replica) : 0;
}

}  // namespace

void add_driver_channels(const PipelineLayout& layout, PacketInbox& inbox, const caf::actor& driver) {
  for (int r = 0; r < layout.sizes.dp; ++r) {
    inbox.add(channel_to_driver(r), driver);
    for (int t = 0; t < layout.sizes.tp; ++t)
      inbox.add(credit_channel(channel_into_slot(layout.index(r, 0, t))), driver);
  }
}

std::vector<caf::actor> spawn_slots(caf::actor_system& system, const PipelineLayout& layout,
                                    int node, const ComputeFactory& make_compute,
                                    const NodePlane& plane, caf::actor parent,
                                    const TraceFn& trace, ProgressBoard* progress) {
  std::vector<caf::actor> handles(layout.slots.size());
  for (size_t i = 0; i < layout.slots.size(); ++i) {
    const SlotSpec& slot = layout.slots[i];
    if (slot.node != node) continue;
    StageSetup setup;
    setup.name = slot.name();
    setup.node = node;
    setup.device = slot.device;
    setup.slowdown = slot.slowdown;
    try {
      setup.compute = make_compute(slot);
    } catch (...) {  // the stages spawned so far would wait for routes forever
      for (auto& handle : handles)
        if (handle) caf::anon_send(handle, abort_atom::value, std::string("stopped"));
      throw;
    }
    setup.groups = layout.groups[size_t(slot.replica)];
    setup.by_arrival = layout.by_arrival;
    setup.plane = plane.plane;
    setup.parent = parent;
    if (progress) setup.progress = progress->add(setup.name);
    if (trace) setup.trace = [trace, slot](const std::string& event) { trace(slot, event); };
    handles[i] = spawn_stage(system, std::move(setup));
    if (plane.inbox) {
      plane.inbox->add(channel_into_slot(int(i)), handles[i]);
      if (const std::uint32_t out = output_link(layout, int(i)); out != 0)
        plane.inbox->add(credit_channel(out), handles[i]);
    }
  }
  return handles;
}

void connect_slots(const PipelineLayout& layout, int node, const std::vector<caf::actor>& handles,
                   const caf::actor& driver) {
  const auto [dp, pp, tp] = layout.sizes;
  for (int r = 0; r < dp; ++r)
    for (int s = 0; s < pp; ++s)
      for (int t = 0; t < tp; ++t) {
        const int i = layout.index(r, s, t);
        const SlotSpec& slot = layout.slots[size_t(i)];
        if (slot.node != node) continue;
        auto routes = std::make_shared<StageRoutes>();
        routes->input_slots = layout.input_slots[size_t(s)];
        if (s == 0)
          routes->upstream = {driver, 0, channel_into_slot(i), "the driver"};
        else
          routes->upstream = {handles[size_t(layout.index(r, s - 1, t))],
                              layout.slot(r, s - 1, t).node, channel_into_slot(i),
                              layout.slot(r, s - 1, t).name()};
        if (s + 1 < pp) {
          const int next = layout.index(r, s + 1, t);
          routes->downstream = {handles[size_t(next)], layout.slots[size_t(next)].node,
                                channel_into_slot(next), layout.slots[size_t(next)].name()};
          routes->downstream_slots = layout.input_slots[size_t(s + 1)];
        } else if (t == 0) {
          routes->downstream = {driver, 0, channel_to_driver(r), "the driver"};
          routes->downstream_slots = int(layout.groups[size_t(r)].size());
        }
        caf::anon_send(handles[size_t(i)], routes_atom::value, StageRoutesPtr(routes));
      }
  if (node == 0 && driver) {
    auto routes = std::make_shared<std::vector<ReplicaRoutes>>();
    for (int r = 0; r < dp; ++r) {
      ReplicaRoutes rr;
      for (int t = 0; t < tp; ++t) {
        const int i = layout.index(r, 0, t);
        rr.first_stage.push_back({handles[size_t(i)], layout.slots[size_t(i)].node,
                                  channel_into_slot(i)});
      }
      const int last = layout.index(r, pp - 1, 0);
      rr.last_stage = {handles[size_t(last)], layout.slots[size_t(last)].node,
                       channel_to_driver(r)};
      rr.first_stage_slots = layout.input_slots[0];
      routes->push_back(std::move(rr));
    }
    caf::anon_send(driver, routes_atom::value, DriverRoutesPtr(routes));
  }
}

// What the supervisor of a local pipeline hands to wait(): every report, or the first error.
struct LocalPipeline::Outcome {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<wire::StageReport> reports;
  std::string failure;
  size_t expected = 0;
  bool complete() const { return !failure.empty() || reports.size() == expected; }
};

namespace {

// Collects the stages' reports; the first failure ends the job at once (the job's threads
// wake from PipelineClient::wait with it) instead of at wait().
caf::behavior supervise(caf::event_based_actor* self, std::shared_ptr<LocalPipeline::Outcome> outcome,
                        std::shared_ptr<PipelineClient> client) {
  return {
      [=](finished_atom, const wire::Bytes& bytes) {
        std::lock_guard lock(outcome->mutex);
        outcome->reports.push_back(wire::decode<wire::StageReport>(bytes));
        outcome->changed.notify_all();
      },
      [=](failed_atom, const std::string& what) {
        client->fail(what);
        std::lock_guard lock(outcome->mutex);
        if (outcome->failure.empty()) outcome->failure = what;
        outcome->changed.notify_all();
      },
      [=](stop_atom) { self->quit(); },
  };
}

}  // namespace

LocalPipeline::LocalPipeline(caf::actor_system& system, PipelineLayout layout,
                             const ComputeFactory& make_compute, const TraceFn& trace)
    : system_(system),
      layout_(std::move(layout)),
      client_(std::make_shared<PipelineClient>()),
      outcome_(std::make_shared<Outcome>()) {
  outcome_->expected = layout_.slots.size();
  supervisor_ = system_.spawn(supervise, outcome_, client_);
  driver_ = spawn_driver(system_, DriverSetup{.node = 0, .client = client_, .plane = nullptr});
  try {
    stages_ = spawn_slots(system_, layout_, 0, make_compute, NodePlane{}, supervisor_, trace);
    connect_slots(layout_, 0, stages_, driver_);
  } catch (...) {
    // A slot that could not be made (a bad model folder, say): stop the actors spawned so far,
    // or the actor system would wait for them forever when it shuts down.
    client_->fail("the pipeline could not be built");
    stop_all();
    caf::anon_send(supervisor_, stop_atom::value);
    throw;
  }
}

LocalPipeline::~LocalPipeline() {
  if (!waited_) {
    client_->fail("the pipeline was destroyed before its job finished");
    stop_all();
  }
  caf::anon_send(supervisor_, stop_atom::value);
}

void LocalPipeline::stop_all() {
  for (auto& stage : stages_)
    if (stage) caf::anon_send(stage, abort_atom::value, std::string("stopped"));
  caf::anon_send(driver_, stop_atom::value);
}

std::vector<wire::StageReport> LocalPipeline::wait(std::chrono::milliseconds timeout) {
  waited_ = true;
  std::unique_lock lock(outcome_->mutex);
  if (!outcome_->changed.wait_for(lock, timeout, [&] { return outcome_->complete(); }))
    outcome_->failure = str_cat("the pipeline did not finish within ", timeout.count(), " ms (",
                                outcome_->expected - outcome_->reports.size(),
                                " stages still running)");
  if (!outcome_->failure.empty()) {
    const std::string failure = outcome_->failure;
    lock.unlock();
    client_->fail(failure);
    stop_all();
    LIBAI_THROW(CommunicationError, failure);
  }
  caf::anon_send(driver_, stop_atom::value);
  return outcome_->reports;
}

}  // namespace libai::actors
