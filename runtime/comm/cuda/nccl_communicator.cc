#include "runtime/comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>

#include "runtime/comm/rendezvous.h"
#include "runtime/cuda/cuda_context.h"
#include "runtime/error.h"

namespace libai::comm {

namespace {

void nccl_check(ncclResult_t status, const char* what) {
  LIBAI_CHECK_KIND(CommunicationError, status == ncclSuccess, "nccl: ", what, " failed: ",
                   ncclGetErrorString(status));
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::i64: return ncclInt64;
    case DType::i32: return ncclInt32;
    case DType::u8:
    case DType::boolean: return ncclUint8;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  return ncclSum;
}

// The state shared by a communicator and the groups split from it.
struct NcclState {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int device = 0, rank = 0, size = 1;
  std::chrono::milliseconds timeout{60000};
  std::atomic<bool> broken{false};
  std::string error;
  std::mutex mutex;
  CommStats stats;

  ~NcclState() {
    if (comm) ncclCommDestroy(comm);
    if (stream) cudaStreamDestroy(stream);
  }

  void fail(const std::string& why) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!broken.exchange(true)) {
      error = why;
      ncclCommAbort(comm);
      comm = nullptr;
    }
  }
  void check_usable() {
    LIBAI_CHECK_KIND(CommunicationError, !broken.load(), "nccl communicator (rank ", rank,
                     ") is broken: ", error);
  }
};

class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<NcclState> state, cudaEvent_t done, std::vector<Tensor> keep)
      : state_(std::move(state)), done_(done), keep_(std::move(keep)) {}
  ~NcclWork() override { cudaEventDestroy(done_); }

  void wait() override {
    const auto deadline = std::chrono::steady_clock::now() + state_->timeout;
    while (true) {
      state_->check_usable();
      const cudaError_t q = cudaEventQuery(done_);
      if (q == cudaSuccess) break;
      LIBAI_CHECK_KIND(CommunicationError, q == cudaErrorNotReady, "nccl: waiting for a collective: ",
                       cudaGetErrorString(q));
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(state_->comm, &async);
      if (async != ncclSuccess) state_->fail(std::string("asynchronous error: ") + ncclGetErrorString(async));
      if (std::chrono::steady_clock::now() > deadline)
        state_->fail("a collective did not finish within " + std::to_string(state_->timeout.count()) +
                     " ms (a peer died, or ranks disagree on the collectives)");
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    keep_.clear();
  }
  bool completed() const override { return cudaEventQuery(done_) == cudaSuccess; }

 private:
  std::shared_ptr<NcclState> state_;
  cudaEvent_t done_;
  std::vector<Tensor> keep_;
};

class NcclCommunicator : public Communicator {
 public:
  explicit NcclCommunicator(std::shared_ptr<NcclState> state) : state_(std::move(state)) {}

  int rank() const override { return state_->rank; }
  int size() const override { return state_->size; }
  const char* backend() const override { return "nccl"; }
  std::chrono::milliseconds timeout() const override { return state_->timeout; }
  CommStats stats() const override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return state_->stats;
  }
  // ncclCommAbort (in fail) ends the NCCL calls in flight; the waits see `broken` and throw.
  void abort(const std::string& reason) override { state_->fail("aborted: " + reason); }

  WorkHandle all_reduce_async(Tensor t, ReduceOp op) override {
    check_tensor(t, "all_reduce");
    count(state_->stats.all_reduce_calls, state_->stats.all_reduce_elements, t.numel());
    return launch({t}, [&](cudaStream_t s) {
      return ncclAllReduce(t.data_ptr(), t.data_ptr(), size_t(t.numel()), nccl_type(t.dtype()), nccl_op(op),
                           state_->comm, s);
    });
  }
  WorkHandle all_gather_async(Tensor input, Tensor output) override {
    check_tensor(input, "all_gather");
    check_tensor(output, "all_gather");
    LIBAI_CHECK(output.numel() == input.numel() * size(), "all_gather: output has ", output.numel(),
                " elements, expected ", input.numel() * size());
    count(state_->stats.all_gather_calls, state_->stats.all_gather_elements, output.numel());
    return launch({input, output}, [&](cudaStream_t s) {
      return ncclAllGather(input.data_ptr(), output.data_ptr(), size_t(input.numel()), nccl_type(input.dtype()),
                           state_->comm, s);
    });
  }
  WorkHandle reduce_scatter_async(Tensor input, Tensor output, ReduceOp op) override {
    check_tensor(input, "reduce_scatter");
    check_tensor(output, "reduce_scatter");
    LIBAI_CHECK(input.numel() == output.numel() * size(), "reduce_scatter: input has ", input.numel(),
                " elements, expected ", output.numel() * size());
    count(state_->stats.reduce_scatter_calls, state_->stats.reduce_scatter_elements, input.numel());
    return launch({input, output}, [&](cudaStream_t s) {
      return ncclReduceScatter(input.data_ptr(), output.data_ptr(), size_t(output.numel()),
                               nccl_type(input.dtype()), nccl_op(op), state_->comm, s);
    });
  }
  WorkHandle broadcast_async(Tensor t, int root) override {
    check_tensor(t, "broadcast");
    LIBAI_CHECK(root >= 0 && root < size(), "broadcast: root ", root, " outside a group of ", size());
    count(state_->stats.broadcast_calls, state_->stats.broadcast_elements, t.numel());
    return launch({t}, [&](cudaStream_t s) {
      return ncclBroadcast(t.data_ptr(), t.data_ptr(), size_t(t.numel()), nccl_type(t.dtype()), root,
                           state_->comm, s);
    });
  }
  WorkHandle send_async(Tensor t, int peer, uint32_t) override {
    check_tensor(t, "send");
    { std::lock_guard<std::mutex> lock(state_->mutex); ++state_->stats.send_calls; state_->stats.bytes_sent += int64_t(t.nbytes()); }
    return launch({t}, [&](cudaStream_t s) {
      return ncclSend(t.data_ptr(), size_t(t.numel()), nccl_type(t.dtype()), peer, state_->comm, s);
    });
  }
  WorkHandle recv_async(Tensor t, int peer, uint32_t) override {
    check_tensor(t, "recv");
    { std::lock_guard<std::mutex> lock(state_->mutex); ++state_->stats.recv_calls; }
    return launch({t}, [&](cudaStream_t s) {
      return ncclRecv(t.data_ptr(), size_t(t.numel()), nccl_type(t.dtype()), peer, state_->comm, s);
    });
  }

  std::shared_ptr<Communicator> new_group(const std::vector<int>& ranks) override {
    state_->check_usable();
    int index = -1;
    for (size_t i = 0; i < ranks.size(); ++i) {
      LIBAI_CHECK(ranks[i] >= 0 && ranks[i] < size() && (i == 0 || ranks[i] > ranks[i - 1]),
                  "new_group: ranks must be sorted, distinct and inside the group of ", size());
      if (ranks[i] == rank()) index = int(i);
    }
    ncclComm_t sub = nullptr;
    cuda::DeviceGuard guard(state_->device);
    nccl_check(ncclCommSplit(state_->comm, index >= 0 ? 1 : NCCL_SPLIT_NOCOLOR, index, &sub, nullptr),
               "ncclCommSplit");
    if (index < 0) return nullptr;
    auto s = std::make_shared<NcclState>();
    s->comm = sub;
    s->device = state_->device;
    s->rank = index;
    s->size = int(ranks.size());
    s->timeout = state_->timeout;
    cuda::check(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    return std::make_shared<NcclCommunicator>(s);
  }

 private:
  void check_tensor(const Tensor& t, const char* op) const {
    state_->check_usable();
    LIBAI_CHECK(t.device().is_cuda() && t.device().index == state_->device, "nccl ", op, ": tensor on ",
                t.device(), ", expected cuda:", state_->device);
    LIBAI_CHECK(t.is_contiguous(), "nccl ", op, ": tensor must be contiguous");
  }
  void count(int64_t& calls, int64_t& elements, int64_t n) {
    std::lock_guard<std::mutex> lock(state_->mutex);
    ++calls;
    elements += n;
  }
  template <typename Call>
  WorkHandle launch(std::vector<Tensor> keep, Call&& call) {
    cuda::DeviceGuard guard(state_->device);
    // Run after the compute already queued on the device (it produced the tensors).
    cudaEvent_t ready = nullptr, done = nullptr;
    cuda::check(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate");
    cuda::check(cudaEventRecord(ready, cuda::current_stream(state_->device)), "cudaEventRecord");
    cuda::check(cudaStreamWaitEvent(state_->stream, ready, 0), "cudaStreamWaitEvent");
    cudaEventDestroy(ready);
    nccl_check(call(state_->stream), "collective");
    cuda::check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
    cuda::check(cudaEventRecord(done, state_->stream), "cudaEventRecord");
    // Later compute waits for the collective, so the memory it writes is not reused early.
    cuda::check(cudaStreamWaitEvent(cuda::current_stream(state_->device), done, 0), "cudaStreamWaitEvent");
    return std::make_shared<NcclWork>(state_, done, std::move(keep));
  }

  std::shared_ptr<NcclState> state_;
};

}  // namespace

bool nccl_available() { return true; }

std::shared_ptr<Communicator> make_nccl_communicator(const NcclGroupOptions& options) {
  cuda::check_device_index(options.device);
  Rendezvous store({.rank = options.rank, .size = options.size, .addr = options.addr, .port = options.port,
                    .timeout = options.timeout});
  ncclUniqueId id{};
  if (options.rank == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  std::vector<std::uint8_t> mine(sizeof(id));
  std::memcpy(mine.data(), &id, sizeof(id));
  auto all = store.exchange(mine);
  LIBAI_CHECK_KIND(CommunicationError, all[0].size() == sizeof(id), "nccl: rank 0 sent a unique id of ",
                   all[0].size(), " bytes");
  std::memcpy(&id, all[0].data(), sizeof(id));
  auto state = std::make_shared<NcclState>();
  state->device = options.device;
  state->rank = options.rank;
  state->size = options.size;
  state->timeout = options.timeout;
  cuda::DeviceGuard guard(options.device);
  nccl_check(ncclCommInitRank(&state->comm, options.size, id, options.rank), "ncclCommInitRank");
  cuda::check(cudaStreamCreateWithFlags(&state->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  return std::make_shared<NcclCommunicator>(state);
}

}  // namespace libai::comm
