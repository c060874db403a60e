#include "actors/jobs/model_train.h"

#include <thread>

#include "models/init.h"
#include "runtime/comm/local_communicator.h"
#include "runtime/comm/ucx_communicator.h"
#include "runtime/error.h"
#include "schedule/partition.h"

namespace libai::actors {

models::StageSpec uniform_virtual_stage(int num_layers, int virtual_stages, int v) {
  const schedule::StageAssignment stage_of = schedule::uniform_partition(num_layers, virtual_stages);
  models::StageSpec spec{.first_layer = -1, .last_layer = -1, .num_layers = num_layers};
  for (int layer = 0; layer < num_layers; ++layer)
    if (stage_of[size_t(layer)] == v) {
      if (spec.first_layer < 0) spec.first_layer = layer;
      spec.last_layer = layer + 1;
    }
  LIBAI_CHECK(spec.first_layer >= 0, "virtual stage ", v, " of ", virtual_stages, " has no layer of ",
              num_layers);
  return spec;
}

namespace {

std::unique_ptr<models::Model> build_part(const ModelTrainOptions& o, const models::StageSpec& spec) {
  if (!o.weights.empty()) return models::load_model(o.weights, {.tp = o.tp, .part = spec});
  auto model = models::create_model(o.model_config, {.tp = o.tp}, spec);
  models::init_parameters(*model, o.train.step.seed);
  return model;
}

}  // namespace

ModelTrainCompute::ModelTrainCompute(ModelTrainOptions options)
    : options_(std::move(options)), schedule_(options_.train.schedule) {
  LIBAI_CHECK(int(options_.parts.size()) == options_.layout.num_chunks, "model training: ",
              options_.parts.size(), " parts for ", options_.layout.num_chunks, " chunks");
  LIBAI_CHECK(bool(options_.data) && bool(options_.groups),
              "model training: the slot needs its data and its groups");
  std::vector<models::Model*> raw;
  for (const models::StageSpec& spec : options_.parts) {
    parts_.push_back(build_part(options_, spec));
    parts_.back()->set_requires_grad(true);
    raw.push_back(parts_.back().get());
  }
  optimizer_ = train::make_optimizer(train::stage_param_groups(raw, options_.train.groups),
                                     options_.train.optimizer);
  // Note [Stage steps form together]: building a StageStep may run collectives with the
  // other slots (the tied weights' first agreement, ...). The slots' first actions do not run
  // together (stage 1 waits for stage 0's first forward), so each slot builds its StageStep
  // on a thread of its own from here, and its first action waits for it.
  pending_step_ = std::async(std::launch::async, [this, raw] {
    train::StageGroups groups = options_.groups();
    groups.tp = options_.tp;
    groups_ = groups;
    return std::make_unique<train::StageStep>(raw, *optimizer_, &schedule_, options_.train.step,
                                              options_.layout, std::move(groups));
  });
}

ModelTrainCompute::~ModelTrainCompute() = default;

train::StageStep& ModelTrainCompute::stage_step() {
  if (!step_) {
    step_ = pending_step_.get();
    if (steps_before_ >= 0) step_->set_steps_done(steps_before_);
  }
  return *step_;
}

template <typename F>
auto ModelTrainCompute::guarded(const char* what, F&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    if (options_.on_error) options_.on_error(str_cat(what, ": ", e.what()));
    throw;
  }
}

const models::TensorMap& ModelTrainCompute::batch(int step, int micro_batch) {
  auto it = batches_.find({step, micro_batch});
  if (it == batches_.end())
    it = batches_.emplace(std::pair{step, micro_batch},
                          options_.data(step, options_.layout.dp_rank, micro_batch))
             .first;
  return it->second;
}

models::TensorMap ModelTrainCompute::forward(int step, int chunk, int micro_batch,
                                             const models::TensorMap& inputs) {
  return guarded("forward", [&] {
    return stage_step().forward(chunk, micro_batch, batch(step, micro_batch), inputs);
  });
}

models::TensorMap ModelTrainCompute::backward(int step, int chunk, int micro_batch,
                                              const models::TensorMap& output_grads) {
  return guarded("backward", [&] {
    models::TensorMap grads = stage_step().backward(chunk, micro_batch, output_grads);
    // The last chunk's backward of a micro-batch is its last use of the batch here.
    if (chunk == 0) batches_.erase({step, micro_batch});
    return grads;
  });
}

StepSummary ModelTrainCompute::end_step(int step) {
  return guarded("end of step", [&] {
    const train::StepResult r = stage_step().end_step();
    batches_.erase(batches_.begin(), batches_.lower_bound({step + 1, 0}));
    StepSummary summary;
    if (options_.reports_loss) {
      summary.loss_sum = r.loss;
      summary.loss_count = 1;
    }
    summary.grad_norm = r.grad_norm;
    summary.skipped = r.skipped;
    // Every rank has the same figures; one slot per replica reports them, so the driver
    // divides the sums by the loss count.
    if (options_.reports_loss) {
      summary.extra = {{"lr", r.lr},
                       {"loss_scale", r.loss_scale},
                       {"samples", double(r.samples)},
                       {"targets", double(r.targets)}};
      for (const auto& [name, value] : r.parts) summary.extra[name] = value;
    }
    return summary;
  });
}

StepSummary ModelTrainCompute::control(const wire::TrainControl& command) {
  switch (command.kind) {
    case wire::TrainControlKind::save:
      return guarded("saving a checkpoint", [&] { return save(command); });
    case wire::TrainControlKind::load:
      return guarded("loading a checkpoint", [&] { return load(command); });
    case wire::TrainControlKind::evaluate: return guarded("evaluation", [&] { return evaluate(); });
  }
  LIBAI_THROW(CorruptInput, "model training: an unknown control");
}

// ---------------------------------------------------------------------------------------------
// Groups.

TrainGroupMembers train_group_members(const PipelineLayout& layout) {
  const auto [dp, pp, tp] = layout.sizes;
  TrainGroupMembers m;
  m.world = int(layout.slots.size());
  for (int r = 0; r < dp; ++r)
    for (int s = 0; s < pp; ++s) {
      std::vector<int> group;
      for (int t = 0; t < tp; ++t) group.push_back(layout.index(r, s, t));
      m.tp.push_back(group);
    }
  for (int s = 0; s < pp; ++s)
    for (int t = 0; t < tp; ++t) {
      std::vector<int> group;
      for (int r = 0; r < dp; ++r) group.push_back(layout.index(r, s, t));
      m.dp.push_back(group);
    }
  if (pp > 1)
    for (int r = 0; r < dp; ++r)
      for (int t = 0; t < tp; ++t) {
        m.tied.push_back({layout.index(r, 0, t), layout.index(r, pp - 1, t)});
        std::vector<int> group;
        for (int s = 0; s < pp; ++s) group.push_back(layout.index(r, s, t));
        m.pp.push_back(group);
      }
  return m;
}

namespace {

// Gives each member slot of every group in `groups` its LocalGroup communicator.
void assign_local(const std::vector<std::vector<int>>& groups, std::chrono::milliseconds timeout,
                  std::vector<train::StageGroups>& out,
                  std::shared_ptr<comm::Communicator> train::StageGroups::*field) {
  for (const auto& members : groups) {
    if (members.size() < 2) continue;
    auto comms = comm::LocalGroup::create(int(members.size()), timeout);
    for (size_t i = 0; i < members.size(); ++i) out[size_t(members[i])].*field = comms[i];
  }
}

}  // namespace

std::vector<train::StageGroups> local_train_groups(const PipelineLayout& layout,
                                                   std::chrono::milliseconds timeout) {
  const TrainGroupMembers m = train_group_members(layout);
  std::vector<train::StageGroups> out(size_t(m.world));
  assign_local(m.tp, timeout, out, &train::StageGroups::tp);
  assign_local(m.dp, timeout, out, &train::StageGroups::dp);
  assign_local(m.tied, timeout, out, &train::StageGroups::tied);
  assign_local(m.pp, timeout, out, &train::StageGroups::pp);
  std::vector<int> all(size_t(m.world));
  for (int i = 0; i < m.world; ++i) all[size_t(i)] = i;
  assign_local({all}, timeout, out, &train::StageGroups::world);
  return out;
}

void abort_local_groups(const train::StageGroups& groups, const std::string& reason) {
  for (const auto* c : {&groups.tp, &groups.dp, &groups.tied, &groups.pp, &groups.world})
    if (*c && std::string((*c)->backend()) == "local") comm::LocalGroup::abort(**c, reason);
}

ClusterSlotGroups cluster_train_groups(const PipelineLayout& layout, int node,
                                       comm::Communicator& data_plane, const std::string& addr,
                                       std::chrono::milliseconds timeout) {
  const TrainGroupMembers m = train_group_members(layout);
  // Slot 0 hosts the rendezvous; its node (node 0 unless a plan put stage 0 on another node's
  // device) tells the others the port (data-plane rank = node).
  const int root = layout.slots.at(0).node;
  ClusterSlotGroups out;
  // Tensor parallelism inside this node.
  for (const auto& members : m.tp) {
    if (layout.slots[size_t(members[0])].node != node) continue;
    for (int slot : members)
      LIBAI_CHECK(layout.slots[size_t(slot)].node == node, "tensor-parallel ranks of ",
                  layout.slots[size_t(slot)].name(), " span nodes: they must share one");
    if (members.size() < 2) continue;
    auto comms = comm::LocalGroup::create(int(members.size()), timeout);
    for (size_t i = 0; i < members.size(); ++i) out.tp[members[i]] = comms[i];
  }

  // One UCX world per slot (Note [Slot communicators across processes]).
  auto form = [m, timeout, addr](int slot, int port, std::shared_ptr<std::promise<int>> listening) {
    comm::UcxGroupOptions o;
    o.rank = slot;
    o.size = m.world;
    o.addr = addr;
    o.port = port;
    o.timeout = timeout;
    if (listening) o.on_listening = [listening](int p) { listening->set_value(p); };
    std::shared_ptr<comm::Communicator> world = comm::make_ucx_communicator(o);
    train::StageGroups g;
    g.world = world;
    // Every slot makes every group, in one order (new_group is a collective of the world).
    for (const auto& members : m.dp)
      if (members.size() > 1)
        if (auto c = world->new_group(members)) g.dp = c;
    for (const auto& members : m.tied)
      if (auto c = world->new_group(members)) g.tied = c;
    for (const auto& members : m.pp)
      if (auto c = world->new_group(members)) g.pp = c;
    return g;
  };
  auto launch = [&](int slot, int port, std::shared_ptr<std::promise<int>> listening) {
    std::packaged_task<train::StageGroups()> task(
        [form, slot, port, listening] { return form(slot, port, listening); });
    out.rest[slot] = task.get_future().share();
    std::thread(std::move(task)).detach();
  };
  Tensor port = Tensor::zeros({1}, DType::i64);
  if (node == root) {
    auto listening = std::make_shared<std::promise<int>>();
    auto told = listening->get_future();
    launch(0, 0, listening);
    LIBAI_CHECK_KIND(CommunicationError, told.wait_for(timeout) == std::future_status::ready,
                     "the training groups' rendezvous did not listen within ", timeout.count(), " ms");
    port.data<int64_t>()[0] = told.get();
  }
  data_plane.broadcast(port, root);
  for (size_t slot = 1; slot < layout.slots.size(); ++slot)
    if (layout.slots[slot].node == node) launch(int(slot), int(port.data<int64_t>()[0]), nullptr);
  return out;
}

}  // namespace libai::actors
