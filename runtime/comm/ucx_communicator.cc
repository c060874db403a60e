#include "runtime/comm/ucx_communicator.h"

#include <algorithm>
#include <mutex>

#include "runtime/comm/process_group_checks.h"
#include "runtime/comm/ucx_collectives.h"
#include "runtime/comm/ucx_executor.h"
#include "runtime/error.h"

namespace libai::comm {
namespace {

using detail::Collective;
using detail::CollectiveHeader;
using detail::CollectiveOp;
using detail::Executor;
using detail::GroupView;
using detail::Task;
using detail::UcxWork;
using detail::UcxWorld;
using detail::header_of;

// A communicator's own state, shared with its queued operations.
struct Group {
  GroupView view;
  std::uint32_t next_sequence = 0;  // executor thread only
  mutable std::mutex stats_mutex;
  CommStats stats;

  void add_bytes(std::int64_t bytes) {
    std::lock_guard lock(stats_mutex);
    stats.bytes_sent += bytes;
  }
};

constexpr const char* kBackend = "ucx";

void check_tensor(const Tensor& t, const char* what, bool reduces) {
  detail::check_tensor(kBackend, t, what, reduces);
}

class UcxCommunicator final : public Communicator {
 public:
  UcxCommunicator(std::shared_ptr<Executor> executor, GroupView view)
      : executor_(std::move(executor)), group_(std::make_shared<Group>()) {
    group_->view = std::move(view);
  }

  int rank() const override { return group_->view.rank; }
  int size() const override { return group_->view.size(); }
  const char* backend() const override { return "ucx"; }
  std::chrono::milliseconds timeout() const override { return timeout_; }
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

  CommStats stats() const override {
    std::lock_guard lock(group_->stats_mutex);
    return group_->stats;
  }

  void abort(const std::string& reason) override { executor_->abort(reason); }

  WorkHandle all_reduce_async(Tensor tensor, ReduceOp op) override {
    check_tensor(tensor, "all_reduce", true);
    count(&CommStats::all_reduce_calls, &CommStats::all_reduce_elements, tensor.numel());
    return collective(CollectiveOp::all_reduce, header_of(CollectiveOp::all_reduce, tensor, tensor, op, -1),
                      {tensor}, [=](Collective& c) { detail::run_all_reduce(c, tensor, op); });
  }

  WorkHandle all_gather_async(Tensor input, Tensor output) override {
    check_tensor(input, "all_gather", false);
    check_tensor(output, "all_gather", false);
    LIBAI_CHECK(output.dtype() == input.dtype() && output.numel() == input.numel() * size(),
                "ucx all_gather: the output (", output.dtype(), ", shape ", output.shape(),
                ") must hold ", size(), " x the input's ", input.numel(), " ", input.dtype(),
                " elements");
    count(&CommStats::all_gather_calls, &CommStats::all_gather_elements, output.numel());
    return collective(CollectiveOp::all_gather,
                      header_of(CollectiveOp::all_gather, input, output, ReduceOp::sum, -1), {input, output},
                      [=](Collective& c) { detail::run_all_gather(c, input, output); });
  }

  WorkHandle reduce_scatter_async(Tensor input, Tensor output, ReduceOp op) override {
    check_tensor(input, "reduce_scatter", true);
    check_tensor(output, "reduce_scatter", true);
    LIBAI_CHECK(output.dtype() == input.dtype() && input.numel() == output.numel() * size(),
                "ucx reduce_scatter: the input (", input.dtype(), ", shape ", input.shape(),
                ") must hold ", size(), " x the output's ", output.numel(), " ", output.dtype(),
                " elements");
    count(&CommStats::reduce_scatter_calls, &CommStats::reduce_scatter_elements, input.numel());
    return collective(CollectiveOp::reduce_scatter,
                      header_of(CollectiveOp::reduce_scatter, input, output, op, -1), {input, output},
                      [=](Collective& c) { detail::run_reduce_scatter(c, input, output, op); });
  }

  WorkHandle broadcast_async(Tensor tensor, int root) override {
    check_tensor(tensor, "broadcast", false);
    detail::check_root(kBackend, root, size());
    count(&CommStats::broadcast_calls, &CommStats::broadcast_elements, tensor.numel());
    return collective(CollectiveOp::broadcast,
                      header_of(CollectiveOp::broadcast, tensor, tensor, ReduceOp::sum, root), {tensor},
                      [=](Collective& c) { detail::run_broadcast(c, tensor, root); });
  }

  WorkHandle send_async(Tensor tensor, int peer, uint32_t tag) override {
    return point_to_point(tensor, peer, tag, true);
  }
  WorkHandle recv_async(Tensor tensor, int peer, uint32_t tag) override {
    return point_to_point(tensor, peer, tag, false);
  }

  std::shared_ptr<Communicator> new_group(const std::vector<int>& ranks) override;

 private:
  void count(int64_t CommStats::*calls, int64_t CommStats::*elements, int64_t n) {
    std::lock_guard lock(group_->stats_mutex);
    group_->stats.*calls += 1;
    group_->stats.*elements += n;
  }

  WorkHandle collective(CollectiveOp op, CollectiveHeader header, std::vector<Tensor> tensors,
                        std::function<void(Collective&)> body) {
    auto work = std::make_shared<UcxWork>(std::move(tensors));
    Task task;
    task.work = work;
    task.run = [group = group_, op, header, body = std::move(body)](UcxWorld& world) {
      std::int64_t bytes = 0;
      Collective c(world, group->view, group->next_sequence++, op, &bytes);
      try {
        c.announce(header);
        body(c);
        c.agree();
      } catch (...) {
        group->add_bytes(bytes);
        throw;
      }
      group->add_bytes(bytes);
    };
    executor_->submit(std::move(task));
    return work;
  }

  WorkHandle point_to_point(const Tensor& tensor, int peer, uint32_t tag, bool is_send) {
    const char* what = is_send ? "send" : "recv";
    check_tensor(tensor, what, false);
    detail::check_peer(kBackend, what, peer, rank(), size());
    {
      std::lock_guard lock(group_->stats_mutex);
      (is_send ? group_->stats.send_calls : group_->stats.recv_calls) += 1;
      if (is_send) group_->stats.bytes_sent += std::int64_t(tensor.nbytes());
    }
    auto work = std::make_shared<UcxWork>(std::vector<Tensor>{tensor});
    Task task;
    task.work = work;
    task.what =
        detail::point_to_point_what(kBackend, is_send, peer, tag, tensor.nbytes(), rank(), size());
    task.post = [group = group_, tensor, peer, tag, is_send](UcxWorld& world) {
      const int other = group->view.world_ranks[std::size_t(peer)];
      const int sender = is_send ? world.rank() : other;
      const std::uint64_t full_tag =
          detail::make_tag(detail::TagKind::p2p, group->view.id, sender, tag);
      return is_send
                 ? world.send(other, full_tag, tensor.data_ptr(), tensor.nbytes(), tensor.storage())
                 : world.recv(other, full_tag, tensor.data_ptr(), tensor.nbytes(),
                              tensor.storage());
    };
    executor_->submit(std::move(task));
    return work;
  }

  std::shared_ptr<Executor> executor_;
  std::shared_ptr<Group> group_;
  std::chrono::milliseconds timeout_{0};
};

std::shared_ptr<Communicator> UcxCommunicator::new_group(const std::vector<int>& ranks) {
  detail::check_group_ranks(kBackend, ranks, size());
  const CollectiveHeader header = detail::new_group_header(ranks);
  auto id = std::make_shared<std::uint32_t>(0);
  auto work = std::make_shared<UcxWork>(std::vector<Tensor>{});
  Task task;
  task.work = work;
  // Agree on an id no member uses yet: the largest first free id of the ranks of this group.
  task.run = [group = group_, header, id, executor = executor_.get()](UcxWorld& world) {
    std::int64_t bytes = 0;
    Collective c(world, group->view, group->next_sequence++, CollectiveOp::new_group, &bytes);
    CollectiveHeader mine = header;
    mine.proposal = executor->next_group_id;
    std::uint64_t largest = 0;
    c.announce(mine);
    for (const CollectiveHeader& h : c.agree()) largest = std::max(largest, h.proposal);
    LIBAI_CHECK_KIND(CommunicationError, largest < detail::kMaxGroups, c.what(), ": more than ",
                     detail::kMaxGroups - 1, " groups");
    *id = std::uint32_t(largest);
    executor->next_group_id = *id + 1;
  };
  executor_->submit(std::move(task));
  work->wait();
  GroupView view;
  if (!detail::set_subgroup_view(view, group_->view, ranks, *id)) return nullptr;
  auto child = std::make_shared<UcxCommunicator>(executor_, std::move(view));
  child->set_timeout(timeout_);
  return child;
}

}  // namespace

std::shared_ptr<Communicator> make_ucx_communicator(const UcxGroupOptions& options) {
  detail::check_group_options(kBackend, options);
  auto executor = std::make_shared<Executor>(detail::rendezvous_options(options));
  GroupView world;
  detail::set_world_view(world, options.rank, options.size);
  auto comm = std::make_shared<UcxCommunicator>(std::move(executor), std::move(world));
  comm->set_timeout(options.timeout);
  return comm;
}

}  // namespace libai::comm
