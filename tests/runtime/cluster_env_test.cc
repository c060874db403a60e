#include "runtime/cluster_env.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "runtime/config/config.h"
#include "runtime/error.h"

namespace libai {
namespace {

using Vars = std::map<std::string, std::string>;

// An injected environment: the real one is never read or changed.
EnvLookup env_of(Vars vars) {
  return [vars = std::move(vars)](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

ClusterSpec resolve(const Vars& vars, const ClusterFlags& flags = {},
                    const config::Config* cfg = nullptr) {
  return resolve_cluster(flags, cfg, env_of(vars));
}

// The message of the InvalidArgument that resolving throws ("" when it does not throw).
std::string error_of(const Vars& vars, const ClusterFlags& flags = {},
                     const config::Config* cfg = nullptr) {
  try {
    resolve(vars, flags, cfg);
  } catch (const InvalidArgument& error) {
    return error.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

config::Config cluster_config() {
  return config::Config::parse(
      "train:\n"
      "  cluster:\n"
      "    token: from-config\n"
      "    nodes: 4\n"
      "    node_rank: 3\n"
      "    addr: 10.0.0.9\n"
      "    port: 7000\n",
      "cluster.yaml");
}

TEST(ClusterEnv, DefaultsWithNothingGiven) {
  ClusterSpec spec = resolve({});
  EXPECT_EQ(spec.nodes, 1);
  EXPECT_EQ(spec.node_rank, 0);
  EXPECT_EQ(spec.addr, "127.0.0.1");
  EXPECT_EQ(spec.port, 29500);
  EXPECT_EQ(spec.token, "");
  EXPECT_EQ(spec.source, "defaults (nodes, node_rank, addr, port)");
}

TEST(ClusterEnv, LibaiConvention) {
  ClusterSpec spec = resolve({{"NODE", "4"},
                              {"NODE_RANK", "2"},
                              {"ADDR", "10.1.2.3"},
                              {"PORT", "29600"},
                              {"LIBAI_CLUSTER_TOKEN", "s3cret"}});
  EXPECT_EQ(spec.nodes, 4);
  EXPECT_EQ(spec.node_rank, 2);
  EXPECT_EQ(spec.addr, "10.1.2.3");
  EXPECT_EQ(spec.port, 29600);
  EXPECT_EQ(spec.token, "s3cret");
  EXPECT_EQ(spec.source, "LiBai env (NODE, NODE_RANK, ADDR, PORT, LIBAI_CLUSTER_TOKEN)");
}

TEST(ClusterEnv, TorchrunConvention) {
  ClusterSpec spec = resolve(
      {{"NNODES", "3"}, {"NODE_RANK", "1"}, {"MASTER_ADDR", "head"}, {"MASTER_PORT", "1234"}});
  EXPECT_EQ(spec.nodes, 3);
  EXPECT_EQ(spec.node_rank, 1);
  EXPECT_EQ(spec.addr, "head");
  EXPECT_EQ(spec.port, 1234);
  EXPECT_EQ(spec.source, "torchrun env (NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT)");
}

TEST(ClusterEnv, SlurmConvention) {
  ClusterSpec spec = resolve({{"SLURM_NNODES", "4"},
                              {"SLURM_JOB_NUM_NODES", "8"},  // the job; the step has 4
                              {"SLURM_NODEID", "3"},
                              {"SLURM_PROCID", "3"},
                              {"SLURM_JOB_NODELIST", "gpu[07-10],login"},
                              {"SLURM_LAUNCH_NODE_IPADDR", "192.168.0.1"}});
  EXPECT_EQ(spec.nodes, 4);
  EXPECT_EQ(spec.node_rank, 3);
  EXPECT_EQ(spec.addr, "gpu07");  // where rank 0 runs, not the launching host
  EXPECT_EQ(spec.port, 29500);
  EXPECT_EQ(spec.source, "Slurm (SLURM_NNODES, SLURM_NODEID, SLURM_JOB_NODELIST); defaults (port)");
}

TEST(ClusterEnv, SlurmFallbacks) {
  // The job's node count, the task rank, the launch node's address, and MASTER_PORT.
  ClusterSpec spec = resolve({{"SLURM_JOB_NUM_NODES", "2"},
                              {"SLURM_PROCID", "1"},
                              {"SLURM_LAUNCH_NODE_IPADDR", "192.168.0.1"},
                              {"MASTER_PORT", "4000"}});
  EXPECT_EQ(spec.nodes, 2);
  EXPECT_EQ(spec.node_rank, 1);
  EXPECT_EQ(spec.addr, "192.168.0.1");
  EXPECT_EQ(spec.port, 4000);
  // SLURM_NODELIST (the older name) when SLURM_JOB_NODELIST is absent.
  EXPECT_EQ(
      resolve({{"SLURM_NNODES", "2"}, {"SLURM_NODEID", "0"}, {"SLURM_NODELIST", "n[3-4]"}}).addr,
      "n3");
  // The step's own list comes first.
  EXPECT_EQ(resolve({{"SLURM_NNODES", "2"},
                     {"SLURM_NODEID", "0"},
                     {"SLURM_STEP_NODELIST", "n[5-6]"},
                     {"SLURM_JOB_NODELIST", "n[3-6]"}})
                .addr,
            "n5");
}

TEST(ClusterEnv, SlurmAllocationWithoutATaskIsIgnored) {
  // An salloc shell: the allocation is known but this process is not one of its tasks.
  ClusterSpec spec = resolve({{"SLURM_NNODES", "4"}, {"SLURM_JOB_NODELIST", "n[1-4]"}});
  EXPECT_EQ(spec.nodes, 1);
  EXPECT_EQ(spec.addr, "127.0.0.1");
}

TEST(ClusterEnv, SlurmWithExplicitAddressAndAgreeingCounts) {
  // torchrun-on-Slurm: the user names node 0 explicitly; Slurm gives the counts.
  ClusterSpec spec = resolve({{"SLURM_NNODES", "2"},
                              {"SLURM_NODEID", "1"},
                              {"SLURM_JOB_NODELIST", "n[1-2]"},
                              {"NNODES", "2"},
                              {"MASTER_ADDR", "10.0.0.1"},
                              {"MASTER_PORT", "29501"}});
  EXPECT_EQ(spec.nodes, 2);
  EXPECT_EQ(spec.node_rank, 1);
  EXPECT_EQ(spec.addr, "10.0.0.1");
  EXPECT_EQ(spec.port, 29501);
  EXPECT_EQ(spec.source, "torchrun env (NNODES, MASTER_ADDR, MASTER_PORT); Slurm (SLURM_NODEID)");
}

TEST(ClusterEnv, AgreeingConventionsAreAccepted) {
  ClusterSpec spec =
      resolve({{"NODE", "2"}, {"NNODES", "02"}, {"ADDR", "h"}, {"MASTER_ADDR", "h"}});
  EXPECT_EQ(spec.nodes, 2);
  EXPECT_EQ(spec.addr, "h");
}

TEST(ClusterEnv, EmptyAndPaddedVariables) {
  ClusterSpec spec = resolve({{"NODE", ""}, {"NNODES", " 3 "}, {"NODE_RANK", "2\n"}});
  EXPECT_EQ(spec.nodes, 3);
  EXPECT_EQ(spec.node_rank, 2);
}

TEST(ClusterEnv, ConfigValues) {
  config::Config cfg = cluster_config();
  ClusterSpec spec = resolve({}, {}, &cfg);
  EXPECT_EQ(spec.nodes, 4);
  EXPECT_EQ(spec.node_rank, 3);
  EXPECT_EQ(spec.addr, "10.0.0.9");
  EXPECT_EQ(spec.port, 7000);
  EXPECT_EQ(spec.token, "from-config");
  EXPECT_EQ(spec.source, "config (nodes, node_rank, addr, port, token)");
  // A null token (the shipped default) is no token.
  config::Config null_token = config::Config::parse("train: {cluster: {token: null}}\n");
  EXPECT_EQ(resolve({}, {}, &null_token).token, "");
}

TEST(ClusterEnv, PrecedenceFlagsThenEnvThenConfigThenDefaults) {
  config::Config cfg = config::Config::parse("train: {cluster: {nodes: 4, node_rank: 3}}\n");
  ClusterFlags flags;
  flags.nodes = 8;
  flags.token = "from-flags";
  ClusterSpec spec = resolve(
      {{"NODE", "6"}, {"NODE_RANK", "5"}, {"PORT", "4444"}, {"LIBAI_CLUSTER_TOKEN", "from-env"}},
      flags, &cfg);
  EXPECT_EQ(spec.nodes, 8);           // flag over NODE=6 and the config's 4
  EXPECT_EQ(spec.node_rank, 5);       // env over the config's 3
  EXPECT_EQ(spec.port, 4444);         // env
  EXPECT_EQ(spec.addr, "127.0.0.1");  // default
  EXPECT_EQ(spec.token, "from-flags");
  EXPECT_EQ(spec.source, "flags (nodes, token); LiBai env (NODE_RANK, PORT); defaults (addr)");

  config::Config full = cluster_config();
  EXPECT_EQ(resolve({{"LIBAI_CLUSTER_TOKEN", "from-env"}}, {}, &full).token, "from-env");
  ClusterFlags addr_flag;
  addr_flag.addr = "flag-host";
  addr_flag.node_rank = 0;
  ClusterSpec mixed = resolve({{"ADDR", "env-host"}}, addr_flag, &full);
  EXPECT_EQ(mixed.addr, "flag-host");
  EXPECT_EQ(mixed.node_rank, 0);
  EXPECT_EQ(mixed.nodes, 4);
  EXPECT_EQ(mixed.source, "flags (node_rank, addr); config (nodes, port, token)");
}

TEST(ClusterEnv, NonIntegerVariableIsNamed) {
  std::string message = error_of({{"NODE", "2"}, {"NODE_RANK", "one"}});
  EXPECT_TRUE(contains(message, "NODE_RANK=one (LiBai env) is not an integer")) << message;
  message = error_of({{"MASTER_PORT", "29500x"}});
  EXPECT_TRUE(contains(message, "MASTER_PORT=29500x (torchrun env) is not an integer")) << message;
  message = error_of({{"SLURM_NODEID", "x"}, {"SLURM_NNODES", "2"}});
  EXPECT_TRUE(contains(message, "SLURM_NODEID=x (Slurm) is not an integer")) << message;
}

TEST(ClusterEnv, RankOutsideNodesNamesBothSources) {
  std::string message = error_of({{"NODE", "2"}, {"NODE_RANK", "2"}});
  EXPECT_TRUE(contains(message, "node_rank must be in [0, nodes) = [0, 2)")) << message;
  EXPECT_TRUE(contains(message, "NODE_RANK=2 (LiBai env)")) << message;
  EXPECT_TRUE(contains(message, "NODE=2 (LiBai env)")) << message;
  // Rank from the environment, count from the config: both named, the config by location.
  config::Config cfg = config::Config::parse("train: {cluster: {nodes: 1}}\n", "job.yaml");
  message = error_of({{"NODE_RANK", "1"}}, {}, &cfg);
  EXPECT_TRUE(contains(message, "NODE_RANK=1 (LiBai env)")) << message;
  EXPECT_TRUE(contains(message, "job.yaml:1:")) << message;
  EXPECT_TRUE(contains(message, "train.cluster.nodes")) << message;
  ClusterFlags negative;
  negative.node_rank = -1;
  message = error_of({}, negative);
  EXPECT_TRUE(contains(message, "node_rank=-1 (flags)")) << message;
  ClusterFlags no_nodes;
  no_nodes.nodes = 0;
  message = error_of({}, no_nodes);
  EXPECT_TRUE(contains(message, "nodes must be at least 1, got nodes=0 (flags)")) << message;
}

TEST(ClusterEnv, PortOutOfRange) {
  std::string message = error_of({{"PORT", "70000"}});
  EXPECT_TRUE(contains(message, "port must be in [1, 65535]")) << message;
  EXPECT_TRUE(contains(message, "PORT=70000 (LiBai env)")) << message;
  EXPECT_TRUE(contains(error_of({{"MASTER_PORT", "-1"}}), "MASTER_PORT=-1 (torchrun env)"));
  // Port 0 (any free port) only when nobody has to join.
  EXPECT_EQ(resolve({{"PORT", "0"}}).port, 0);
  message = error_of({{"PORT", "0"}, {"NODE", "2"}});
  EXPECT_TRUE(contains(message, "port 0 (any free port) works only for a single node")) << message;
}

TEST(ClusterEnv, EmptyAddress) {
  ClusterFlags flags;
  flags.addr = "";
  std::string message = error_of({}, flags);
  EXPECT_TRUE(contains(message, "node 0's address is empty")) << message;
  EXPECT_TRUE(contains(message, "(flags)")) << message;
  config::Config cfg = config::Config::parse("train: {cluster: {addr: ''}}\n", "job.yaml");
  message = error_of({}, {}, &cfg);
  EXPECT_TRUE(contains(message, "job.yaml:1:")) << message;
  EXPECT_TRUE(contains(message, "train.cluster.addr")) << message;
}

TEST(ClusterEnv, DisagreeingConventionsNameBoth) {
  std::string message = error_of({{"NODE", "2"}, {"NNODES", "3"}});
  EXPECT_TRUE(contains(message, "NODE=2 (LiBai env) disagrees with NNODES=3 (torchrun env)"))
      << message;
  message = error_of({{"ADDR", "a"}, {"MASTER_ADDR", "b"}});
  EXPECT_TRUE(contains(message, "ADDR=a (LiBai env) disagrees with MASTER_ADDR=b (torchrun env)"))
      << message;
  message = error_of({{"PORT", "1"}, {"MASTER_PORT", "2"}});
  EXPECT_TRUE(contains(message, "PORT=1 (LiBai env) disagrees with MASTER_PORT=2")) << message;
  // A NODE_RANK exported to every Slurm task.
  message =
      error_of({{"NODE", "4"}, {"NODE_RANK", "0"}, {"SLURM_NNODES", "4"}, {"SLURM_NODEID", "2"}});
  EXPECT_TRUE(contains(message, "NODE_RANK=0 (LiBai env) disagrees with SLURM_NODEID=2 (Slurm)"))
      << message;
  message = error_of({{"NNODES", "2"}, {"SLURM_NNODES", "4"}, {"SLURM_NODEID", "0"}});
  EXPECT_TRUE(contains(message, "NNODES=2 (torchrun env) disagrees with SLURM_NNODES=4 (Slurm)"))
      << message;
  // Flags settle it: a flag is not compared with the environment.
  ClusterFlags flags;
  flags.nodes = 3;
  EXPECT_EQ(resolve({{"NODE", "2"}}, flags).nodes, 3);
}

TEST(ClusterEnv, MalformedSlurmNodelistIsNamed) {
  std::string message =
      error_of({{"SLURM_NNODES", "2"}, {"SLURM_NODEID", "0"}, {"SLURM_JOB_NODELIST", "n[1-"}});
  EXPECT_TRUE(contains(message, "SLURM_JOB_NODELIST=n[1- (Slurm)")) << message;
  EXPECT_TRUE(contains(message, "unclosed '['")) << message;
}

TEST(ClusterEnv, TokenIsNeverShownInMessages) {
  std::string message = error_of({{"LIBAI_CLUSTER_TOKEN", "s3cret"}, {"NODE", "x"}});
  EXPECT_FALSE(contains(message, "s3cret")) << message;
  EXPECT_FALSE(contains(resolve({{"LIBAI_CLUSTER_TOKEN", "s3cret"}}).source, "s3cret"));
}

TEST(SlurmNodelist, Expansion) {
  using List = std::vector<std::string>;
  EXPECT_EQ(expand_slurm_nodelist("node01"), List{"node01"});
  EXPECT_EQ(expand_slurm_nodelist("node[01-04,07]"),
            (List{"node01", "node02", "node03", "node04", "node07"}));
  EXPECT_EQ(expand_slurm_nodelist("a1,b[8-10],c"), (List{"a1", "b8", "b9", "b10", "c"}));
  EXPECT_EQ(expand_slurm_nodelist("gpu[008-010]-ib"),
            (List{"gpu008-ib", "gpu009-ib", "gpu010-ib"}));
  EXPECT_EQ(expand_slurm_nodelist("r[1-2]n[1,3]"), (List{"r1n1", "r1n3", "r2n1", "r2n3"}));
  EXPECT_EQ(expand_slurm_nodelist("10.0.0.[5-6]"), (List{"10.0.0.5", "10.0.0.6"}));
}

TEST(SlurmNodelist, FirstHost) {
  EXPECT_EQ(first_slurm_host("node[01-04,07]"), "node01");
  EXPECT_EQ(first_slurm_host("login,node[1-2]"), "login");
  EXPECT_EQ(first_slurm_host("r[3-4]n[09-12]"), "r3n09");
  EXPECT_EQ(first_slurm_host("big[1-999999999]"), "big1");  // not expanded
}

TEST(SlurmNodelist, MalformedLists) {
  for (const char* bad :
       {"", "n[1-", "n]1", "n[[1]]", "n[]", "n[a-b]", "n[4-2]", "a,,b", "n[1-2000000]"}) {
    EXPECT_THROW(expand_slurm_nodelist(bad), InvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace libai
