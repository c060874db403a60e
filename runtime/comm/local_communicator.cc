#include "runtime/comm/local_communicator.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <utility>

#include "runtime/comm/local_group.h"
#include "runtime/error.h"

// Note [Local collectives]
// Every rank's communicator runs its operations in call order on its own worker thread. A
// collective is two rendezvous ("rounds") of all ranks of the group:
//   round 1  each rank posts its Contribution (op, dtype, count, root, buffer pointers). The
//            last to arrive checks that all agree, else the group breaks with a message
//            listing every rank's op and sizes.
//   work     every rank moves data at once, reading and writing the other ranks' buffers:
//            all_reduce      rank r owns element slice r of every buffer: block by block it
//                            reduces the slice over ranks 0, 1, ..., n-1 (in that order, so
//                            the result is bit-identical everywhere and run to run) and
//                            writes the result into every rank's buffer. Nobody else
//                            touches slice r, so in place needs no staging copy.
//            reduce_scatter  rank r reduces block r of every input into its output;
//            all_gather      rank r copies every input into its own output;
//            broadcast       every rank but the root copies the root's tensor.
//   round 2  nobody touches another rank's buffer any more, so each may return. An abort
//            wakes ranks waiting in round 1 only: a rank that passed round 1 must not leave
//            (letting its caller free the tensor) while the others may still use its buffer.
// Contributions are written only in a round 1, which needs every rank to have left the
// previous collective, so they are stable between the rounds without a lock. bf16 and f16
// reduce in f32 and round once.

namespace libai::comm {
namespace {

using local::Contribution;
using local::GroupState;
using local::Kind;
using local::Message;

template <typename T, typename Acc>
void reduce_typed(const std::vector<char*>& outputs, const std::vector<const char*>& inputs,
                  int64_t begin, int64_t end, ReduceOp op) {
  constexpr int64_t kBlock = 1024;
  Acc acc[kBlock];
  for (int64_t b = begin; b < end; b += kBlock) {
    const int64_t n = std::min(kBlock, end - b);
    const T* x0 = reinterpret_cast<const T*>(inputs[0]) + b;
    for (int64_t i = 0; i < n; ++i) acc[i] = static_cast<Acc>(x0[i]);
    for (size_t r = 1; r < inputs.size(); ++r) {
      const T* x = reinterpret_cast<const T*>(inputs[r]) + b;
      switch (op) {
        case ReduceOp::sum:
          for (int64_t i = 0; i < n; ++i) acc[i] += static_cast<Acc>(x[i]);
          break;
        case ReduceOp::max:
          for (int64_t i = 0; i < n; ++i) acc[i] = std::max(acc[i], static_cast<Acc>(x[i]));
          break;
        case ReduceOp::min:
          for (int64_t i = 0; i < n; ++i) acc[i] = std::min(acc[i], static_cast<Acc>(x[i]));
          break;
      }
    }
    T* o = reinterpret_cast<T*>(outputs[0]) + b;
    for (int64_t i = 0; i < n; ++i) o[i] = T(acc[i]);
    for (size_t k = 1; k < outputs.size(); ++k)
      std::memcpy(reinterpret_cast<T*>(outputs[k]) + b, o, size_t(n) * sizeof(T));
  }
}

// outputs[k][i] = op over r of inputs[r][i] for i in [begin, end), in rank order. An output
// may be an input: each block is read from every input before it is written.
void reduce(DType dtype, const std::vector<char*>& out, const std::vector<const char*>& inputs,
            int64_t begin, int64_t end, ReduceOp op) {
  switch (dtype) {
    case DType::f32: return reduce_typed<float, float>(out, inputs, begin, end, op);
    case DType::f64: return reduce_typed<double, double>(out, inputs, begin, end, op);
    case DType::bf16: return reduce_typed<bf16, float>(out, inputs, begin, end, op);
    case DType::f16: return reduce_typed<f16, float>(out, inputs, begin, end, op);
    default: LIBAI_ASSERT(false, "reduce of ", dtype);
  }
}

Contribution contribution(Kind kind, ReduceOp op, const Tensor& input, const Tensor& output,
                          int root = -1) {
  return {kind,
          op,
          input.dtype(),
          input.numel(),
          root,
          static_cast<const char*>(input.data_ptr()),
          static_cast<char*>(output.data_ptr())};
}

void check_floating(const Tensor& t, const char* op) {
  LIBAI_CHECK(is_floating(t.dtype()), op, ": reductions need a floating dtype, got ", t.dtype());
}

void check_tensor(const Tensor& t, const char* op, const char* what) {
  LIBAI_CHECK(t.defined(), op, ": ", what, " is undefined");
  LIBAI_CHECK(t.device().is_cpu(), op, ": the local communicator moves cpu tensors; ", what,
              " is on ", t.device());
  LIBAI_CHECK(t.is_contiguous(), op, ": ", what, " must be contiguous, got shape ",
              shape_str(t.shape()), " with strides ", t.strides());
}

bool overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

std::string message_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

class LocalWork final : public Work {
 public:
  void wait() override {
    std::unique_lock<std::mutex> lock(mutex_);
    done_cv_.wait(lock, [&] { return done_; });
    if (error_) std::rethrow_exception(error_);
  }
  bool completed() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
  }
  void finish(std::exception_ptr error) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
      error_ = std::move(error);
    }
    done_cv_.notify_all();
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<GroupState> group, int rank)
      : group_(std::move(group)), rank_(rank), worker_([this] { work(); }) {}
  ~LocalCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    worker_.join();  // runs what is queued first; each wait there has a deadline
    group_->cancel_receives(rank_, str_cat(group_->name, ": rank ", rank_,
                                           "'s communicator was destroyed during a recv"));
  }

  int rank() const override { return rank_; }
  int size() const override { return group_->size; }
  const char* backend() const override { return "local"; }
  std::chrono::milliseconds timeout() const override { return group_->timeout; }
  GroupState& group() { return *group_; }

  WorkHandle all_reduce_async(Tensor tensor, ReduceOp op) override {
    check_tensor(tensor, "all_reduce", "tensor");
    check_floating(tensor, "all_reduce");
    const int64_t n = size(), bytes = int64_t(tensor.nbytes());
    return submit(contribution(Kind::all_reduce, op, tensor, tensor), tensor, {},
                  [&](CommStats& s) {
                    ++s.all_reduce_calls;
                    s.all_reduce_elements += tensor.numel();
                    s.bytes_sent += bytes * (n - 1) / n;
                  });
  }
  WorkHandle all_gather_async(Tensor input, Tensor output) override {
    check_pair(input, output, "all_gather");
    auto c = contribution(Kind::all_gather, ReduceOp::sum, input, output);
    return submit(c, input, output, [&](CommStats& s) {
      ++s.all_gather_calls;
      s.all_gather_elements += output.numel();
      s.bytes_sent += int64_t(input.nbytes()) * (size() - 1);
    });
  }
  WorkHandle reduce_scatter_async(Tensor input, Tensor output, ReduceOp op) override {
    check_pair(output, input, "reduce_scatter");
    check_floating(input, "reduce_scatter");
    const int64_t n = size(), bytes = int64_t(input.nbytes());
    auto c = contribution(Kind::reduce_scatter, op, input, output);
    return submit(c, input, output, [&](CommStats& s) {
      ++s.reduce_scatter_calls;
      s.reduce_scatter_elements += input.numel();
      s.bytes_sent += bytes * (n - 1) / n;
    });
  }
  WorkHandle broadcast_async(Tensor tensor, int root) override {
    check_tensor(tensor, "broadcast", "tensor");
    LIBAI_CHECK(root >= 0 && root < size(), "broadcast: root ", root,
                " is not a rank of a group of ", size());
    auto c = contribution(Kind::broadcast, ReduceOp::sum, tensor, tensor, root);
    return submit(c, tensor, {}, [&](CommStats& s) {
      ++s.broadcast_calls;
      s.broadcast_elements += tensor.numel();
      if (root == rank_) s.bytes_sent += int64_t(tensor.nbytes()) * (size() - 1);
    });
  }
  WorkHandle send_async(Tensor tensor, int peer, uint32_t tag) override {
    check_point_to_point(tensor, peer, "send");
    return enqueue(
        [this, tensor, peer, tag] {
          Message m{tensor.dtype(), tensor.numel(),
                    std::make_unique_for_overwrite<char[]>(tensor.nbytes())};
          if (tensor.nbytes() > 0) std::memcpy(m.bytes.get(), tensor.data_ptr(), tensor.nbytes());
          group_->post(rank_, peer, tag, std::move(m));
        },
        [&](CommStats& s) {
          ++s.send_calls;
          s.bytes_sent += int64_t(tensor.nbytes());
        });
  }
  // Note [Receives do not hold the queue]
  // A recv is posted in call order but completes whenever its message comes, while the
  // operations queued after it run: a rank may post a receive from a peer and then send to
  // it while the peer does the same (the ucx backend behaves so too, and the message plane
  // keeps a receive posted from every peer at all times). Its deadline is the group's
  // timeout from the moment it was posted; the worker checks it between operations.
  WorkHandle recv_async(Tensor tensor, int peer, uint32_t tag) override {
    check_point_to_point(tensor, peer, "recv");
    auto work = enqueue(
        [this, tensor, peer, tag](const std::shared_ptr<LocalWork>& work) {
          local::PendingReceive r;
          r.dtype = tensor.dtype();
          r.count = tensor.numel();
          r.data = tensor.data_ptr();
          r.owner = tensor.storage();
          r.deadline = std::chrono::steady_clock::now() + group_->timeout;
          r.finish = [work](std::exception_ptr error) { work->finish(std::move(error)); };
          group_->receive(peer, rank_, tag, std::move(r));
        },
        [](CommStats& s) { ++s.recv_calls; });
    return work;
  }

  std::shared_ptr<Communicator> new_group(const std::vector<int>& ranks) override {
    throw_if_broken();
    LIBAI_CHECK(!ranks.empty(), "new_group: the rank list is empty");
    for (size_t i = 0; i < ranks.size(); ++i)
      LIBAI_CHECK(ranks[i] >= 0 && ranks[i] < size() && (i == 0 || ranks[i - 1] < ranks[i]),
                  "new_group: ranks must be sorted, distinct ranks of a group of ", size(),
                  ", got ", ranks);
    uint64_t call;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      call = new_group_calls_++;
    }
    auto child = group_->join_subgroup(call, ranks, rank_);
    auto it = std::lower_bound(ranks.begin(), ranks.end(), rank_);
    if (it == ranks.end() || *it != rank_) return nullptr;
    return std::make_shared<LocalCommunicator>(std::move(child), int(it - ranks.begin()));
  }

  CommStats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void abort(const std::string& reason) override {
    group_->abort(str_cat(group_->name, " aborted: ", reason));
  }

 private:
  struct Task {
    std::function<void()> run;
    std::shared_ptr<LocalWork> work;
    // A receive: completes its work itself when its message comes (or fails it).
    std::function<void(const std::shared_ptr<LocalWork>&)> post;
  };

  void throw_if_broken() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!broken_.empty()) throw CommunicationError(broken_);
    }
    group_->throw_if_aborted();
  }
  void check_point_to_point(const Tensor& tensor, int peer, const char* op) {
    check_tensor(tensor, op, "tensor");
    LIBAI_CHECK(peer >= 0 && peer < size(), op, ": peer ", peer, " is not a rank of a group of ",
                size());
  }
  // `whole` holds size() blocks of `part`'s size. In place (`part` is this rank's block of
  // `whole`) is allowed, any other overlap is not.
  void check_pair(const Tensor& part, const Tensor& whole, const char* op) {
    check_tensor(part, op, "the per-rank tensor");
    check_tensor(whole, op, "the full tensor");
    LIBAI_CHECK(part.dtype() == whole.dtype(), op, ": dtypes differ: ", part.dtype(), " and ",
                whole.dtype());
    LIBAI_CHECK(whole.numel() == part.numel() * size(), op, ": the full tensor must hold ", size(),
                " x ", part.numel(), " elements, got shape ", shape_str(whole.shape()));
    const char* own_block = static_cast<const char*>(whole.data_ptr()) + part.nbytes() * rank_;
    LIBAI_CHECK(own_block == part.data_ptr() ||
                    !overlap(part.data_ptr(), part.nbytes(), whole.data_ptr(), whole.nbytes()),
                op, ": input and output overlap (only this rank's block may alias)");
  }

  WorkHandle submit(Contribution c, Tensor a, Tensor b,
                    const std::function<void(CommStats&)>& count) {
    // The tensors ride along so that their storage outlives the operation.
    return enqueue([this, a, b, c] { collective(c); }, count);
  }
  WorkHandle enqueue(std::function<void()> run, const std::function<void(CommStats&)>& count) {
    return push({std::move(run), nullptr, {}}, count);
  }
  WorkHandle enqueue(std::function<void(const std::shared_ptr<LocalWork>&)> post,
                     const std::function<void(CommStats&)>& count) {
    return push({{}, nullptr, std::move(post)}, count);
  }
  WorkHandle push(Task task, const std::function<void(CommStats&)>& count) {
    throw_if_broken();
    auto work = std::make_shared<LocalWork>();
    task.work = work;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      count(stats_);
      queue_.push_back(std::move(task));
    }
    wake_.notify_all();
    return work;
  }

  void work() {
    auto next_deadline = std::chrono::steady_clock::time_point::max();
    for (;;) {
      Task task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        while (!stopping_ && queue_.empty() && std::chrono::steady_clock::now() < next_deadline) {
          if (next_deadline == std::chrono::steady_clock::time_point::max())
            wake_.wait(lock);
          else
            wake_.wait_until(lock, next_deadline);
        }
        if (!queue_.empty()) {
          task = std::move(queue_.front());
          queue_.pop_front();
        } else if (stopping_) {
          return;
        }
      }
      std::exception_ptr error;
      try {
        throw_if_broken();
        if (task.post)
          task.post(task.work);
        else if (task.run)
          task.run();
        next_deadline = group_->expire_receives(rank_);
      } catch (...) {
        error = std::current_exception();
        const std::string what = message_of(error);
        {
          std::lock_guard<std::mutex> lock(mutex_);
          if (broken_.empty()) broken_ = what;
        }
        // Errors of the group have aborted it already; anything else must wake the peers too.
        group_->abort(str_cat(group_->name, ": rank ", rank_, " failed: ", what));
        next_deadline = std::chrono::steady_clock::time_point::max();
      }
      // A posted receive finishes its work when its message comes; a failed post, at once.
      if (task.work && (!task.post || error)) task.work->finish(std::move(error));
    }
  }

  void collective(const Contribution& mine) {
    if (size() == 1) {  // nothing to agree on or move, except an out-of-place gather/scatter
      if (mine.kind != Kind::all_reduce && mine.kind != Kind::broadcast &&
          mine.input != mine.output)
        std::memcpy(mine.output, mine.input, size_t(mine.count) * dtype_size(mine.dtype));
      return;
    }
    GroupState& g = *group_;
    g.arrive(rank_, mine, /*first_round=*/true);
    const int n = size();
    const size_t bytes = size_t(mine.count) * dtype_size(mine.dtype);
    std::vector<const char*> inputs(n);
    for (int r = 0; r < n; ++r) inputs[r] = g.contribution(r).input;
    switch (mine.kind) {
      case Kind::all_reduce: {
        std::vector<char*> outputs(n);
        for (int r = 0; r < n; ++r) outputs[r] = g.contribution(r).output;
        reduce(mine.dtype, outputs, inputs, mine.count * rank_ / n, mine.count * (rank_ + 1) / n,
               mine.op);
        break;
      }
      case Kind::reduce_scatter: {
        const int64_t block = mine.count / n;
        for (auto& p : inputs) p += size_t(block * rank_) * dtype_size(mine.dtype);
        reduce(mine.dtype, {mine.output}, inputs, 0, block, mine.op);
        break;
      }
      case Kind::all_gather:
        for (int r = 0; r < n; ++r)
          if (mine.output + r * bytes != inputs[r] && bytes > 0)
            std::memcpy(mine.output + r * bytes, inputs[r], bytes);
        break;
      case Kind::broadcast:
        if (rank_ != mine.root && bytes > 0) std::memcpy(mine.output, inputs[mine.root], bytes);
        break;
    }
    g.arrive(rank_, mine, /*first_round=*/false);
  }

  std::shared_ptr<GroupState> group_;
  const int rank_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  std::string broken_;
  CommStats stats_;
  uint64_t new_group_calls_ = 0;
  std::thread worker_;  // last: starts once everything above is constructed
};

}  // namespace

std::vector<std::shared_ptr<Communicator>> LocalGroup::create(int size,
                                                              std::chrono::milliseconds timeout) {
  LIBAI_CHECK(size >= 1, "LocalGroup::create: size must be at least 1, got ", size);
  LIBAI_CHECK(timeout.count() > 0, "LocalGroup::create: timeout must be positive, got ",
              timeout.count(), " ms");
  auto group =
      std::make_shared<GroupState>(size, timeout, str_cat("local group (", size, " ranks)"));
  std::vector<std::shared_ptr<Communicator>> comms;
  for (int r = 0; r < size; ++r) comms.push_back(std::make_shared<LocalCommunicator>(group, r));
  return comms;
}

void LocalGroup::abort(Communicator& member, const std::string& reason) {
  auto* local = dynamic_cast<LocalCommunicator*>(&member);
  LIBAI_CHECK(local != nullptr, "LocalGroup::abort: a communicator of the ", member.backend(),
              " backend is not a local one");
  local->group().abort(str_cat(local->group().name, " aborted: ", reason));
}

}  // namespace libai::comm
