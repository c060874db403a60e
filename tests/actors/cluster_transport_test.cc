// Node 0's choice of the data plane between the nodes (Note [Choosing the transport]).
#include <gtest/gtest.h>

#include "actors/cluster/cluster_node.h"
#include "runtime/error.h"

namespace libai::actors::cluster {
namespace {

const std::string kHere = "boot a ipc 1:2 pid 1:3";

TEST(ClusterTransport, AutoTakesSharedMemoryOnlyWhenEveryNodeSharesIt) {
  EXPECT_EQ(choose_transport("auto", {kHere, kHere, kHere}), "shm");
  EXPECT_EQ(choose_transport("auto", {kHere, "boot b ipc 1:2 pid 1:3", kHere}), "ucx");
  EXPECT_EQ(choose_transport("auto", {kHere, "boot a ipc 9:9 pid 1:3"}), "ucx");
  // A node that could not read its identity cannot be trusted to share memory.
  EXPECT_EQ(choose_transport("auto", {"", ""}), "ucx");
}

TEST(ClusterTransport, UcxIsAlwaysPossible) {
  EXPECT_EQ(choose_transport("ucx", {kHere, kHere}), "ucx");
}

TEST(ClusterTransport, ForcedSharedMemoryAcrossHostsNamesTheNodes) {
  EXPECT_EQ(choose_transport("shm", {kHere, kHere}), "shm");
  try {
    choose_transport("shm", {kHere, kHere, "boot b", "boot c"});
    FAIL() << "expected an error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("node(s) 2, 3 cannot share memory with node 0"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(choose_transport("tcp", {kHere}), InvalidArgument);
}

}  // namespace
}  // namespace libai::actors::cluster
