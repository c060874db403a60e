// `libai-actor train CONFIG [key=value ...] [--resume] [--eval-only] [--fast-dev-run]`: a
// training run from a config with LiBai's keys (train/trainer.h; docs/TRAINING.md). Prints a
// line per train.log_period, writes train.output_dir (checkpoints, metrics.json, TensorBoard
// events, config.yaml, loss_curve.svg); --resume continues from the last checkpoint there.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "actors/cluster/cluster.h"
#include "actors/jobs/model_train_job.h"
#include "bin/commands.h"
#include "app/schema.h"
#include "runtime/logging.h"
#include "train/trainer.h"

namespace libai::cli {
namespace {

struct TrainOptions {
  std::string config;
  std::vector<std::string> overrides;
  train::TrainerFlags flags;
  std::optional<int> nodes, node_rank, port;
  std::optional<std::string> addr, token;
};

// graph.enabled: true: the actor runtime's training stages, on every node of the cluster
// (actors/jobs/model_train_job.h).
train::TrainResult graph_training(const config::Config& cfg, const TrainOptions& options) {
  ClusterFlags flags;
  flags.nodes = options.nodes;
  flags.node_rank = options.node_rank;
  flags.port = options.port;
  flags.addr = options.addr;
  flags.token = options.token;
  const ClusterSpec spec = resolve_cluster(flags, &cfg);
  set_log_rank(spec.node_rank);
  if (spec.nodes > 1) actors::install_interrupt_handlers();
  try {
    return actors::run_graph_training(cfg, options.flags, spec);
  } catch (const CommunicationError& e) {
    // Stage threads of this node may still be tied to a dead peer: end the process now.
    std::fprintf(stderr, "libai-actor train: error: %s\n", e.what());
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(kExitError);
  }
}

int train_command(const TrainOptions& options) {
  const config::Config cfg = config::load_libai_config(options.config, options.overrides, {});
  const bool graph = cfg.get_or<bool>("graph.enabled", false);
  const train::TrainResult r =
      graph ? graph_training(cfg, options) : train::run_training(cfg, options.flags);
  if (graph && r.losses.empty() && r.iterations == 0) return kExitOk;  // a node other than 0
  if (options.flags.eval_only) {
    if (r.eval_loss) std::printf("eval loss %.6f\n", *r.eval_loss);
  } else {
    std::printf("trained steps %lld to %lld; last loss %.6f", (long long)r.first_iteration,
                (long long)r.iterations, r.losses.empty() ? 0.0 : r.losses.back());
    if (r.eval_loss) std::printf("; eval loss %.6f", *r.eval_loss);
    std::printf("\noutput: %s\n", r.output_dir.string().c_str());
  }
  return kExitOk;
}

}  // namespace

CommandAction setup_train(CLI::App& command) {
  auto options = std::make_shared<TrainOptions>();
  command.add_option("CONFIG", options->config, "training config (YAML)")->required();
  command.add_option("overrides", options->overrides,
                     "KEY=VALUE overrides, e.g. train.train_iter=100");
  command.add_flag("--resume", options->flags.resume,
                   "continue from the last checkpoint in train.output_dir");
  command.add_flag("--eval-only", options->flags.eval_only,
                   "evaluate once on the validation split, no training");
  command.add_flag("--fast-dev-run", options->flags.fast_dev_run,
                   "2 steps, 1 evaluation batch and one checkpoint: a quick check of a config");
  command.add_option("--nodes", options->nodes, "graph mode: node processes in the cluster");
  command.add_option("--node-rank", options->node_rank, "graph mode: this node's rank");
  command.add_option("--addr", options->addr, "graph mode: node 0's address");
  command.add_option("--port", options->port, "graph mode: node 0's control port");
  command.add_option("--token", options->token, "graph mode: the cluster's shared secret");
  return [options] { return train_command(*options); };
}

}  // namespace libai::cli
