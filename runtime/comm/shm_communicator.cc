#include "runtime/comm/shm_communicator.h"

#include <algorithm>
#include <mutex>

#include "runtime/comm/process_group_checks.h"
#include "runtime/comm/shm_collectives.h"
#include "runtime/comm/shm_world.h"
#include "runtime/error.h"

namespace libai::comm {
namespace {

using shm::Collective;
using shm::CollectiveHeader;
using shm::CollectiveOp;
using shm::GroupView;
using shm::ShmWork;
using shm::ShmWorld;
using shm::Task;
using detail::header_of;

// A communicator's own state, shared with its queued operations.
struct Group {
  GroupView view;  // its counters: the operations thread only
  mutable std::mutex stats_mutex;
  CommStats stats;
};

constexpr const char* kBackend = "shm";

void check_tensor(const Tensor& t, const char* what, bool reduces) {
  detail::check_tensor(kBackend, t, what, reduces);
}

bool overlap(const Tensor& a, const Tensor& b) {
  const auto x = reinterpret_cast<std::uintptr_t>(a.data_ptr());
  const auto y = reinterpret_cast<std::uintptr_t>(b.data_ptr());
  return x < y + b.nbytes() && y < x + a.nbytes();
}

// `whole` holds size blocks of `part`'s size; `part` may be this rank's block of it, nothing
// else may overlap.
void check_pair(const Tensor& part, const Tensor& whole, int size, int rank, const char* what) {
  LIBAI_CHECK(whole.dtype() == part.dtype() && whole.numel() == part.numel() * size, "shm ", what,
              ": the full tensor (", whole.dtype(), ", shape ", whole.shape(), ") must hold ",
              size, " x the per-rank tensor's ", part.numel(), " ", part.dtype(), " elements");
  const auto* own_block = static_cast<const char*>(whole.data_ptr()) + part.nbytes() * rank;
  LIBAI_CHECK(own_block == part.data_ptr() || !overlap(part, whole), "shm ", what,
              ": input and output overlap (only this rank's block may alias)");
}

class ShmCommunicator final : public Communicator {
 public:
  ShmCommunicator(std::shared_ptr<ShmWorld> world, GroupView view)
      : world_(std::move(world)), group_(std::make_shared<Group>()) {
    group_->view = std::move(view);
  }

  int rank() const override { return group_->view.rank; }
  int size() const override { return group_->view.size(); }
  const char* backend() const override { return "shm"; }
  std::chrono::milliseconds timeout() const override { return world_->timeout(); }
  bool cross_memory_attach() const { return world_->cross_memory_attach(); }

  CommStats stats() const override {
    std::lock_guard lock(group_->stats_mutex);
    return group_->stats;
  }

  void abort(const std::string& reason) override { world_->abort(reason); }

  WorkHandle all_reduce_async(Tensor tensor, ReduceOp op) override {
    check_tensor(tensor, "all_reduce", true);
    const std::int64_t n = size(), bytes = std::int64_t(tensor.nbytes());
    count([&](CommStats& s) {
      ++s.all_reduce_calls;
      s.all_reduce_elements += tensor.numel();
      s.bytes_sent += bytes * (n - 1) / n;
    });
    return collective(CollectiveOp::all_reduce,
                      header_of(CollectiveOp::all_reduce, tensor, tensor, op, -1), {tensor},
                      [=](Collective& c) { shm::run_all_reduce(c, tensor, op); });
  }

  WorkHandle all_gather_async(Tensor input, Tensor output) override {
    check_tensor(input, "all_gather", false);
    check_tensor(output, "all_gather", false);
    check_pair(input, output, size(), rank(), "all_gather");
    count([&](CommStats& s) {
      ++s.all_gather_calls;
      s.all_gather_elements += output.numel();
      s.bytes_sent += std::int64_t(input.nbytes()) * (size() - 1);
    });
    return collective(CollectiveOp::all_gather,
                      header_of(CollectiveOp::all_gather, input, output, ReduceOp::sum, -1),
                      {input, output},
                      [=](Collective& c) { shm::run_all_gather(c, input, output); });
  }

  WorkHandle reduce_scatter_async(Tensor input, Tensor output, ReduceOp op) override {
    check_tensor(input, "reduce_scatter", true);
    check_tensor(output, "reduce_scatter", true);
    check_pair(output, input, size(), rank(), "reduce_scatter");
    const std::int64_t n = size(), bytes = std::int64_t(input.nbytes());
    count([&](CommStats& s) {
      ++s.reduce_scatter_calls;
      s.reduce_scatter_elements += input.numel();
      s.bytes_sent += bytes * (n - 1) / n;
    });
    return collective(CollectiveOp::reduce_scatter,
                      header_of(CollectiveOp::reduce_scatter, input, output, op, -1),
                      {input, output},
                      [=](Collective& c) { shm::run_reduce_scatter(c, input, output, op); });
  }

  WorkHandle broadcast_async(Tensor tensor, int root) override {
    check_tensor(tensor, "broadcast", false);
    detail::check_root(kBackend, root, size());
    count([&](CommStats& s) {
      ++s.broadcast_calls;
      s.broadcast_elements += tensor.numel();
      if (root == rank()) s.bytes_sent += std::int64_t(tensor.nbytes()) * (size() - 1);
    });
    return collective(CollectiveOp::broadcast,
                      header_of(CollectiveOp::broadcast, tensor, tensor, ReduceOp::sum, root),
                      {tensor}, [=](Collective& c) { shm::run_broadcast(c, tensor, root); });
  }

  WorkHandle send_async(Tensor tensor, int peer, uint32_t tag) override {
    return point_to_point(tensor, peer, tag, true);
  }
  WorkHandle recv_async(Tensor tensor, int peer, uint32_t tag) override {
    return point_to_point(tensor, peer, tag, false);
  }

  std::shared_ptr<Communicator> new_group(const std::vector<int>& ranks) override;

 private:
  void count(const std::function<void(CommStats&)>& add) {
    world_->throw_if_broken();
    std::lock_guard lock(group_->stats_mutex);
    add(group_->stats);
  }

  WorkHandle collective(CollectiveOp op, CollectiveHeader header, std::vector<Tensor> tensors,
                        std::function<void(Collective&)> body) {
    auto work = std::make_shared<ShmWork>(std::move(tensors));
    Task task;
    task.work = work;
    task.run = [world = world_.get(), group = group_, op, header, body = std::move(body)] {
      Collective c(*world, group->view, op);
      c.agree(header);
      body(c);
      c.barrier();  // nobody touches another rank's tensors any more
    };
    world_->submit(std::move(task));
    return work;
  }

  WorkHandle point_to_point(const Tensor& tensor, int peer, uint32_t tag, bool is_send) {
    const char* what = is_send ? "send" : "recv";
    check_tensor(tensor, what, false);
    detail::check_peer(kBackend, what, peer, rank(), size());
    count([&](CommStats& s) {
      (is_send ? s.send_calls : s.recv_calls) += 1;
      if (is_send) s.bytes_sent += std::int64_t(tensor.nbytes());
    });
    auto work = std::make_shared<ShmWork>(std::vector<Tensor>{tensor});
    auto transfer = std::make_shared<shm::Transfer>();
    transfer->is_send = is_send;
    transfer->peer = group_->view.world_ranks[std::size_t(peer)];
    transfer->group = group_->view.id;
    transfer->tag = tag;
    transfer->data = static_cast<std::uint8_t*>(tensor.data_ptr());
    transfer->bytes = tensor.nbytes();
    transfer->what =
        detail::point_to_point_what(kBackend, is_send, peer, tag, tensor.nbytes(), rank(), size());
    transfer->work = work;
    world_->submit(Task{{}, std::move(transfer), work});
    return work;
  }

  std::shared_ptr<ShmWorld> world_;
  std::shared_ptr<Group> group_;
};

std::shared_ptr<Communicator> ShmCommunicator::new_group(const std::vector<int>& ranks) {
  detail::check_group_ranks(kBackend, ranks, size());
  world_->throw_if_broken();
  const CollectiveHeader header = detail::new_group_header(ranks);
  auto id = std::make_shared<std::uint32_t>(0);
  auto work = std::make_shared<ShmWork>(std::vector<Tensor>{});
  Task task;
  task.work = work;
  // Agree on an id no member uses yet: the largest first free id of the ranks of this group.
  task.run = [world = world_.get(), group = group_, header, id] {
    Collective c(*world, group->view, CollectiveOp::new_group);
    CollectiveHeader mine = header;
    mine.proposal = world->next_group_id;
    std::uint64_t largest = 0;
    for (const CollectiveHeader& h : c.agree(mine)) largest = std::max(largest, h.proposal);
    LIBAI_CHECK_KIND(CommunicationError, largest < shm::kMaxGroups, c.what(), ": more than ",
                     shm::kMaxGroups - 1, " groups");
    *id = std::uint32_t(largest);
    world->next_group_id = *id + 1;
    c.barrier();
  };
  world_->submit(std::move(task));
  work->wait();
  GroupView view;
  if (!detail::set_subgroup_view(view, group_->view, ranks, *id)) return nullptr;
  return std::make_shared<ShmCommunicator>(world_, std::move(view));
}

}  // namespace

std::shared_ptr<Communicator> make_shm_communicator(const ShmGroupOptions& options) {
  detail::check_group_options(kBackend, options);
  auto world = std::make_shared<ShmWorld>(options);
  GroupView view;
  detail::set_world_view(view, options.rank, options.size);
  return std::make_shared<ShmCommunicator>(std::move(world), std::move(view));
}

bool shm_uses_cross_memory_attach(const Communicator& comm) {
  const auto* shm = dynamic_cast<const ShmCommunicator*>(&comm);
  LIBAI_CHECK(shm != nullptr, "shm_uses_cross_memory_attach: a communicator of the ",
              comm.backend(), " backend is not an shm one");
  return shm->cross_memory_attach();
}

}  // namespace libai::comm
