// A pipeline across real processes (run_cluster, one forked node per stage on loopback) moves
// its packets bit for bit: each stage checks that every input tensor holds exactly the bits
// it expects for (group, step, stage) and sends the next stage's, and the driver checks the
// last stage's outputs. The tensors cover the dtypes, odd sizes, random bits (NaN payloads,
// denormals, -0), empty and non-contiguous tensors and a 4 MB one; the packets cross from
// node 0 to 1, 1 to 2 and 2 back to node 0's driver, and the credits the other way.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cstring>
#include <random>

#include "actors/cluster/cluster.h"
#include "runtime/error.h"
#include "tests/common/child_process.h"

namespace libai::actors {
namespace {

using namespace std::chrono_literals;

constexpr int kStages = 3, kGroups = 4, kSteps = 3;

// The tensors that enter stage `stage` (stage kStages: what the driver gets back).
models::TensorMap expected(int group, int step, int stage) {
  const std::uint32_t seed = std::uint32_t((group * 31 + step) * 17 + stage);
  auto bits = [&](const Shape& shape, DType dtype, std::uint32_t salt) {
    Tensor t = Tensor::empty(shape, dtype);
    std::mt19937 rng(seed * 7919u + salt);
    auto* bytes = static_cast<std::uint8_t*>(t.data_ptr());
    for (std::size_t i = 0; i < t.nbytes(); ++i)
      bytes[i] = std::uint8_t(dtype == DType::boolean ? rng() & 1 : rng());
    return t;
  };
  return {{"hidden_states", bits({2, 1 + stage, 33}, DType::f32, 1)},
          {"half", bits({5, 3}, DType::bf16, 2)},
          {"position_ids", bits({1 + group}, DType::i64, 3)},
          {"attention_mask", bits({3, 7}, DType::boolean, 4)},
          {"odd", bits({3 + step}, DType::u8, 5)},
          {"empty", Tensor::empty({0, 3}, DType::f32)},
          {"large", bits({1 << 20}, DType::f32, 6)}};
}

std::string compare(const models::TensorMap& got, const models::TensorMap& want) {
  if (got.size() != want.size()) return str_cat(got.size(), " tensors, expected ", want.size());
  for (const auto& [name, w] : want) {
    auto it = got.find(name);
    if (it == got.end()) return str_cat("no tensor '", name, "'");
    const Tensor g = it->second.is_contiguous() ? it->second : it->second.clone_raw();
    if (g.dtype() != w.dtype() || g.shape() != w.shape())
      return str_cat("'", name, "' is ", g.dtype(), " ", g.shape(), ", expected ", w.dtype(), " ",
                     w.shape());
    if (w.nbytes() > 0 && std::memcmp(g.data_ptr(), w.data_ptr(), w.nbytes()) != 0)
      return str_cat("'", name, "' differs in its bits");
  }
  return "";
}

class CheckingStage : public StageCompute {
 public:
  explicit CheckingStage(int stage) : stage_(stage) {}
  models::TensorMap forward(int group, const models::TensorMap& inputs) override {
    const std::string bad = compare(inputs, expected(group, step_[group], stage_));
    LIBAI_CHECK(bad.empty(), "stage ", stage_, ", group ", group, " step ", step_[group], ": ",
                bad);
    models::TensorMap out = expected(group, step_[group]++, stage_ + 1);
    // One output travels as a strided view: the sender makes it contiguous.
    Tensor wide = Tensor::empty({3, 2 + stage_, 33}, DType::f32);
    const Tensor& h = out.at("hidden_states");
    Tensor view = wide.as_strided(h.shape(), {(2 + stage_) * 33, 33, 1}, 0);
    view.copy_from(h);
    out["hidden_states"] = view;
    return out;
  }

 private:
  int stage_;
  std::map<int, int> step_;
};

class BitExactJob : public ClusterJob {
 public:
  std::vector<wire::DeviceProfile> profile_devices(int) override {
    return {wire::DeviceProfile{"cpu:0", 100, 10, 1ull << 30, 0, 0}};
  }
  void plan(wire::Assignment& a) override {
    a.stage_of = {0, 1, 2};
    a.device_of_stage = {0, 1, 2};
  }
  PipelineLayout layout(const wire::Assignment&) override {
    PipelineLayout layout = make_layout({.dp = 1, .pp = kStages, .tp = 1}, kGroups);
    for (SlotSpec& slot : layout.slots) slot.node = slot.stage;
    return layout;
  }
  ComputeFactory compute(const PipelineLayout&, const wire::Assignment&) override {
    return [](const SlotSpec& slot) { return std::make_shared<CheckingStage>(slot.stage); };
  }
  void drive(PipelineClient& client, const PipelineLayout&) override {
    for (int g = 0; g < kGroups; ++g)
      client.submit(0, Packet{.group = g, .step = 0, .done = false, .tensors = expected(g, 0, 0)});
    for (int step = 0; step < kSteps; ++step)
      for (int g = 0; g < kGroups; ++g) {
        Packet p = client.wait(g);
        const std::string bad = compare(p.tensors, expected(g, step, kStages));
        LIBAI_CHECK(p.step == step && bad.empty(), "driver: group ", g, " step ", step, ": ",
                    bad.empty() ? str_cat("got step ", p.step) : bad);
        client.submit(0, step + 1 < kSteps
                             ? Packet{.group = g,
                                      .step = step + 1,
                                      .done = false,
                                      .tensors = expected(g, step + 1, 0)}
                             : Packet{.group = g, .step = kSteps, .done = true, .tensors = {}});
      }
  }
};

// Node `rank` of the cluster; writes node 0's port to `port_fd`, reads it from `port_fd`
// otherwise. Exit status 0 when run_cluster returned (and, on node 0, every stage reported
// bytes from other nodes where it should).
int node_main(int rank, int port_fd) {
  try {
    ClusterSpec spec;
    spec.nodes = kStages;
    spec.node_rank = rank;
    spec.token = "bits";
    ClusterOptions options;
    options.join_timeout = 30s;
    options.setup_timeout = 30s;
    options.job_timeout = 60s;
    if (rank == 0) {
      spec.port = 0;
      options.on_listening = [port_fd](int port) {
        testing::write_all(port_fd, &port, sizeof port);
      };
    } else {
      LIBAI_CHECK(testing::read_all(port_fd, &spec.port, sizeof spec.port, 30000), "no port");
    }
    BitExactJob job;
    const ClusterResult result = run_cluster(spec, job, options);
    if (rank == 0) {
      LIBAI_CHECK(result.reports.size() == kStages, result.reports.size(), " stage reports");
      for (const auto& r : result.reports)  // stage 0 gets its inputs from node 0's driver
        LIBAI_CHECK((r.bytes_received > 0) == (r.name != "stage 0"), r.name, " received ",
                    r.bytes_received, " bytes from other nodes");
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "node %d: %s\n", rank, e.what());
    return 1;
  }
}

TEST(ClusterPackets, APipelineAcrossProcessesMovesPacketsBitForBit) {
  std::vector<int> fds;
  std::vector<std::unique_ptr<testing::ChildProcess>> nodes;
  for (int rank = 0; rank < kStages; ++rank) {
    int pair[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(pair[0]);
      ::_exit(node_main(rank, pair[1]));
    }
    ::close(pair[1]);
    fds.push_back(pair[0]);
    nodes.push_back(std::make_unique<testing::ChildProcess>(pid));
  }
  int port = 0;
  ASSERT_TRUE(testing::read_all(fds[0], &port, sizeof port, 30000));
  for (int rank = 1; rank < kStages; ++rank)
    ASSERT_TRUE(testing::write_all(fds[std::size_t(rank)], &port, sizeof port));
  for (int rank = 0; rank < kStages; ++rank) {
    EXPECT_EQ(nodes[std::size_t(rank)]->wait(90s), 0) << "node " << rank;
    ::close(fds[std::size_t(rank)]);
  }
}

}  // namespace
}  // namespace libai::actors
