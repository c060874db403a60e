#include "plan/auto_parallel.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <ostream>
#include <sstream>
#include <thread>

#include "plan/run_plan.h"
#include "models/stages/stage.h"
#include "runtime/comm/local_communicator.h"
#include "runtime/error.h"

namespace libai::plan {

namespace mp = models::stages;

namespace {

// The attention heads tensor parallelism must divide (0 when the config names none).
int64_t attention_heads(const models::HfConfig& hf) {
  for (const char* key : {"num_attention_heads", "n_head", "num_heads"})
    if (hf.has(key)) return hf.get_int(key, 0);
  return 0;
}

template <typename T>
std::optional<T> set_value(const config::Config& cfg, const std::string& key) {
  return cfg.get_or<std::optional<T>>(key, std::nullopt);
}

// graph.auto_parallel.<key>: its bandwidth (0 when null: measured later) and latency (the hop
// key's value, or 0, when null).
schedule::LinkModel link_of(const config::Config& cfg, const std::string& key,
                            const std::string& hop_key, bool* given) {
  schedule::LinkModel link;
  const auto bandwidth = set_value<double>(cfg, key + ".bandwidth_gbs");
  *given = bandwidth.has_value();
  link.bandwidth_gbs = bandwidth.value_or(0.0);
  link.latency_seconds = set_value<double>(cfg, key + ".latency_seconds")
                             .value_or(cfg.get_or<double>(hop_key, 0.0));
  return link;
}

std::string gb(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g GB", bytes / 1e9);
  return text;
}

std::string estimate_line(const schedule::ParallelEstimate& e) {
  char text[200];
  std::snprintf(text, sizeof text, "%s a step, %.4g samples/s, %s of %s a device", format_seconds(e.step_seconds).c_str(),
                e.samples_per_second, gb(e.memory_bytes).c_str(),
                e.memory_cap > 0 ? gb(e.memory_cap).c_str() : "unlimited");
  return text;
}

}  // namespace

// Note [The link probe]
// Two ranks of a local group (threads of this process, as a stage's tensor-parallel ranks talk
// on one node) all-reduce 4 bytes and 4 MiB, 20 times each after a warm-up; the fastest of
// each. A ring of two ranks costs 2 latencies + bytes / bandwidth (all_reduce_seconds), so the
// latency is half the small one and the bandwidth 4 MiB over the difference.
schedule::LinkModel probe_local_link() {
  const auto comms = comm::LocalGroup::create(2, std::chrono::seconds(30));
  constexpr int kRepeats = 20;
  const int64_t large = int64_t(1) << 20;  // f32 elements: 4 MiB
  double fastest[2] = {1e30, 1e30};
  std::thread peer([&] {
    for (int64_t n : {int64_t(1), large})
      for (int k = 0; k <= kRepeats; ++k) comms[1]->all_reduce(Tensor::zeros({n}, DType::f32));
  });
  int which = 0;
  for (int64_t n : {int64_t(1), large}) {
    Tensor t = Tensor::zeros({n}, DType::f32);
    for (int k = 0; k <= kRepeats; ++k) {
      const auto start = std::chrono::steady_clock::now();
      comms[0]->all_reduce(t);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (k > 0) fastest[which] = std::min(fastest[which], seconds);
    }
    ++which;
  }
  peer.join();
  schedule::LinkModel link;
  link.latency_seconds = fastest[0] / 2;
  link.bandwidth_gbs = double(large) * 4 / std::max(fastest[1] - fastest[0], 1e-9) / 1e9;
  return link;
}

AutoParallelSetup auto_parallel_setup(const config::Config& cfg, const models::HfConfig& model,
                                      const std::string& model_name) {
  AutoParallelSetup s;
  const int nodes = cfg.get_or<int>("train.cluster.nodes", 1);
  const int per_node = cfg.get_or<int>("train.cluster.devices_per_node", 1);
  const auto global = set_value<int64_t>(cfg, "train.global_batch_size");
  LIBAI_CHECK(global.has_value(), "graph.auto_parallel.enabled: set train.global_batch_size (the "
              "samples of one optimizer step, which every layout must make)");
  schedule::SearchSpace& space = s.space;
  space.devices = nodes * per_node;
  space.devices_per_node = per_node;
  space.num_layers = mp::pipeline_num_layers(model);
  space.global_batch = *global;
  space.heads = attention_heads(model);
  schedule::ParallelConstraints& fixed = space.constraints;
  fixed.dp = set_value<int>(cfg, "train.dist.data_parallel_size");
  fixed.tp = set_value<int>(cfg, "train.dist.tensor_parallel_size");
  fixed.pp = set_value<int>(cfg, "train.dist.pipeline_parallel_size");
  fixed.micro_batch_size = set_value<int64_t>(cfg, "train.train_micro_batch_size");
  fixed.chunks = set_value<int>(cfg, "train.dist.virtual_pipeline_size");
  if (auto name = set_value<std::string>(cfg, "train.dist.pipeline_schedule"))
    fixed.schedule = schedule::parse_schedule(*name);
  if (auto on = set_value<bool>(cfg, "train.activation_checkpoint.enabled"))
    fixed.activation_checkpoint = *on;
  if (auto on = set_value<bool>(cfg, "train.zero_optimization.enabled"))
    fixed.zero_stage = *on ? cfg.get_or<int>("train.zero_optimization.stage", 1) : 0;
  if (auto balance = set_value<std::string>(cfg, "train.dist.balance")) {
    LIBAI_CHECK(*balance != "memory", "graph.auto_parallel.enabled: train.dist.balance is memory; "
                "the search chooses between uniform and measured splits (set one of them, or "
                "null to search both)");
    fixed.balanced = *balance == "measured";
  }
  LIBAI_CHECK(!set_value<std::vector<int64_t>>(cfg, "train.dist.custom_pipeline_stage_id"),
              "graph.auto_parallel.enabled: train.dist.custom_pipeline_stage_id fixes the split "
              "of one layout; the search chooses the pipeline size and the split (leave it null)");
  LIBAI_CHECK(!set_value<int>(cfg, "train.num_accumulation_steps"),
              "graph.auto_parallel.enabled: train.num_accumulation_steps follows from the global "
              "batch, the data-parallel size and the micro-batch size the search chooses; set "
              "train.train_micro_batch_size to fix it, or leave both unset");
  // The base shape: the model, its sequence length, balance and threads, one device.
  config::Config one = cfg;
  for (const char* key : {"train.dist.data_parallel_size", "train.dist.tensor_parallel_size",
                          "train.dist.pipeline_parallel_size"})
    one.apply_override(std::string(key) + "=1");
  one.apply_override("train.cluster.device_slowdown=null");
  one.apply_override("train.dist.balance=uniform");
  s.base = model_train_shape(one, model, model_name, 1);
  s.base.devices_per_node = per_node;
  bool intra = false, inter = false;
  s.intra_node = link_of(cfg, "graph.auto_parallel.intra_node", "train.cluster.local_hop_seconds", &intra);
  s.inter_node = link_of(cfg, "graph.auto_parallel.inter_node", "train.cluster.remote_hop_seconds", &inter);
  s.links_measured = !(intra && inter);
  return s;
}

namespace {

// Every device of the cluster a replica of one device, without recomputation, at the config's
// micro-batch size or 1: how each device is measured for the search.
config::Config profiling_config(const config::Config& cfg, const AutoParallelSetup& setup) {
  config::Config all = cfg;
  all.apply_override("train.dist.data_parallel_size=" + std::to_string(setup.space.devices));
  all.apply_override("train.dist.tensor_parallel_size=1");
  all.apply_override("train.dist.pipeline_parallel_size=1");
  all.apply_override("train.activation_checkpoint.enabled=false");  // the factor without recompute
  if (!setup.space.constraints.micro_batch_size) all.apply_override("train.train_micro_batch_size=1");
  return all;
}

}  // namespace

ModelTrainShape auto_parallel_profiling_shape(const config::Config& cfg,
                                              const AutoParallelSetup& setup) {
  return model_train_shape(profiling_config(cfg, setup), setup.base.model, setup.base.model_name,
                           setup.space.devices_per_node);
}

void calibrate_auto_parallel(const config::Config& cfg, AutoParallelSetup& setup,
                             std::vector<DeviceProfile>& profiles,
                             double remote_hop_seconds, double inter_node_bandwidth_gbs) {
  const ModelTrainShape shape = auto_parallel_profiling_shape(cfg, setup);
  LIBAI_CHECK(int(profiles.size()) == setup.space.devices, "auto parallel: ", profiles.size(),
              " device profiles for a cluster of ", setup.space.devices, " devices");
  // The fixed part of a layer's time: the layer timed again at a larger micro-batch k, where
  // t(k) = fixed + k x per-sample (Note [Auto parallel costs of a model]).
  setup.overhead_fraction = 0;
  setup.overhead_timed_at = 0;
  const int64_t k = std::min<int64_t>(8, setup.space.global_batch);
  if (!setup.space.constraints.micro_batch_size && k > 1) {
    ModelTrainShape larger = shape;
    larger.micro_batch_size = k;
    const auto one = time_train_layer(shape, Device::cpu(0), 1.0);
    const auto many = time_train_layer(larger, Device::cpu(0), 1.0);
    if (one && many && one->forward_seconds > 0) {
      const double fixed = (double(k) * one->forward_seconds - many->forward_seconds) / double(k - 1);
      setup.overhead_fraction = std::clamp(fixed / one->forward_seconds, 0.0, 0.9);
      setup.overhead_timed_at = k;
    }
  }
  // Calibration: the rest of the timed layer against its roofline.
  const std::vector<mp::LayerCost> costs =
      mp::layer_costs(shape.model, shape.tokens(), DType::f32, shape.seq_length);
  const mp::LayerCost& timed = costs.size() > 1 ? costs[1] : costs[0];
  for (auto& p : profiles) {
    if (p.layer_seconds <= 0) continue;
    const double roofline = schedule::layer_time_from_profile(timed.flops, timed.weight_bytes,
                                                              p.matmul_gflops, p.memory_bandwidth_gbs);
    const double scale = (1 - setup.overhead_fraction) * p.layer_seconds / roofline;
    p.matmul_gflops /= scale;
    p.memory_bandwidth_gbs /= scale;
  }
  const bool inter_latency =
      set_value<double>(cfg, "graph.auto_parallel.inter_node.latency_seconds").has_value();
  // A cluster's measured hop between nodes (cluster formation) is the latency the config leaves
  // unset.
  if (!inter_latency && !set_value<double>(cfg, "train.cluster.remote_hop_seconds") &&
      remote_hop_seconds > 0)
    setup.inter_node.latency_seconds = remote_hop_seconds;
  // And its measured bandwidth, the bandwidth the config leaves unset.
  if (setup.inter_node.bandwidth_gbs <= 0 && inter_node_bandwidth_gbs > 0) {
    setup.inter_node.bandwidth_gbs = inter_node_bandwidth_gbs;
    setup.inter_node_measured = true;
  }
  if (setup.links_measured) {
    const schedule::LinkModel probed = probe_local_link();
    const bool intra_latency = set_value<double>(cfg, "graph.auto_parallel.intra_node.latency_seconds").has_value();
    if (setup.intra_node.bandwidth_gbs <= 0) {
      setup.intra_node.bandwidth_gbs = probed.bandwidth_gbs;
      if (!intra_latency) setup.intra_node.latency_seconds = probed.latency_seconds;
    }
    if (setup.inter_node.bandwidth_gbs <= 0) {
      setup.inter_node.bandwidth_gbs = probed.bandwidth_gbs / 10;
      if (!inter_latency && setup.inter_node.latency_seconds <= 0)
        setup.inter_node.latency_seconds = probed.latency_seconds;
    }
  }
  setup.backward_factor = train_backward_factor(shape, profiles);
}

std::vector<DeviceProfile> auto_parallel_devices(const config::Config& cfg,
                                                       AutoParallelSetup& setup) {
  const config::Config all = profiling_config(cfg, setup);
  std::vector<DeviceProfile> profiles =
      train_devices_like_this_node(all, auto_parallel_profiling_shape(cfg, setup));
  calibrate_auto_parallel(cfg, setup, profiles);
  return profiles;
}

// Note [Auto parallel costs of a model]
// Per layer, for one sample (data.seq_length tokens attending to as many): its flops, its
// parameters (f32 weight bytes / 4), the activations it keeps for backward and the hidden state
// it passes on (layer_costs); the embedding and the head likewise. Layer 1 is timed at
// micro-batch 1 on every device (its emulated slow-down included) and, on cpu:0, at k =
// min(8, global batch) too: t(k) = fixed + k x per-sample gives the fraction of t(1) that does
// not grow with the micro-batch (per-op overheads: on a CPU a small layer costs several times
// its roofline). Each device then costs that fraction of its timed layer per layer and
// micro-batch (DeviceRates::overhead_seconds), and its rates are divided by the calibration
// of the rest, (1 - fraction) x timed / roofline. With the micro-batch size fixed by the
// config, one size is timed and everything scales with the work. The backward is the timed
// layer's backward / forward without recomputation (or 2).
schedule::TrainCostModel auto_parallel_costs(const AutoParallelSetup& setup,
                                             const std::vector<DeviceProfile>& devices) {
  schedule::TrainCostModel m;
  const ModelTrainShape& base = setup.base;
  const int64_t seq = base.seq_length;
  for (const mp::LayerCost& c : mp::layer_costs(base.model, seq, DType::f32, seq)) {
    m.layer_flops.push_back(c.flops);
    m.layer_parameters.push_back(c.weight_bytes / 4);
    m.layer_activation_bytes.push_back(double(seq) * c.activation_bytes_per_token);
    m.layer_output_bytes.push_back(double(seq) * c.output_bytes_per_token);
  }
  const mp::LayerCost embedding = mp::embedding_cost(base.model, seq, DType::f32);
  const mp::LayerCost head = mp::head_cost(base.model, seq, DType::f32);
  m.embedding_flops = embedding.flops;
  m.embedding_parameters = embedding.weight_bytes / 4;
  m.embedding_bytes = double(seq) * embedding.output_bytes_per_token;
  m.head_flops = head.flops;
  m.head_parameters = head.weight_bytes / 4;
  m.backward_factor = setup.backward_factor;
  for (const auto& d : devices)
    m.devices.push_back({.gflops = d.matmul_gflops,
                         .gbs = d.memory_bandwidth_gbs,
                         .memory_bytes = double(d.free_memory_bytes) / setup.space.devices_per_node,
                         .overhead_seconds = setup.overhead_fraction * d.layer_seconds});
  m.devices_per_node = setup.space.devices_per_node;
  m.intra_node = setup.intra_node;
  m.inter_node = setup.inter_node;
  m.global_batch = setup.space.global_batch;
  return m;
}

schedule::SearchResult search_train_layouts(const AutoParallelSetup& setup,
                                            const schedule::TrainCostModel& costs) {
  schedule::EstimateCache cache;
  return schedule::search_parallel(setup.space, [&](const schedule::ParallelChoice& c) {
    return schedule::estimate_training(costs, c, cache);
  });
}

ModelTrainShape shape_of(const AutoParallelSetup& setup, const schedule::ParallelChoice& c) {
  ModelTrainShape s = setup.base;
  s.dp = c.dp;
  s.tp = c.tp;
  s.pp = c.pp;
  s.chunks = c.chunks;
  s.schedule = schedule::schedule_name(c.schedule);
  s.micro_batches = c.accumulation;
  s.micro_batch_size = c.micro_batch_size;
  s.activation_checkpoint = c.activation_checkpoint;
  s.zero_stage = c.zero_stage;
  s.balance = c.balanced ? "measured" : "uniform";
  s.slowdown.assign(size_t(c.devices()), 1.0);
  return s;
}

std::vector<std::string> choice_overrides(const schedule::ParallelChoice& c) {
  std::vector<std::string> out = {
      "train.dist.data_parallel_size=" + std::to_string(c.dp),
      "train.dist.tensor_parallel_size=" + std::to_string(c.tp),
      "train.dist.pipeline_parallel_size=" + std::to_string(c.pp),
      "train.train_micro_batch_size=" + std::to_string(c.micro_batch_size),
      "train.num_accumulation_steps=" + std::to_string(c.accumulation)};
  if (c.pp > 1) {
    out.push_back(std::string("train.dist.pipeline_schedule=") + schedule::schedule_name(c.schedule));
    if (c.schedule == schedule::PipelineSchedule::interleaved)
      out.push_back("train.dist.virtual_pipeline_size=" + std::to_string(c.chunks));
  }
  out.push_back(std::string("train.dist.balance=") + (c.balanced ? "measured" : "uniform"));
  out.push_back(std::string("train.activation_checkpoint.enabled=") +
                (c.activation_checkpoint ? "true" : "false"));
  out.push_back(std::string("train.zero_optimization.enabled=") + (c.zero_stage > 0 ? "true" : "false"));
  if (c.zero_stage > 0) out.push_back("train.zero_optimization.stage=" + std::to_string(c.zero_stage));
  return out;
}

AutoParallelRun run_auto_parallel(const config::Config& cfg, const models::HfConfig& model,
                                  const std::string& model_name) {
  AutoParallelRun run;
  run.setup = auto_parallel_setup(cfg, model, model_name);
  run.devices = auto_parallel_devices(cfg, run.setup);
  run.costs = auto_parallel_costs(run.setup, run.devices);
  run.result = search_train_layouts(run.setup, run.costs);
  return run;
}

AutoParallelRun run_auto_parallel(const config::Config& cfg, AutoParallelSetup setup,
                                  std::vector<DeviceProfile> measured,
                                  double remote_hop_seconds, double inter_node_bandwidth_gbs) {
  AutoParallelRun run;
  run.setup = std::move(setup);
  run.devices = std::move(measured);
  calibrate_auto_parallel(cfg, run.setup, run.devices, remote_hop_seconds,
                          inter_node_bandwidth_gbs);
  run.costs = auto_parallel_costs(run.setup, run.devices);
  run.result = search_train_layouts(run.setup, run.costs);
  return run;
}

config::Config chosen_config(const config::Config& cfg, const AutoParallelRun& run,
                             std::ostream& out) {
  const schedule::SearchResult& result = run.result;
  if (result.ranked.empty()) {
    std::ostringstream why;
    print_auto_parallel(why, run.setup, result, 0);
    std::string text = why.str();
    for (char& c : text)
      if (c == '\n') c = ';';
    LIBAI_THROW(InvalidArgument, "graph.auto_parallel.enabled: no layout fits: ", text);
  }
  const schedule::RankedChoice& best = result.ranked.front();
  out << "auto parallel: " << describe(best.choice) << " (of " << result.evaluated
      << " layouts; predicted " << estimate_line(best.estimate) << ")\n";
  config::Config chosen = cfg;
  for (const std::string& o : choice_overrides(best.choice)) chosen.apply_override(o);
  chosen.apply_override("graph.auto_parallel.enabled=false");
  return chosen;
}

config::Config adopt_chosen_layout(const config::Config& mine, const config::Config& planned) {
  LIBAI_CHECK(!planned.get_or<bool>("graph.auto_parallel.enabled", false),
              "node 0's plan carries no chosen layout (its graph.auto_parallel.enabled is still "
              "true)");
  schedule::ParallelChoice c;
  c.dp = planned.get_or<int>("train.dist.data_parallel_size", 1);
  c.tp = planned.get_or<int>("train.dist.tensor_parallel_size", 1);
  c.pp = planned.get_or<int>("train.dist.pipeline_parallel_size", 1);
  c.micro_batch_size = planned.get_or<int64_t>("train.train_micro_batch_size", 1);
  c.accumulation = planned.get_or<int>("train.num_accumulation_steps", 1);
  c.schedule = schedule::parse_schedule(
      planned.get_or<std::string>("train.dist.pipeline_schedule", "1f1b"));
  c.chunks = planned.get_or<int>("train.dist.virtual_pipeline_size", 1);
  c.activation_checkpoint = planned.get_or<bool>("train.activation_checkpoint.enabled", false);
  c.zero_stage = planned.get_or<bool>("train.zero_optimization.enabled", false)
                     ? planned.get_or<int>("train.zero_optimization.stage", 1)
                     : 0;
  c.balanced = planned.get_or<std::string>("train.dist.balance", "uniform") == "measured";
  config::Config out = mine;
  for (const std::string& o : choice_overrides(c)) out.apply_override(o);
  out.apply_override("graph.auto_parallel.enabled=false");
  return out;
}

namespace {

// The rejected choices grouped by the kind of reason, each group's fastest first.
std::map<std::string, std::vector<const schedule::RejectedChoice*>> rejection_groups(
    const schedule::SearchResult& r) {
  std::map<std::string, std::vector<const schedule::RejectedChoice*>> groups;
  for (const auto& x : r.rejected)
    groups[x.reason.find("GB on a device of") != std::string::npos ? "memory" : "the planner"]
        .push_back(&x);
  for (auto& [kind, list] : groups)
    std::stable_sort(list.begin(), list.end(), [](const auto* a, const auto* b) {
      return a->estimate.step_seconds < b->estimate.step_seconds;
    });
  return groups;
}


}  // namespace

void print_auto_parallel(std::ostream& out, const AutoParallelSetup& setup,
                         const schedule::SearchResult& r, int next) {
  const schedule::SearchSpace& space = setup.space;
  out << "auto parallel: " << space.devices << " devices (" << space.devices / space.devices_per_node
      << " node(s) x " << space.devices_per_node << "), " << space.num_layers << " layers, "
      << space.global_batch << " samples of " << setup.base.seq_length << " tokens a step; "
      << r.evaluated << " layouts estimated, " << r.ranked.size() << " fit, " << r.rejected.size()
      << " rejected\n";
  char links[200];
  std::snprintf(links, sizeof links,
                "  links: inside a node %.3g GB/s + %s, between nodes %.3g GB/s + %s%s\n",
                setup.intra_node.bandwidth_gbs, format_seconds(setup.intra_node.latency_seconds).c_str(),
                setup.inter_node.bandwidth_gbs, format_seconds(setup.inter_node.latency_seconds).c_str(),
                setup.inter_node_measured
                    ? " (unset ones measured: inside a node two ranks of this process "
                      "all-reducing; between nodes the cluster's control plane as it formed)"
                : setup.links_measured ? " (unset ones probed: two ranks of this process "
                                         "all-reducing; between nodes a tenth of its bandwidth)"
                                       : "");
  out << links;
  if (setup.overhead_timed_at > 0) {
    char overhead[160];
    std::snprintf(overhead, sizeof overhead,
                  "  per-micro-batch overhead: %.0f%% of a layer's time at micro-batch 1 (timed at 1 "
                  "and %lld)\n",
                  100 * setup.overhead_fraction, static_cast<long long>(setup.overhead_timed_at));
    out << overhead;
  }
  if (r.ranked.empty()) {
    out << "no layout fits:\n";
  } else {
    out << "chosen: " << describe(r.ranked.front().choice) << "\n  predicted "
        << estimate_line(r.ranked.front().estimate) << "\n";
    const auto& e = r.ranked.front().estimate;
    char parts[200];
    std::snprintf(parts, sizeof parts,
                  "  step = pipeline %s (bubble %.1f%%, tensor-parallel collectives %s) + "
                  "data-parallel gradients %s\n",
                  format_seconds(e.pipeline_seconds).c_str(), 100 * e.bubble_fraction,
                  format_seconds(e.tensor_comm_seconds).c_str(),
                  format_seconds(e.data_comm_seconds).c_str());
    out << parts;
    if (r.ranked.size() > 1) out << "next best:\n";
    for (size_t i = 1; i < r.ranked.size() && int(i) <= next; ++i) {
      const double slower = r.ranked[i].estimate.step_seconds / e.step_seconds;
      char line[64];
      std::snprintf(line, sizeof line, " (%.2fx the chosen step)", slower);
      out << "  " << describe(r.ranked[i].choice) << ": " << estimate_line(r.ranked[i].estimate)
          << line << "\n";
    }
  }
  for (const auto& [kind, list] : rejection_groups(r)) {
    out << "rejected (" << kind << "): " << list.size() << " layouts";
    if (!list.empty())
      out << "; the fastest, " << describe(list.front()->choice) << ": " << list.front()->reason;
    out << "\n";
  }
  for (const auto& line : r.excluded) out << "not estimated: " << line << "\n";
  if (!r.ranked.empty()) {
    out << "to run it, set:";
    for (const auto& o : choice_overrides(r.ranked.front().choice)) out << " " << o;
    out << "\n";
  }
}

nlohmann::json auto_parallel_json(const AutoParallelSetup& setup, const schedule::SearchResult& r) {
  const auto choice_json = [](const schedule::ParallelChoice& c) {
    return nlohmann::json{{"data_parallel_size", c.dp},
                          {"tensor_parallel_size", c.tp},
                          {"pipeline_parallel_size", c.pp},
                          {"micro_batch_size", c.micro_batch_size},
                          {"num_accumulation_steps", c.accumulation},
                          {"pipeline_schedule", schedule::schedule_name(c.schedule)},
                          {"virtual_pipeline_size", c.chunks},
                          {"zero_stage", c.zero_stage},
                          {"activation_checkpoint", c.activation_checkpoint},
                          {"balance", c.balanced ? "measured" : "uniform"},
                          {"description", describe(c)}};
  };
  const auto estimate_json = [](const schedule::ParallelEstimate& e) {
    return nlohmann::json{{"step_seconds", e.step_seconds},
                          {"samples_per_second", e.samples_per_second},
                          {"memory_bytes", e.memory_bytes},
                          {"memory_cap_bytes", e.memory_cap},
                          {"pipeline_seconds", e.pipeline_seconds},
                          {"tensor_comm_seconds", e.tensor_comm_seconds},
                          {"data_comm_seconds", e.data_comm_seconds},
                          {"bubble_fraction", e.bubble_fraction}};
  };
  nlohmann::json out;
  out["devices"] = setup.space.devices;
  out["devices_per_node"] = setup.space.devices_per_node;
  out["global_batch_size"] = setup.space.global_batch;
  out["evaluated"] = r.evaluated;
  out["links"] = {{"intra_node", {{"bandwidth_gbs", setup.intra_node.bandwidth_gbs},
                                  {"latency_seconds", setup.intra_node.latency_seconds}}},
                  {"inter_node", {{"bandwidth_gbs", setup.inter_node.bandwidth_gbs},
                                  {"latency_seconds", setup.inter_node.latency_seconds}}}};
  out["ranked"] = nlohmann::json::array();
  for (const auto& x : r.ranked)
    out["ranked"].push_back({{"layout", choice_json(x.choice)}, {"estimate", estimate_json(x.estimate)}});
  out["rejected"] = nlohmann::json::array();
  for (const auto& x : r.rejected)
    out["rejected"].push_back({{"layout", choice_json(x.choice)},
                               {"reason", x.reason},
                               {"estimate", estimate_json(x.estimate)}});
  out["excluded"] = r.excluded;
  if (!r.ranked.empty()) out["overrides"] = choice_overrides(r.ranked.front().choice);
  return out;
}

}  // namespace libai::plan
