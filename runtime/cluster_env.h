// Where this process is in the cluster: how many node processes there are, its own rank, and
// where node 0 listens, resolved from command-line flags, the launcher's environment and the
// config.
//
//   ClusterFlags flags;
//   flags.node_rank = 1;                                   // e.g. from --node-rank 1
//   ClusterSpec spec = resolve_cluster(flags, &cfg);       // throws InvalidArgument
//   logger("cluster")->info("node {} of {}, node 0 at {}:{} (from {})", spec.node_rank,
//                           spec.nodes, spec.addr, spec.port, spec.source);
//
// Each field is taken from the first of: flags, environment, config (`train.cluster.*`),
// default. The environment conventions understood:
//
//   field      LiBai       torchrun      Slurm (only in a Slurm task: SLURM_NODEID or
//                                               SLURM_PROCID is set)
//   nodes      NODE        NNODES        SLURM_STEP_NUM_NODES, else SLURM_NNODES, else
//                                        SLURM_JOB_NUM_NODES
//   node_rank  NODE_RANK   NODE_RANK     SLURM_NODEID, else SLURM_PROCID
//   addr       ADDR        MASTER_ADDR   first host of SLURM_STEP_NODELIST, else
//                                        SLURM_JOB_NODELIST, else SLURM_NODELIST
//                                        ("node[01-04,07]" -> "node01"), else
//                                        SLURM_LAUNCH_NODE_IPADDR
//   port       PORT        MASTER_PORT   (none: MASTER_PORT or the default)
//   token      LIBAI_CLUSTER_TOKEN
//
// An empty variable counts as unset. When several conventions give the same field they must
// agree (NODE=2 with NNODES=3 is an error naming both; so is NODE_RANK=0 with SLURM_NODEID=2,
// the usual sign of a NODE_RANK exported to every task), except for the address, where Slurm's
// guess (a host name where the others may give an IP) yields to ADDR / MASTER_ADDR. Slurm's
// first host is used rather than SLURM_LAUNCH_NODE_IPADDR when both exist, because node rank 0
// runs on the first host of the step, whereas the launch node may be a login node.
//
// Every caller mistake is an InvalidArgument naming the value and where it came from: a
// variable that is not an integer, nodes < 1, node_rank outside [0, nodes), a port outside
// [0, 65535] (0, any free port, only for a single node), an empty address, or conventions
// that disagree.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace libai {

namespace config {
class Config;
}

struct ClusterSpec {
  int nodes = 1;                   // number of node processes
  int node_rank = 0;               // this process, in [0, nodes)
  std::string addr = "127.0.0.1";  // node 0's address
  int port = 29500;                // node 0's control port
  std::string token;               // shared secret ("" = none given)
  // Where the values came from, for messages: "flags", "LiBai env (NODE, NODE_RANK, ADDR,
  // PORT)", "torchrun env (...)", "Slurm (...)", "config (...)", "defaults (...)", joined
  // with "; " when the fields came from several places.
  std::string source;
};

// Values given on the command line; unset ones fall through to the environment.
struct ClusterFlags {
  std::optional<int> nodes, node_rank, port;
  std::optional<std::string> addr, token;
};

// Reads one environment variable: nullopt when unset. Injectable so tests never touch the
// real environment.
using EnvLookup = std::function<std::optional<std::string>(const char*)>;
std::optional<std::string> real_env(const char* name);

// `cfg` may be null (no config: flags, environment and defaults only).
ClusterSpec resolve_cluster(const ClusterFlags& flags, const config::Config* cfg,
                            const EnvLookup& env = real_env);

// Slurm host lists: "node[01-04,07],gpu3" -> node01 node02 node03 node04 node07 gpu3. A
// bracket holds comma-separated numbers or ranges; a range keeps the width of its first
// number ("[08-10]" -> 08 09 10). Several brackets in one name multiply out
// ("r[1-2]n[1-2]" -> r1n1 r1n2 r2n1 r2n2). Throws InvalidArgument on a malformed list or
// one of more than a million hosts.
std::vector<std::string> expand_slurm_nodelist(std::string_view nodelist);
// The first host of such a list, without expanding the rest.
std::string first_slurm_host(std::string_view nodelist);

}  // namespace libai
