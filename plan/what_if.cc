// The what-if plan of a config without a model (plan/what_if.h).
#include "plan/what_if.h"

#include <algorithm>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "runtime/config/unimplemented.h"
#include "runtime/error.h"
#include "schedule/zero_memory.h"

namespace libai::plan {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// printf onto `out`.
__attribute__((format(printf, 2, 3))) void appendf(std::string& out, const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  if (n > 0) {
    const size_t at = out.size();
    out.resize(at + size_t(n) + 1);
    std::vsnprintf(out.data() + at, size_t(n) + 1, format, again);
    out.resize(at + size_t(n));
  }
  va_end(again);
}

// A per-device list given per device or per stage (each stage's value for all its devices).
std::vector<double> per_device(const std::string& key, std::vector<double> values, int dp, int pp,
                               int tp, const std::string& file) {
  const int devices = dp * pp * tp;
  if (int(values.size()) == devices) return values;
  LIBAI_CHECK(int(values.size()) == pp, file, ": ", key, " has ", values.size(),
              " entries; expected one per device (", devices, ") or one per stage (", pp, ")");
  std::vector<double> out = std::vector<double>(size_t(devices));
  for (int d = 0; d < dp; ++d)
    for (int s = 0; s < pp; ++s)
      for (int t = 0; t < tp; ++t) out[size_t((d * pp + s) * tp + t)] = values[size_t(s)];
  return out;
}

std::string device_list(const std::vector<int>& devices) {
  std::string out = devices.size() == 1 ? "device " : "devices ";
  for (size_t i = 0; i < devices.size() && i < 8; ++i)
    out += (i ? "," : "") + std::to_string(devices[i]);
  if (devices.size() > 8) out += ",... (" + std::to_string(devices.size()) + ")";
  return out;
}

// How many micro-batches (chunks, when interleaved) each stage keeps for its backward at once.
void print_stash(std::string& out, const schedule::Plan& plan) {
  const std::vector<int> stash = schedule::peak_stashed_activations(plan.program);
  appendf(out, "\npeak stashed activations (%s per stage, %s):",
              plan.num_chunks > 1 ? "micro-batch chunks" : "micro-batches",
              schedule_title(plan).c_str());
  for (size_t s = 0; s < stash.size(); ++s) appendf(out, " %d", stash[s]);
  appendf(out, "\n");
}

// The predicted bubble beside the formula for equal stages and free transfers.
void print_bubble(std::string& out, const schedule::Plan& plan, int m) {
  const int p = plan.pp, v = plan.num_chunks;
  const double predicted = schedule::measured_bubble_fraction(plan.timeline);
  if (v > 1)
    appendf(out, 
        "bubble %.1f%% of the step (ideal (p-1)/(v m+p-1) = %d/%d = %.1f%%; Megatron's "
        "(p-1)/(v m) = %.1f%% of the ideal time)\n",
        100.0 * predicted, p - 1, v * m + p - 1, 100.0 * schedule::ideal_bubble_fraction(p, m, v),
        100.0 * schedule::megatron_bubble_ratio(p, m, v));
  else
    appendf(out, "bubble %.1f%% of the step (ideal (p-1)/(m+p-1) = %d/%d = %.1f%%)\n",
                100.0 * predicted, p - 1, m + p - 1, 100.0 * schedule::ideal_bubble_fraction(p, m));
}

// Training under ZeRO: each rank's model state by term (Note [ZeRO memory model]), a layer of
// `layer_gib` being one unit.
void print_zero_memory(std::string& out, const schedule::Plan& plan, double layer_gib) {
  appendf(out, 
      "\nmemory per rank (train.dist.layer_memory %g GiB a layer read as f32 params, grads and "
      "AdamW state, 16 bytes a parameter; %s; the activations the schedule stashes at its "
      "peak):\n",
      layer_gib, schedule::zero_description(plan.zero_stage, plan.dp).c_str());
  if (plan.dp == 1)
    appendf(out, "  (ZeRO over one data-parallel rank: it holds every shard, so ZeRO saves "
                "nothing)\n");
  for (int s = 0; s < plan.pp; ++s) {
    const schedule::StagePlan& st = plan.stages[size_t(s)];
    const schedule::RankMemory& m = plan.rank_memory[size_t(s)];
    const schedule::ZeroMemory& z = m.model_state;
    double cap = 0;  // the tightest of its devices
    for (int d : st.devices) {
      const double c = plan.memory_cap[size_t(d)];
      if (c > 0 && (cap <= 0 || c < cap)) cap = c;
    }
    const auto bytes = [](double b) { return schedule::format_bytes(b); };
    appendf(out, 
        "  %s (stage %d): %s = params %s + grads %s + optimizer %s + in flight %s + activations "
        "%s (%s)%s of %s%s\n",
        device_list(st.devices).c_str(), s, bytes(m.total()).c_str(),
        bytes(z.parameters).c_str(), bytes(z.gradients).c_str(), bytes(z.optimizer).c_str(),
        bytes(z.in_flight).c_str(), bytes(m.activation_bytes).c_str(),
        schedule::zero_description(plan.zero_stage, plan.dp).c_str(),
        st.devices.size() > 1 ? " each" : "", cap > 0 ? bytes(cap).c_str() : "unlimited",
        cap > 0 && m.total() > cap ? "  DOES NOT FIT" : "");
  }
}

}  // namespace

std::string schedule_title(const schedule::Plan& plan) {
  switch (plan.schedule) {
    case schedule::PipelineSchedule::gpipe: return "GPipe";
    case schedule::PipelineSchedule::one_f_one_b: return "1F1B";
    case schedule::PipelineSchedule::interleaved:
      return "interleaved 1F1B, " + std::to_string(plan.num_chunks) + " chunk" +
             (plan.num_chunks == 1 ? "" : "s") + " per stage";
  }
  return "?";
}

void check_train_schedule(const schedule::PlanRequest& r, const config::Config& cfg,
                    const std::string& file) {
  const bool interleaved = r.schedule == schedule::PipelineSchedule::interleaved;
  LIBAI_CHECK(r.num_chunks == 1 || interleaved, file, ": train.dist.virtual_pipeline_size is ",
              r.num_chunks, " but train.dist.pipeline_schedule is ", schedule_name(r.schedule),
              ": several model chunks per stage need the interleaved schedule");
  if (!interleaved || r.num_chunks == 1) return;
  LIBAI_CHECK(r.num_micro_batches % r.pp == 0, file, ": train.num_accumulation_steps is ",
              r.num_micro_batches, ", not a multiple of train.dist.pipeline_parallel_size ", r.pp,
              ": the interleaved schedule runs micro-batches in groups of one per stage");
  LIBAI_CHECK(r.balance == schedule::Balance::uniform, file, ": train.dist.balance is ",
              cfg.has("train.dist.custom_pipeline_stage_id") &&
                      !cfg.node("train.dist.custom_pipeline_stage_id").is_null()
                  ? std::string("custom (train.dist.custom_pipeline_stage_id)")
                  : cfg.get_or<std::string>("train.dist.balance", "uniform"),
              " but the interleaved schedule splits layers uniformly over its ",
              r.pp * r.num_chunks, " virtual stages (other splits are not implemented yet)");
}

WhatIfPlan plan_what_if(const config::Config& cfg, const std::string& file, int width) {
  std::string out;
  config::check_implemented(cfg, config::Purpose::what_if_plan);
  const int pp = cfg.get<int>("train.dist.pipeline_parallel_size");
  const int dp = cfg.get_or<int>("train.dist.data_parallel_size", 1);
  const int tp = cfg.get_or<int>("train.dist.tensor_parallel_size", 1);
  const auto layers_opt =
      cfg.get_or<std::optional<int>>("train.dist.pipeline_num_layers", std::nullopt);
  LIBAI_CHECK(
      layers_opt.has_value(), file,
      ": train.dist.pipeline_num_layers is null; planning needs the layer count (set it, or "
      "model.weights for a generate or encode job)");
  const int layers = *layers_opt;
  const int devices = dp * pp * tp;
  const std::vector<double> speed =
      per_device("train.dist.device_speed",
                 cfg.get_or<std::vector<double>>("train.dist.device_speed",
                                                 std::vector<double>(size_t(pp), 1.0)),
                 dp, pp, tp, file);
  const std::vector<double> memory_gib =
      per_device("train.dist.device_memory",
                 cfg.get_or<std::vector<double>>("train.dist.device_memory",
                                                 std::vector<double>(size_t(pp), 0.0)),
                 dp, pp, tp, file);
  const double layer_gib = cfg.get_or<double>("train.dist.layer_memory", 0.0);
  const double activation_gib = cfg.get_or<double>("train.dist.activation_memory", 0.0);

  schedule::PlanRequest request;
  request.dp = dp;
  request.pp = pp;
  request.tp = tp;
  for (int d = 0; d < devices; ++d) {
    request.layer_time.push_back(std::vector<double>(size_t(layers), 1.0 / speed[size_t(d)]));
    request.memory_cap.push_back(memory_gib[size_t(d)] * kGiB);
  }
  request.weight_bytes.assign(size_t(layers), layer_gib * kGiB);
  const std::string target = cfg.get_or<std::string>("job._target_", "train");
  // Note [ZeRO memory model]: layer_memory is a layer's model state without ZeRO, 16 bytes a
  // parameter (unimplemented.cc refuses ZeRO for plans of inference).
  const int zero_stage = cfg.get_or<bool>("train.zero_optimization.enabled", false)
                             ? cfg.get_or<int>("train.zero_optimization.stage", 1)
                             : 0;
  if (zero_stage > 0 && layer_gib > 0) {
    request.zero_stage = zero_stage;
    request.layer_parameters.assign(size_t(layers), layer_gib * kGiB / 16);
    request.weight_bytes.assign(size_t(layers), 0.0);
  }
  std::string unit_name, item_name;
  if (target == "train") {
    request.workload = schedule::Workload::train;
    request.num_micro_batches = std::max(1, cfg.get_or<int>("train.num_accumulation_steps", 1));
    request.items_per_micro_batch = cfg.get_or<int>("train.train_micro_batch_size", 1);
    request.activation_bytes.assign(size_t(layers), activation_gib * kGiB);
    request.schedule =
        schedule::parse_schedule(cfg.get_or<std::string>("train.dist.pipeline_schedule", "1f1b"));
    request.num_chunks = cfg.get_or<int>("train.dist.virtual_pipeline_size", 1);
    check_train_schedule(request, cfg, file);
    unit_name = "micro-batch";
    item_name = "samples";
  } else if (target == "generate") {
    request.workload = schedule::Workload::decode;
    request.num_micro_batches = cfg.get_or<int>("job.num_groups", pp);
    request.num_steps = cfg.get_or<int>("job.max_new_tokens", 32);
    request.items_per_micro_batch = cfg.get_or<int>("job.group_size", 1);
    request.kv_cache_bytes.assign(size_t(layers), activation_gib * kGiB);
    unit_name = "step of a group";
    item_name = "tokens";
  } else {
    request.workload = schedule::Workload::inference;
    request.num_micro_batches = cfg.get_or<int>("job.num_micro_batches", pp);
    request.items_per_micro_batch = cfg.get_or<int>("job.micro_batch_size", 1);
    unit_name = "micro-batch";
    item_name = "sequences";
  }
  const std::string balance = cfg.get_or<std::string>("train.dist.balance", "uniform");
  if (auto custom = cfg.get_or<std::optional<std::vector<int64_t>>>(
          "train.dist.custom_pipeline_stage_id", std::nullopt)) {
    request.balance = schedule::Balance::custom;
    request.custom_stage_ids = *custom;
  } else if (balance == "measured") {
    request.balance = schedule::Balance::balanced;
  } else if (balance == "memory") {
    LIBAI_CHECK(
        cfg.has("train.dist.device_memory") && !cfg.node("train.dist.device_memory").is_null(),
        file, ": train.dist.balance is memory but train.dist.device_memory is null");
    request.balance = schedule::Balance::memory;
  }
  const schedule::Plan plan = schedule::compile_plan(request);
  const int m = request.num_micro_batches;
  const bool train = plan.workload == schedule::Workload::train;

  // The split.
  if (plan.workload == schedule::Workload::decode)
    appendf(out, "plan: %d layers, %d stages, %d groups x %d steps (decoding), balance %s\n", layers,
                pp, m, request.num_steps, balance.c_str());
  else
    appendf(out, "plan: %d layers, %d stages, %d micro-batches (%s), balance %s\n", layers, pp, m,
                train ? schedule_title(plan).c_str() : "inference", balance.c_str());
  if (dp > 1 || tp > 1)
    appendf(out, "  %d devices: %d data-parallel replicas x %d stages x %d tensor-parallel ranks\n",
                devices, dp, pp, tp);
  for (int s = 0; s < int(plan.stages.size()); ++s) {
    const schedule::StagePlan& st = plan.stages[size_t(s)];
    double slowest = speed[size_t(st.devices[0])];
    for (int d : st.devices) slowest = std::min(slowest, speed[size_t(d)]);
    const std::string name =
        plan.num_chunks > 1 ? "stage " + std::to_string(s % pp) + " chunk " + std::to_string(s / pp)
                            : "stage " + std::to_string(s);
    appendf(out, 
        "  %s: layers %d-%d (%d), %s (speed %.2f), %.2f units per %s, %d input "
        "slot%s\n",
        name.c_str(), st.first_layer, st.last_layer, st.num_layers(),
        device_list(st.devices).c_str(), slowest,
        plan.workload == schedule::Workload::decode ? st.decode_time : st.forward_time,
        unit_name.c_str(), st.input_slots, st.input_slots == 1 ? "" : "s");
  }

  // Memory.
  if (train) print_stash(out, plan);
  if (zero_stage > 0 && layer_gib > 0) {
    print_zero_memory(out, plan, layer_gib);
  } else if (layer_gib > 0 || activation_gib > 0) {
    appendf(out, "\nmemory per device (weights + %s):\n",
                plan.workload == schedule::Workload::decode ? "kv cache"
                : train ? "the activations the schedule stashes at its peak"
                        : "activations");
    for (int s = 0; s < pp; ++s) {
      const schedule::StagePlan& st = plan.stages[size_t(s)];
      const schedule::RankMemory& memory = plan.rank_memory[size_t(s)];
      double cap = 0;  // the tightest of its devices
      for (int d : st.devices) {
        const double c = plan.memory_cap[size_t(d)];
        if (c > 0 && (cap <= 0 || c < cap)) cap = c;
      }
      appendf(out, "  %s (stage %d): %s (%s + %s)%s of %s%s\n", device_list(st.devices).c_str(), s,
                  schedule::format_bytes(memory.total()).c_str(),
                  schedule::format_bytes(memory.weight_bytes).c_str(),
                  schedule::format_bytes(memory.kv_cache_bytes + memory.activation_bytes).c_str(),
                  st.devices.size() > 1 ? " each" : "",
                  cap > 0 ? schedule::format_bytes(cap).c_str() : "unlimited",
                  cap > 0 && memory.total() > cap ? "  DOES NOT FIT" : "");
    }
  } else {
    appendf(out, 
        "\nmemory per device: not modelled (set train.dist.layer_memory and "
        "train.dist.activation_memory, in GiB)\n");
  }
  if (zero_stage > 0 && layer_gib <= 0)
    appendf(out, "ZeRO-%d: no model state to shard (train.dist.layer_memory is not set)\n",
                zero_stage);

  // The timeline.
  const char* legend =
      train
          ? (plan.num_chunks > 1 ? "digits: forward of micro-batch k, letters: backward, any chunk"
                                 : "digits: forward of micro-batch k, letters: backward")
      : plan.workload == schedule::Workload::decode ? "digits: group k, any step"
                                                    : "digits: forward of micro-batch k";
  appendf(out, "\npredicted timeline of one step (%s):\n%s", legend,
              schedule::render_timeline(plan.timeline, pp, width).c_str());
  double work_per_replica = double(layers) * m;
  if (plan.workload == schedule::Workload::train) work_per_replica *= 1 + request.backward_factor;
  if (plan.workload == schedule::Workload::decode) work_per_replica *= request.num_steps;
  double total_speed = 0;
  for (double v : speed) total_speed += v;
  const double ideal = work_per_replica * dp / total_speed;
  const double step = plan.timeline.step_time;
  appendf(out, "\nstep time %.2f units (ideal %.2f: %.0f%% of the devices' combined speed)\n", step,
              ideal, step > 0 ? 100.0 * ideal / step : 0.0);
  appendf(out, "throughput %.3f %s per unit (%g per step), mean utilisation %.0f%%\n",
              plan.throughput, item_name.c_str(), plan.items_per_step, 100.0 * plan.utilisation);
  if (train) print_bubble(out, plan, m);

  return {plan, out};
}

}  // namespace libai::plan
