#include "train/pipeline_eager.h"

#include "ops/ops.h"
#include "runtime/autograd.h"
#include "runtime/error.h"
#include "train/loss.h"

namespace libai::train {
namespace {

enum class Direction : uint32_t { forward = 0, backward = 1 };

// Direction, receiving virtual stage and micro-batch: one tag per message of a step.
uint32_t tag_of(Direction direction, int virtual_stage, int micro_batch) {
  LIBAI_CHECK(virtual_stage < (1 << 15) && micro_batch < (1 << 16),
              "eager pipeline: virtual stage ", virtual_stage, " / micro-batch ", micro_batch,
              " beyond the message tags' range");
  return (uint32_t(direction) << 31) | (uint32_t(virtual_stage) << 16) | uint32_t(micro_batch);
}

}  // namespace

PipelineRankSetup make_pipeline_rank(std::shared_ptr<comm::Communicator> world,
                                     const comm::DeviceMesh& mesh) {
  LIBAI_CHECK(world, "make_pipeline_rank: no world communicator");
  comm::MeshGroups g = comm::make_mesh_groups(*world, mesh);
  PipelineRankSetup setup;
  setup.coordinates = g.coordinates;
  setup.groups.world = world;
  if (mesh.tp > 1) setup.groups.tp = g.tp;
  if (mesh.dp > 1) setup.groups.dp = g.dp;
  if (mesh.pp > 1) setup.groups.pp = g.pp;
  // The first and last stage of every (replica, tensor rank): every rank takes part in every
  // new_group call, in the same order.
  if (mesh.pp > 1)
    for (int d = 0; d < mesh.dp; ++d)
      for (int t = 0; t < mesh.tp; ++t) {
        auto group = world->new_group({mesh.rank_of({.dp = d, .pp = 0, .tp = t}),
                                       mesh.rank_of({.dp = d, .pp = mesh.pp - 1, .tp = t})});
        if (group) setup.groups.tied = group;
      }
  return setup;
}

std::vector<models::StageSpec> virtual_stage_parts(int num_layers, int num_virtual_stages) {
  LIBAI_CHECK(num_virtual_stages >= 1 && num_layers >= num_virtual_stages, "pipeline: ", num_layers,
              " layers cannot be cut into ", num_virtual_stages,
              " (virtual) stages of at least one layer each");
  std::vector<models::StageSpec> specs;
  int first = 0;
  for (int k = 0; k < num_virtual_stages; ++k) {
    const int size = num_layers / num_virtual_stages + (k < num_layers % num_virtual_stages);
    specs.push_back({first, first + size, num_layers});
    first += size;
  }
  return specs;
}

schedule::PipelineProgram pipeline_program(const std::string& name, int num_stages,
                                           int num_micro_batches, int num_chunks) {
  LIBAI_CHECK(num_chunks == 1 || name == "interleaved", "pipeline schedule ", name, " runs ",
              "one model chunk per device; virtual_pipeline_size ", num_chunks,
              " needs pipeline_schedule interleaved");
  if (name == "gpipe") return schedule::gpipe(num_stages, num_micro_batches);
  if (name == "1f1b") return schedule::one_f_one_b(num_stages, num_micro_batches);
  if (name == "interleaved") {
    LIBAI_CHECK(num_chunks == 1 || num_micro_batches % num_stages == 0,
                "pipeline schedule interleaved: num_accumulation_steps (", num_micro_batches,
                ") must be a multiple of the pipeline stages (", num_stages, ")");
    return schedule::interleaved_one_f_one_b(num_stages, num_micro_batches, num_chunks);
  }
  LIBAI_THROW(InvalidArgument, "pipeline schedule '", name,
              "': the schedules are gpipe, 1f1b and interleaved");
}

void send_tensor_map(comm::Communicator& comm, const models::TensorMap& map, int peer, uint32_t tag,
                     std::vector<comm::WorkHandle>& pending) {
  std::vector<int64_t> header{int64_t(map.size())};
  std::vector<Tensor> data;
  for (const auto& [name, tensor] : map) {
    header.push_back(int64_t(tensor.dtype()));
    header.push_back(tensor.dim());
    for (int64_t d : tensor.shape()) header.push_back(d);
    header.push_back(int64_t(name.size()));
    header.insert(header.end(), name.begin(), name.end());
    data.push_back(ops::contiguous(tensor.detach()));
  }
  pending.push_back(
      comm.send_async(Tensor::from_vector<int64_t>({int64_t(header.size())}, {1}), peer, tag));
  pending.push_back(
      comm.send_async(Tensor::from_vector<int64_t>(header, {int64_t(header.size())}), peer, tag));
  for (Tensor& t : data) pending.push_back(comm.send_async(t, peer, tag));
}

models::TensorMap recv_tensor_map(comm::Communicator& comm, int peer, uint32_t tag) {
  Tensor length = Tensor::empty({1}, DType::i64);
  comm.recv(length, peer, tag);
  Tensor header_tensor = Tensor::empty({length.data<int64_t>()[0]}, DType::i64);
  comm.recv(header_tensor, peer, tag);
  const std::vector<int64_t> header = header_tensor.to_vector<int64_t>();
  models::TensorMap map;
  size_t i = 0;
  const int64_t count = header.at(i++);
  for (int64_t n = 0; n < count; ++n) {
    const DType dtype = DType(header.at(i++));
    Shape shape(size_t(header.at(i++)));
    for (auto& d : shape) d = header.at(i++);
    const size_t name_length = size_t(header.at(i++));
    std::string name;
    for (size_t c = 0; c < name_length; ++c) name.push_back(char(header.at(i++)));
    Tensor t = Tensor::empty(shape, dtype);
    comm.recv(t, peer, tag);
    map.emplace(std::move(name), std::move(t));
  }
  return map;
}

EagerPipelineRank::EagerPipelineRank(StageStep& step, schedule::StageProgram program,
                                     StageLayout layout, std::shared_ptr<comm::Communicator> pp)
    : step_(step), program_(std::move(program)), layout_(layout), pp_(std::move(pp)) {
  LIBAI_CHECK(layout_.pp == 1 || (pp_ && pp_->size() == layout_.pp && pp_->rank() == layout_.stage),
              "eager pipeline: stage ", layout_.stage, " of ", layout_.pp,
              " needs the pipeline group with its rank at the stage's index");
}

StepResult EagerPipelineRank::run(const std::vector<models::TensorMap>& micro_batches) {
  const int pp = layout_.pp, stage = layout_.stage;
  const int last = pp * layout_.num_chunks - 1;
  std::vector<comm::WorkHandle> pending;
  for (const schedule::Action& action : program_) {
    const int mb = action.micro_batch;
    LIBAI_CHECK(mb >= 0 && size_t(mb) < micro_batches.size(), "eager pipeline: the program names ",
                "micro-batch ", mb, ", the step has ", micro_batches.size());
    const int k = action.chunk * pp + stage;  // Note [Virtual stages]
    const int next = (stage + 1) % pp, previous = (stage + pp - 1) % pp;
    if (action.kind == schedule::ActionKind::forward) {
      models::TensorMap received;
      if (k > 0) received = recv_tensor_map(*pp_, previous, tag_of(Direction::forward, k, mb));
      models::TensorMap sent = step_.forward(action.chunk, mb, micro_batches[size_t(mb)], received);
      if (k < last)
        send_tensor_map(*pp_, sent, next, tag_of(Direction::forward, k + 1, mb), pending);
    } else {
      models::TensorMap grads;
      if (k < last) grads = recv_tensor_map(*pp_, next, tag_of(Direction::backward, k, mb));
      models::TensorMap upstream = step_.backward(action.chunk, mb, grads);
      if (k > 0)
        send_tensor_map(*pp_, upstream, previous, tag_of(Direction::backward, k - 1, mb), pending);
    }
  }
  for (auto& work : pending) work->wait();
  return step_.end_step();
}

PipelineEvalSums evaluate_pipeline(const std::vector<models::Model*>& parts, StageLayout layout,
                                   const std::shared_ptr<comm::Communicator>& pp,
                                   const std::vector<models::TensorMap>& batches) {
  autograd::NoGradGuard no_grad;
  const int stages = layout.pp, stage = layout.stage, last = stages * layout.num_chunks - 1;
  PipelineEvalSums sums;
  // Micro-batch by micro-batch, chunk by chunk: every message depends only on ones earlier in
  // that order, which every rank follows, and sends never wait.
  for (size_t mb = 0; mb < batches.size(); ++mb)
    for (int c = 0; c < layout.num_chunks; ++c) {
      const int k = c * stages + stage;
      models::Model& part = *parts[size_t(c)];
      models::TensorMap in = k < last ? model_inputs(part, batches[mb]) : batches[mb];
      if (k > 0)
        for (auto& [name, t] : recv_tensor_map(*pp, (stage + stages - 1) % stages,
                                               tag_of(Direction::forward, k, int(mb))))
          in[name] = t;
      if (k < last) {
        std::vector<comm::WorkHandle> pending;
        send_tensor_map(*pp, part.forward(in), (stage + 1) % stages,
                        tag_of(Direction::forward, k + 1, int(mb)), pending);
        for (auto& w : pending) w->wait();
        continue;
      }
      const LossOutput out = compute_loss(part, in);
      sums.loss += out.loss.item<double>();
      ++sums.batches;
      const models::Task task = part.task();
      if ((task == models::Task::sequence_classification ||
           task == models::Task::image_classification) &&
          out.logits.defined()) {
        auto p = ops::argmax(out.logits, -1).to_vector<int64_t>();
        auto l = batches[mb].at("labels").to_vector<int64_t>();
        for (size_t i = 0; i < p.size(); ++i) sums.correct += p[i] == l[i];
        sums.seen += double(p.size());
      }
    }
  return sums;
}

}  // namespace libai::train
