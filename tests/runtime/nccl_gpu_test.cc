// The nccl communicator where GPUs exist (label gpu; skipped elsewhere): a one-rank group on
// cuda:0 checked against host-computed values, and, with two or more GPUs, two processes.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include "runtime/comm/nccl_communicator.h"
#include "runtime/device.h"
#include "runtime/device_copy.h"
#include "runtime/tensor.h"

namespace libai::comm {
namespace {

Tensor on_gpu(const std::vector<float>& values, int device) {
  return to_device(Tensor::from_vector(values), Device::cuda(device));
}

TEST(Nccl, OneRankCollectivesOnOneGpu) {
  if (!nccl_available()) GTEST_SKIP() << "built without NCCL";
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  auto comm = make_nccl_communicator({.rank = 0, .size = 1, .device = 0});
  Tensor t = on_gpu({1, 2, 3}, 0);
  comm->all_reduce(t);
  EXPECT_EQ(to_device(t, Device::cpu()).to_vector<float>(), (std::vector<float>{1, 2, 3}));
  Tensor out = Tensor::empty({3}, DType::f32, Device::cuda(0));
  comm->all_gather(t, out);
  EXPECT_EQ(to_device(out, Device::cpu()).to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(comm->stats().all_reduce_calls, 1);
}

TEST(Nccl, TwoProcessesAllReduce) {
  if (!nccl_available()) GTEST_SKIP() << "built without NCCL";
  if (!cuda_available() || cuda_device_count() < 2) GTEST_SKIP() << "needs two GPUs";
  const int port = 29000 + int(::getpid() % 1000);
  std::vector<pid_t> children;
  for (int rank = 0; rank < 2; ++rank) {
    pid_t pid = ::fork();
    if (pid == 0) {
      int code = 1;
      try {
        auto comm = make_nccl_communicator({.rank = rank, .size = 2, .device = rank, .port = port});
        Tensor t = on_gpu({float(rank + 1), 10.0f * float(rank + 1)}, rank);
        comm->all_reduce(t);
        code = to_device(t, Device::cpu()).to_vector<float>() == std::vector<float>{3, 30} ? 0 : 2;
      } catch (...) {
        code = 3;
      }
      ::_exit(code);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
}

}  // namespace
}  // namespace libai::comm
