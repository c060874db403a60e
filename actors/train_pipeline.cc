#include "actors/train_pipeline.h"

#include <set>

#include "runtime/error.h"

namespace libai::actors {

using schedule::ActionKind;

void check_train_programs(const PipelineLayout& layout, const TrainPrograms& programs) {
  const int pp = layout.sizes.pp;
  LIBAI_CHECK(int(programs.programs.size()) == pp, "training programs: ", programs.programs.size(),
              " programs for ", pp, " pipeline stages");
  LIBAI_CHECK(programs.chunks >= 1, "training programs: ", programs.chunks, " chunks per stage");
  std::set<int> micro_batches;
  for (const auto& a : programs.programs[0]) micro_batches.insert(a.micro_batch);
  for (int d = 0; d < pp; ++d) {
    std::set<std::tuple<int, int, int>> seen;  // (kind, chunk, micro-batch)
    for (const auto& a : programs.programs[size_t(d)]) {
      LIBAI_CHECK(a.chunk >= 0 && a.chunk < programs.chunks, "training program of stage ", d,
                  ": ", train_action_name(a), " names chunk ", a.chunk, " of ", programs.chunks);
      LIBAI_CHECK(seen.insert({int(a.kind), a.chunk, a.micro_batch}).second,
                  "training program of stage ", d, ": ", train_action_name(a), " twice");
      if (a.kind == ActionKind::backward)
        LIBAI_CHECK(seen.count({int(ActionKind::forward), a.chunk, a.micro_batch}),
                    "training program of stage ", d, ": ", train_action_name(a),
                    " before its forward");
    }
    const size_t expected = micro_batches.size() * size_t(programs.chunks) * 2;
    LIBAI_CHECK(seen.size() == expected, "training program of stage ", d, " runs ", seen.size(),
                " actions; ", micro_batches.size(), " micro-batches x ", programs.chunks,
                " chunks need ", expected);
    for (const auto& [kind, chunk, micro_batch] : seen)
      LIBAI_CHECK(micro_batches.count(micro_batch), "training program of stage ", d,
                  " runs micro-batch ", micro_batch, ", which stage 0 does not");
  }
}

StepSummary TrainStageCompute::control(const wire::TrainControl&) {
  LIBAI_THROW(Unsupported, "this training stage takes no checkpoint or evaluation controls");
}

PipelineLayout make_train_layout(LayoutSizes sizes) { return make_layout(sizes, sizes.dp); }

std::uint32_t train_channel(int slot, int chunk, bool gradient, int chunks) {
  // Channels 1.. are the forward pipelines', 0xf000.. the driver's: training links take
  // 0x8000-0xefff, two per (slot, chunk).
  const long index = (long(slot) * chunks + chunk) * 2 + (gradient ? 1 : 0);
  LIBAI_CHECK(index < 0x7000, "training pipeline: ", slot + 1, " slots x ", chunks,
              " chunks need more data-plane channels than there are");
  return std::uint32_t(0x8000 + index);
}

namespace {

// Slot i's links (Note [Training packets]): per chunk, its activations in (but on the first
// virtual stage) and its gradients in (but on the last); and the credits for the activations
// it sends downstream.
void add_train_channels(const PipelineLayout& layout, int chunks, int i, PacketInbox& inbox,
                        const caf::actor& stage) {
  const SlotSpec& slot = layout.slots[size_t(i)];
  const int pp = layout.sizes.pp;
  for (int c = 0; c < chunks; ++c) {
    const int virtual_stage = c * pp + slot.stage;
    if (virtual_stage > 0) inbox.add(train_channel(i, c, false, chunks), stage);
    if (virtual_stage + 1 < chunks * pp) {
      inbox.add(train_channel(i, c, true, chunks), stage);
      const int down = layout.index(slot.replica, (virtual_stage + 1) % pp, slot.rank);
      inbox.add(credit_channel(train_channel(down, (virtual_stage + 1) / pp, false, chunks)), stage);
    }
  }
}

}  // namespace

std::vector<caf::actor> spawn_train_slots(caf::actor_system& system, const PipelineLayout& layout,
                                          const TrainPrograms& programs, int node,
                                          const TrainComputeFactory& make_compute,
                                          const NodePlane& plane, caf::actor parent,
                                          const TraceFn& trace, ProgressBoard* progress) {
  check_train_programs(layout, programs);
  std::vector<caf::actor> handles(layout.slots.size());
  for (size_t i = 0; i < layout.slots.size(); ++i) {
    const SlotSpec& slot = layout.slots[i];
    if (slot.node != node) continue;
    TrainStageSetup setup;
    setup.name = slot.name();
    setup.slot = int(i);
    setup.node = node;
    setup.device = slot.device;
    setup.slowdown = slot.slowdown;
    try {
      setup.compute = make_compute(slot);
    } catch (...) {
      // The stages spawned so far would keep the actor system alive: end them first.
      for (const caf::actor& stage : handles)
        if (stage) caf::anon_send(stage, abort_atom::value, std::string("a slot failed to build"));
      throw;
    }
    setup.program = programs.programs[size_t(slot.stage)];
    setup.plane = plane.plane;
    setup.parent = parent;
    if (progress) setup.progress = progress->add(setup.name);
    if (trace) setup.trace = [trace, slot](const std::string& event) { trace(slot, event); };
    handles[i] = spawn_train_stage(system, std::move(setup));
    if (plane.inbox) add_train_channels(layout, programs.chunks, int(i), *plane.inbox, handles[i]);
  }
  return handles;
}

void connect_train_slots(const PipelineLayout& layout, const TrainPrograms& programs, int node,
                         const std::vector<caf::actor>& handles, const caf::actor& driver) {
  const auto [dp, pp, tp] = layout.sizes;
  const int chunks = programs.chunks;
  for (int r = 0; r < dp; ++r)
    for (int d = 0; d < pp; ++d)
      for (int t = 0; t < tp; ++t) {
        const int i = layout.index(r, d, t);
        if (layout.slots[size_t(i)].node != node) continue;
        auto routes = std::make_shared<TrainRoutes>();
        routes->driver = driver;
        for (int c = 0; c < chunks; ++c) {
          TrainLink link;
          const int virtual_stage = c * pp + d;
          if (virtual_stage > 0) {
            const int up_device = (virtual_stage - 1) % pp, up_chunk = (virtual_stage - 1) / pp;
            const int up = layout.index(r, up_device, t);
            link.upstream = {handles[size_t(up)], layout.slots[size_t(up)].node,
                             train_channel(up, up_chunk, true, chunks),
                             layout.slots[size_t(up)].name()};
            link.upstream_chunk = up_chunk;
            link.input_channel = train_channel(i, c, false, chunks);
          }
          if (virtual_stage + 1 < chunks * pp) {
            const int down_device = (virtual_stage + 1) % pp, down_chunk = (virtual_stage + 1) / pp;
            const int down = layout.index(r, down_device, t);
            link.downstream = {handles[size_t(down)], layout.slots[size_t(down)].node,
                               train_channel(down, down_chunk, false, chunks),
                               layout.slots[size_t(down)].name()};
            link.downstream_chunk = down_chunk;
            link.downstream_slots =
                train_input_quota(programs.programs[size_t(down_device)], down_chunk);
          }
          routes->chunks.push_back(link);
        }
        caf::anon_send(handles[size_t(i)], routes_atom::value, TrainRoutesPtr(routes));
      }
  if (node == 0 && driver)
    caf::anon_send(driver, routes_atom::value,
                   TrainDriverStagesPtr(std::make_shared<std::vector<caf::actor>>(handles)));
}

StepSummary merge_summaries(const std::vector<StepSummary>& summaries) {
  StepSummary total;
  for (const StepSummary& s : summaries) {
    total.loss_sum += s.loss_sum;
    total.loss_count += s.loss_count;
    total.grad_norm = std::max(total.grad_norm, s.grad_norm);
    total.skipped = total.skipped || s.skipped;
    for (const auto& [name, value] : s.extra) total.extra[name] += value;
  }
  return total;
}

// ---------------------------------------------------------------------------------------------

void TrainClient::attach(caf::actor driver) {
  std::lock_guard lock(mutex_);
  driver_ = std::move(driver);
}

TrainStepResult TrainClient::run_step(int step, std::chrono::milliseconds timeout) {
  return exchange(step, str_cat("training step ", step), caf::make_message(step_atom::value, step),
                  timeout);
}

TrainStepResult TrainClient::run_control(const wire::TrainControl& command,
                                         std::chrono::milliseconds timeout) {
  const char* names[] = {"saving a checkpoint", "loading a checkpoint", "evaluation"};
  return exchange(kControlStep, names[int(command.kind)],
                  caf::make_message(control_atom::value, wire::encode(command)), timeout);
}

TrainStepResult TrainClient::exchange(int step, const std::string& what,
                                      const caf::message& message,
                                      std::chrono::milliseconds timeout) {
  caf::actor driver;
  {
    std::lock_guard lock(mutex_);
    if (!failure_.empty()) LIBAI_THROW(CommunicationError, failure_);
    driver = driver_;
    result_.reset();
  }
  LIBAI_CHECK(driver != nullptr, "TrainClient: ", what, " before the driver started");
  const auto start = std::chrono::steady_clock::now();
  caf::anon_send(driver, message);
  std::unique_lock lock(mutex_);
  if (!arrived_.wait_for(lock, timeout, [&] { return !failure_.empty() || result_.has_value(); }))
    failure_ = str_cat(what, " did not finish within ", timeout.count(), " ms");
  if (!failure_.empty()) LIBAI_THROW(CommunicationError, failure_);
  TrainStepResult result = std::move(*result_);
  result_.reset();
  LIBAI_CHECK(result.step == step, "training driver: step ", result.step, " came back for ", step);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

void TrainClient::finish() {
  caf::actor driver;
  {
    std::lock_guard lock(mutex_);
    driver = driver_;
  }
  if (driver) caf::anon_send(driver, stop_atom::value);
}

void TrainClient::fail(const std::string& reason) {
  {
    std::lock_guard lock(mutex_);
    if (failure_.empty()) failure_ = reason;
  }
  arrived_.notify_all();
}

bool TrainClient::failed() const {
  std::lock_guard lock(mutex_);
  return !failure_.empty();
}

std::string TrainClient::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

void TrainClient::deliver(TrainStepResult result) {
  {
    std::lock_guard lock(mutex_);
    result_ = std::move(result);
  }
  arrived_.notify_all();
}

namespace {

struct TrainDriverState {
  std::shared_ptr<TrainClient> client;
  TrainDriverStagesPtr stages;
  int step = -1;
  std::vector<std::optional<StepSummary>> summaries;
  size_t missing = 0;
  static inline const char* name = "libai.train_driver";
};

caf::behavior train_driver(caf::stateful_actor<TrainDriverState>* self,
                           std::shared_ptr<TrainClient> client) {
  self->state.client = std::move(client);
  return {
      [=](routes_atom, const TrainDriverStagesPtr& stages) { self->state.stages = stages; },
      [=](step_atom, int step) {
        auto& st = self->state;
        if (!st.stages) {
          st.client->fail("training driver: a step before the stages were connected");
          return;
        }
        st.step = step;
        st.summaries.assign(st.stages->size(), std::nullopt);
        st.missing = st.stages->size();
        for (const caf::actor& stage : *st.stages) self->send(stage, step_atom::value, step);
      },
      [=](control_atom, const wire::Bytes& command) {
        auto& st = self->state;
        if (!st.stages) {
          st.client->fail("training driver: a control before the stages were connected");
          return;
        }
        st.step = TrainClient::kControlStep;
        st.summaries.assign(st.stages->size(), std::nullopt);
        st.missing = st.stages->size();
        for (const caf::actor& stage : *st.stages) self->send(stage, control_atom::value, command);
      },
      [=](control_done_atom, int slot, const wire::Bytes& bytes) {
        self->send(self, step_done_atom::value, slot, int(TrainClient::kControlStep), bytes);
      },
      [=](step_done_atom, int slot, int step, const wire::Bytes& bytes) {
        auto& st = self->state;
        try {
          LIBAI_CHECK_KIND(CorruptInput, step == st.step && slot >= 0 &&
                                             size_t(slot) < st.summaries.size() &&
                                             !st.summaries[size_t(slot)],
                           "training driver: an unexpected report (slot ", slot, ", step ", step,
                           ") during step ", st.step);
          st.summaries[size_t(slot)] = wire::decode<wire::StepSummary>(bytes);
          if (--st.missing > 0) return;
          TrainStepResult result;
          result.step = step;
          for (auto& s : st.summaries) result.slots.push_back(std::move(*s));
          result.total = merge_summaries(result.slots);
          st.client->deliver(std::move(result));
        } catch (const std::exception& e) {
          st.client->fail(e.what());
        }
      },
      [=](stop_atom) {
        if (self->state.stages)
          for (const caf::actor& stage : *self->state.stages) self->send(stage, stop_atom::value);
      },
      [=](abort_atom) { self->quit(); },
  };
}

}  // namespace

caf::actor spawn_train_driver(caf::actor_system& system, std::shared_ptr<TrainClient> client) {
  caf::actor driver = system.spawn(train_driver, client);
  client->attach(driver);
  return driver;
}

// ---------------------------------------------------------------------------------------------

struct LocalTrainPipeline::Outcome {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<wire::StageReport> reports;
  std::string failure;
  size_t expected = 0;
  bool complete() const { return !failure.empty() || reports.size() == expected; }
};

namespace {

caf::behavior supervise_training(caf::event_based_actor* self,
                                 std::shared_ptr<LocalTrainPipeline::Outcome> outcome,
                                 std::shared_ptr<TrainClient> client) {
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

LocalTrainPipeline::LocalTrainPipeline(caf::actor_system& system, PipelineLayout layout,
                                       TrainPrograms programs, const TrainComputeFactory& make_compute,
                                       const TraceFn& trace)
    : system_(system),
      layout_(std::move(layout)),
      client_(std::make_shared<TrainClient>()),
      outcome_(std::make_shared<Outcome>()) {
  outcome_->expected = layout_.slots.size();
  supervisor_ = system_.spawn(supervise_training, outcome_, client_);
  driver_ = spawn_train_driver(system_, client_);
  try {
    stages_ = spawn_train_slots(system_, layout_, programs, 0, make_compute, NodePlane{},
                                supervisor_, trace);
  } catch (...) {
    // No destructor runs for a constructor that throws: the driver and the supervisor would
    // keep the actor system (and so the process) waiting for them.
    caf::anon_send(driver_, abort_atom::value);
    caf::anon_send(supervisor_, stop_atom::value);
    throw;
  }
  connect_train_slots(layout_, programs, 0, stages_, driver_);
}

LocalTrainPipeline::~LocalTrainPipeline() {
  if (!finished_) {
    client_->fail("the training pipeline was destroyed before its job finished");
    stop_all();
  }
  caf::anon_send(driver_, abort_atom::value);
  caf::anon_send(supervisor_, stop_atom::value);
}

void LocalTrainPipeline::stop_all() {
  for (auto& stage : stages_)
    if (stage) caf::anon_send(stage, abort_atom::value, std::string("stopped"));
}

std::vector<wire::StageReport> LocalTrainPipeline::finish(std::chrono::milliseconds timeout) {
  finished_ = true;
  const std::string failed = client_->failure();
  if (failed.empty()) client_->finish();
  std::unique_lock lock(outcome_->mutex);
  if (!failed.empty() && outcome_->failure.empty()) outcome_->failure = failed;
  if (!outcome_->changed.wait_for(lock, timeout, [&] { return outcome_->complete(); }))
    outcome_->failure = str_cat("the training pipeline did not finish within ", timeout.count(),
                                " ms (", outcome_->expected - outcome_->reports.size(),
                                " stages still running)");
  if (!outcome_->failure.empty()) {
    const std::string failure = outcome_->failure;
    lock.unlock();
    client_->fail(failure);
    stop_all();
    LIBAI_THROW(CommunicationError, failure);
  }
  return outcome_->reports;
}

}  // namespace libai::actors
