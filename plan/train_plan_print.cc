// Printing a model training plan (plan/train_plan.h): text and JSON.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>

#include "plan/run_plan.h"
#include "plan/train_plan.h"
#include "runtime/error.h"

namespace libai::plan {

namespace {

std::string stage_name(const schedule::Plan& plan, int s) {
  return plan.num_chunks > 1 ? str_cat("stage ", s % plan.pp, " chunk ", s / plan.pp)
                             : str_cat("stage ", s);
}

// "ZeRO-2 over dp 4", and what ZeRO over one replica means.
std::string zero_note(const schedule::Plan& plan) {
  std::string out = schedule::zero_description(plan.zero_stage, plan.dp);
  if (plan.zero_stage > 0 && plan.dp == 1)
    out += ": one data-parallel rank holds every shard, so ZeRO saves nothing";
  return out;
}

// What the "in flight" term of Note [ZeRO memory model] holds at the plan's stage.
std::string in_flight_note(const schedule::Plan& plan) {
  switch (plan.zero_stage) {
    case 0:
      return plan.dp > 1 ? "; in flight: the data-parallel all-reduce buckets, a copy of the "
                           "gradients"
                         : "";
    case 1: return "; in flight: the staging of one unit's reduce-scatter";
    case 2:
      return "; in flight: the rest's whole gradients beside a layer's whole gradients and "
             "staging";
    default:
      return "; in flight: the rest's and a layer's gathered params beside their whole "
             "gradients and staging";
  }
}

// The step without a bubble: m x the busiest pipeline rank's forward + backward (its chunks'
// summed), what the schedule would take if the others never waited.
double busiest_rank_step(const schedule::Plan& plan, int m) {
  std::vector<double> rank(size_t(plan.pp), 0.0);
  for (size_t s = 0; s < plan.costs.forward.size(); ++s)
    rank[s % size_t(plan.pp)] += plan.costs.forward[s] + plan.costs.backward[s];
  return m * *std::max_element(rank.begin(), rank.end());
}

}  // namespace

void print_train_plan(std::ostream& out, const ModelTrainShape& shape, const schedule::Plan& plan,
                      const std::vector<DeviceProfile>& devices, int width) {
  bool measured = false;
  const double factor = train_backward_factor(shape, devices, &measured);
  char line[256];
  std::snprintf(line, sizeof line, "%.2fx forward (%s)", factor,
                measured ? "measured on a layer" : "convention");
  out << "training plan: " << plan.num_layers << " layers of " << shape.model.model_type() << " ("
      << shape.model_name << "), " << plan.pp << " stages, " << shape.micro_batches
      << " micro-batches of " << shape.micro_batch_size << " x " << shape.seq_length << " tokens"
      << (shape.dp > 1 ? " per replica" : "") << " (" << schedule::schedule_name(plan.schedule)
      << (plan.num_chunks > 1 ? str_cat(" over ", plan.num_chunks, " chunks per stage") : "")
      << (shape.activation_checkpoint ? ", activation checkpointing" : "") << ", backward " << line
      << "), balance " << (shape.custom_stage_ids ? "custom" : shape.balance) << "\n";
  const int count = plan.dp * plan.pp * plan.tp;
  out << "  " << count << " device(s) on " << count / shape.devices_per_node << " node(s) x "
      << shape.devices_per_node << ": data " << plan.dp << " x pipeline " << plan.pp << " x tensor "
      << plan.tp << "\n";
  for (size_t d = 0; d < devices.size() && d < 16; ++d) {
    const DeviceProfile& p = devices[d];
    std::snprintf(line, sizeof line, "%.3g GFLOP/s, %.3g GB/s", p.matmul_gflops,
                  p.memory_bandwidth_gbs);
    out << "  " << p.name << ": " << line;
    if (p.layer_seconds > 0)
      out << ", a layer " << format_seconds(p.layer_seconds) << " forward + "
          << format_seconds(p.layer_step_seconds) << " backward";
    out << "\n";
  }
  for (int s = 0; s < int(plan.stages.size()); ++s) {
    const schedule::StagePlan& st = plan.stages[size_t(s)];
    const double slowdown = shape.slowdown[size_t(st.devices[0])];
    out << "  " << stage_name(plan, s) << ": layers " << st.first_layer << "-" << st.last_layer
        << " (" << st.num_layers() << "), " << device_names(st.devices, devices);
    if (slowdown != 1) out << " (slow-down " << slowdown << ")";
    out << ", " << format_seconds(plan.costs.forward[size_t(s)]) << " forward + "
        << format_seconds(plan.costs.backward[size_t(s)]) << " backward per micro-batch\n";
  }

  // Note [ZeRO memory model] in schedule/zero_memory.h: the model state's terms per rank.
  const std::vector<int> stash = schedule::peak_stashed_activations(plan.program);
  out << "\nmemory per rank (f32 params, grads and AdamW optimizer state, " << zero_note(plan)
      << in_flight_note(plan) << "; the activations the schedule stashes at its peak):\n";
  for (int k = 0; k < plan.pp; ++k) {
    const schedule::StagePlan& st = plan.stages[size_t(k)];
    const schedule::RankMemory& m = plan.rank_memory[size_t(k)];
    const schedule::ZeroMemory& z = m.model_state;
    const double cap = stage_cap(plan, st);
    out << "  " << device_names(st.devices, devices) << " (stage " << k
        << "): " << schedule::format_bytes(m.total()) << " = params "
        << schedule::format_bytes(z.parameters + m.weight_bytes) << " + grads "
        << schedule::format_bytes(z.gradients) << " + optimizer "
        << schedule::format_bytes(z.optimizer) << " + in flight "
        << schedule::format_bytes(z.in_flight) << " + activations "
        << schedule::format_bytes(m.activation_bytes) << " for " << stash[size_t(k)]
        << (plan.num_chunks > 1 ? " micro-batch chunk" : " micro-batch")
        << (stash[size_t(k)] == 1 ? ""
            : plan.num_chunks > 1 ? "s"
                                  : "es")
        << " (" << schedule::zero_description(plan.zero_stage, plan.dp) << ")"
        << (st.devices.size() > 1 ? " each" : "") << " of "
        << (cap > 0 ? schedule::format_bytes(cap) : std::string("unlimited"))
        << (cap > 0 && m.total() > cap ? "  DOES NOT FIT" : "") << "\n";
  }

  out << "\npredicted timeline of one step (digits: forward of micro-batch k, letters: backward"
      << (plan.num_chunks > 1 ? ", any chunk" : "") << "):\n"
      << schedule::render_timeline(plan.timeline, plan.pp, width);
  const double step = plan.timeline.step_time;
  const double busiest = busiest_rank_step(plan, shape.micro_batches);
  std::snprintf(line, sizeof line, "%.4g samples per second (%g per step)", plan.throughput,
                plan.items_per_step);
  out << "\npredicted step time " << format_seconds(step) << ": " << line << ", mean utilisation "
      << std::lround(100.0 * plan.utilisation) << "%\n";
  out << "the busiest stage's work alone (m x its forward + backward): " << format_seconds(busiest)
      << "\n";
  const int p = plan.pp, v = plan.num_chunks, m = shape.micro_batches;
  std::snprintf(line, sizeof line,
                "bubble %.1f%% of the step (ideal (p-1)/(%sm+p-1) = %d/%d = %.1f%%)\n",
                100.0 * schedule::measured_bubble_fraction(plan.timeline), v > 1 ? "v " : "", p - 1,
                v * m + p - 1, 100.0 * schedule::ideal_bubble_fraction(p, m, v));
  out << line;
}

nlohmann::json train_plan_json(const ModelTrainShape& shape, const schedule::Plan& plan,
                               const std::vector<DeviceProfile>& devices) {
  bool measured = false;
  const double factor = train_backward_factor(shape, devices, &measured);
  nlohmann::json stages = nlohmann::json::array();
  for (int s = 0; s < int(plan.stages.size()); ++s) {
    const schedule::StagePlan& st = plan.stages[size_t(s)];
    nlohmann::json names = nlohmann::json::array();
    for (int d : st.devices) names.push_back(devices[size_t(d)].name);
    stages.push_back({{"stage", s % plan.pp},
                      {"chunk", s / plan.pp},
                      {"first_layer", st.first_layer},
                      {"last_layer", st.last_layer},
                      {"layers", st.num_layers()},
                      {"slot", st.slot},
                      {"devices", names},
                      {"forward_seconds", plan.costs.forward[size_t(s)]},
                      {"backward_seconds", plan.costs.backward[size_t(s)]}});
  }
  const std::vector<int> stash = schedule::peak_stashed_activations(plan.program);
  nlohmann::json memory = nlohmann::json::array();
  for (int k = 0; k < plan.pp; ++k) {
    const schedule::RankMemory& m = plan.rank_memory[size_t(k)];
    nlohmann::json names = nlohmann::json::array();
    for (int d : plan.stages[size_t(k)].devices) names.push_back(devices[size_t(d)].name);
    const double cap = stage_cap(plan, plan.stages[size_t(k)]);
    memory.push_back({{"stage", k},
                      {"devices", names},
                      {"parameters", m.parameters},
                      {"largest_unit", m.largest_unit},
                      {"largest_layer", m.largest_layer},
                      {"rest_unit", m.rest_unit},
                      {"weight_bytes", m.weight_bytes + m.model_state.parameters},
                      {"gradient_bytes", m.model_state.gradients},
                      {"optimizer_bytes", m.model_state.optimizer},
                      {"in_flight_bytes", m.model_state.in_flight},
                      {"activation_bytes", m.activation_bytes},
                      {"stashed_micro_batches", stash[size_t(k)]},
                      {"total_bytes", m.total()},
                      {"cap_bytes", cap},
                      {"fits", cap <= 0 || m.total() <= cap}});
  }
  nlohmann::json device_list = nlohmann::json::array();
  for (size_t d = 0; d < devices.size(); ++d)
    device_list.push_back({{"name", devices[d].name},
                           {"slowdown", shape.slowdown[d]},
                           {"matmul_gflops", devices[d].matmul_gflops},
                           {"memory_bandwidth_gbs", devices[d].memory_bandwidth_gbs},
                           {"layer_forward_seconds", devices[d].layer_seconds},
                           {"layer_backward_seconds", devices[d].layer_step_seconds}});
  const int p = plan.pp, v = plan.num_chunks, m = shape.micro_batches;
  return {{"workload", "train"},
          {"model_type", shape.model.model_type()},
          {"model", shape.model_name},
          {"num_layers", plan.num_layers},
          {"dp", plan.dp},
          {"pp", plan.pp},
          {"tp", plan.tp},
          {"schedule", schedule::schedule_name(plan.schedule)},
          {"chunks", plan.num_chunks},
          {"micro_batches", m},
          {"micro_batch_size", shape.micro_batch_size},
          {"seq_length", shape.seq_length},
          {"activation_checkpoint", shape.activation_checkpoint},
          {"zero_stage", plan.zero_stage},
          {"balance", shape.custom_stage_ids ? "custom" : shape.balance},
          {"backward_factor", factor},
          {"backward_factor_measured", measured},
          {"stage_of", plan.stage_of},
          {"devices", device_list},
          {"stages", stages},
          {"memory", memory},
          {"step_seconds", plan.timeline.step_time},
          {"busiest_stage_seconds", busiest_rank_step(plan, m)},
          {"samples_per_second", plan.throughput},
          {"utilisation", plan.utilisation},
          {"bubble", schedule::measured_bubble_fraction(plan.timeline)},
          {"ideal_bubble", schedule::ideal_bubble_fraction(p, m, v)}};
}

}  // namespace libai::plan
