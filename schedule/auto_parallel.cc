#include "schedule/auto_parallel.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <cstdio>
#include <numeric>

#include "runtime/error.h"

namespace libai::schedule {

std::string describe(const ParallelChoice& c) {
  std::string s = "dp " + std::to_string(c.dp) + " x tp " + std::to_string(c.tp) + " x pp " +
                  std::to_string(c.pp) + ", " + std::to_string(c.accumulation) + " micro-batch" +
                  (c.accumulation == 1 ? "" : "es") + " of " + std::to_string(c.micro_batch_size);
  if (c.pp > 1) {
    s += std::string(", ") + schedule_name(c.schedule);
    if (c.schedule == PipelineSchedule::interleaved) s += " v" + std::to_string(c.chunks);
    if (c.balanced) s += ", measured split";
  }
  if (c.zero_stage > 0) s += ", ZeRO-" + std::to_string(c.zero_stage);
  if (c.activation_checkpoint) s += ", checkpointing";
  return s;
}

namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

// Counts of the choices left out, by reason, printed in the order first seen.
class Exclusions {
 public:
  void add(const std::string& reason, int64_t count = 1) {
    if (!counts_.contains(reason)) order_.push_back(reason);
    counts_[reason] += count;
  }
  std::vector<std::string> lines() const {
    std::vector<std::string> out;
    for (const auto& reason : order_) out.push_back(std::to_string(counts_.at(reason)) + " " + reason);
    return out;
  }

 private:
  std::map<std::string, int64_t> counts_;
  std::vector<std::string> order_;
};

template <typename T>
bool allowed(const std::optional<T>& fixed, const T& value) {
  return !fixed || *fixed == value;
}

}  // namespace

std::vector<ParallelChoice> enumerate_choices(const SearchSpace& space,
                                              std::vector<std::string>* excluded) {
  LIBAI_CHECK(space.devices >= 1 && space.devices_per_node >= 1 && space.num_layers >= 1 &&
                  space.global_batch >= 1,
              "auto parallel: the search needs devices (", space.devices, "), devices per node (",
              space.devices_per_node, "), layers (", space.num_layers, ") and a global batch (",
              space.global_batch, ") of at least 1");
  const ParallelConstraints& fixed = space.constraints;
  Exclusions out;
  std::vector<ParallelChoice> choices;
  for (int64_t dp : divisors(space.devices)) {
    if (!allowed(fixed.dp, int(dp))) continue;
    if (space.global_batch % dp != 0) {
      out.add("layouts with dp not dividing the global batch of " + std::to_string(space.global_batch));
      continue;
    }
    const int64_t replica_batch = space.global_batch / dp;
    for (int64_t tp : divisors(space.devices / dp)) {
      if (!allowed(fixed.tp, int(tp))) continue;
      const int64_t pp = space.devices / dp / tp;
      if (!allowed(fixed.pp, int(pp))) continue;
      if (space.devices_per_node % tp != 0) {
        out.add("layouts with tp not dividing a node's " + std::to_string(space.devices_per_node) +
                " devices (tensor parallelism stays inside a node)");
        continue;
      }
      if (space.heads > 0 && space.heads % tp != 0) {
        out.add("layouts with tp not dividing the model's " + std::to_string(space.heads) + " heads");
        continue;
      }
      if (pp > space.num_layers) {
        out.add("layouts with more pipeline stages than the model's " +
                std::to_string(space.num_layers) + " layers");
        continue;
      }
      for (int64_t mbs : divisors(replica_batch)) {
        if (!allowed(fixed.micro_batch_size, mbs)) continue;
        if (space.max_micro_batch_size > 0 && mbs > space.max_micro_batch_size) continue;
        const int accumulation = int(replica_batch / mbs);
        // Schedules: one pipeline stage has no schedule to choose (its plan is 1F1B's, which
        // on one stage is forward then backward per micro-batch).
        std::vector<std::pair<PipelineSchedule, int>> schedules;
        if (pp == 1) {
          if (!fixed.schedule || *fixed.schedule != PipelineSchedule::interleaved)
            schedules.emplace_back(PipelineSchedule::one_f_one_b, 1);
        } else {
          for (PipelineSchedule s : space.schedules) {
            if (!allowed(fixed.schedule, s)) continue;
            if (s != PipelineSchedule::interleaved) {
              schedules.emplace_back(s, 1);
              continue;
            }
            for (int v : fixed.chunks ? std::vector<int>{*fixed.chunks} : space.interleave_chunks) {
              if (v < 2) continue;
              if (pp * v > space.num_layers) {
                out.add("interleaved layouts with more virtual stages than layers");
                continue;
              }
              if (accumulation % pp != 0) {
                out.add("interleaved layouts whose micro-batches are not a multiple of pp");
                continue;
              }
              schedules.emplace_back(s, v);
            }
          }
        }
        // One stage has no split to choose.
        std::vector<bool> balances;
        for (bool balanced : pp == 1 ? std::vector<bool>{false} : space.balances)
          if (pp == 1 || allowed(fixed.balanced, balanced)) balances.push_back(balanced);
        for (const auto& [schedule, chunks] : schedules)
          for (bool balanced : balances) {
            if (balanced && schedule == PipelineSchedule::interleaved) {
              out.add("interleaved layouts with a measured split (the planner splits virtual "
                      "stages evenly)");
              continue;
            }
            for (bool checkpoint : space.checkpointing) {
              if (!allowed(fixed.activation_checkpoint, checkpoint)) continue;
              for (int zero : space.zero_stages) {
                if (!allowed(fixed.zero_stage, zero)) continue;
                if (zero > 0 && dp == 1) {
                  out.add("layouts with ZeRO and one replica (nothing to shard)");
                  continue;
                }
                choices.push_back({.dp = int(dp),
                                   .tp = int(tp),
                                   .pp = int(pp),
                                   .micro_batch_size = mbs,
                                   .accumulation = accumulation,
                                   .zero_stage = zero,
                                   .activation_checkpoint = checkpoint,
                                   .schedule = schedule,
                                   .chunks = chunks,
                                   .balanced = balanced});
              }
            }
          }
      }
    }
  }
  if (excluded) *excluded = out.lines();
  return choices;
}

SearchResult search_parallel(const SearchSpace& space, const EstimateFn& estimate) {
  SearchResult result;
  const std::vector<ParallelChoice> choices = enumerate_choices(space, &result.excluded);
  if (choices.empty()) {
    std::string why;
    for (const auto& line : result.excluded) why += "; " + line;
    LIBAI_CHECK(false, "auto parallel: no layout of ", space.devices, " devices divides (",
                space.devices_per_node, " a node, ", space.num_layers, " layers, global batch ",
                space.global_batch, ") under the fixed keys", why);
  }
  std::vector<size_t> order;
  for (const ParallelChoice& choice : choices) {
    ++result.evaluated;
    ParallelEstimate e;
    try {
      e = estimate(choice);
    } catch (const Error& error) {
      result.rejected.push_back({choice, error.what(), {}});
      continue;
    }
    if (!e.fits()) {
      char text[160];
      std::snprintf(text, sizeof text, "needs %.3g GB on a device of %.3g GB", e.memory_bytes / 1e9,
                    e.memory_cap / 1e9);
      result.rejected.push_back({choice, text, e});
      continue;
    }
    result.ranked.push_back({choice, e});
  }
  std::stable_sort(result.ranked.begin(), result.ranked.end(),
                   [](const RankedChoice& a, const RankedChoice& b) {
                     if (a.estimate.step_seconds != b.estimate.step_seconds)
                       return a.estimate.step_seconds < b.estimate.step_seconds;
                     // Equal predictions: the simpler layout (less sharding, no recomputation).
                     if (a.choice.zero_stage != b.choice.zero_stage)
                       return a.choice.zero_stage < b.choice.zero_stage;
                     if (a.choice.activation_checkpoint != b.choice.activation_checkpoint)
                       return !a.choice.activation_checkpoint;
                     if (a.choice.balanced != b.choice.balanced) return !a.choice.balanced;
                     // Per-micro-batch overheads the cost model does not see favour the larger.
                     if (a.choice.micro_batch_size != b.choice.micro_batch_size)
                       return a.choice.micro_batch_size > b.choice.micro_batch_size;
                     return a.estimate.memory_bytes < b.estimate.memory_bytes;
                   });
  return result;
}

// ---------------------------------------------------------------------------------------------

double LinkModel::seconds(double bytes) const {
  return latency_seconds + (bandwidth_gbs > 0 ? bytes / (bandwidth_gbs * 1e9) : 0.0);
}

double all_reduce_seconds(double bytes, int ranks, const LinkModel& link) {
  if (ranks <= 1) return 0;
  const double share = 2.0 * (ranks - 1) / ranks;
  return 2.0 * (ranks - 1) * link.latency_seconds +
         (link.bandwidth_gbs > 0 ? share * bytes / (link.bandwidth_gbs * 1e9) : 0.0);
}

namespace {

void check_model(const TrainCostModel& m, const ParallelChoice& c) {
  const size_t layers = m.layer_flops.size();
  LIBAI_CHECK(layers >= 1 && m.layer_parameters.size() == layers &&
                  m.layer_activation_bytes.size() == layers && m.layer_output_bytes.size() == layers,
              "training cost model: every per-layer list needs one entry per layer (",
              layers, " flops, ", m.layer_parameters.size(), " parameters, ",
              m.layer_activation_bytes.size(), " activation bytes, ", m.layer_output_bytes.size(),
              " output bytes)");
  LIBAI_CHECK(int(m.devices.size()) == c.devices(), "training cost model: ", m.devices.size(),
              " devices, but ", describe(c), " needs ", c.devices());
  LIBAI_CHECK(int64_t(c.dp) * c.micro_batch_size * c.accumulation == m.global_batch,
              "training cost model: ", describe(c), " does not make the global batch of ",
              m.global_batch);
  for (const auto& d : m.devices)
    LIBAI_CHECK(d.gflops > 0 && d.gbs > 0, "training cost model: a device with ", d.gflops,
                " GFLOP/s and ", d.gbs, " GB/s (both must be > 0)");
}

// Whether `count` consecutive devices of the mesh span more than one node.
bool spans_nodes(int count, int devices_per_node) { return count > devices_per_node; }

// When the last data-parallel bucket of the step is reduced, without ZeRO: on each pipeline
// rank, each chunk's buckets start as its last backward starts and reduce one after another
// on the rank's link; the last bucket (at most kBucketBytes of the chunk's gradients) cannot
// start before that backward ends.
constexpr double kBucketBytes = 25 << 20;  // models/parallel/data_parallel.h's default
double overlapped_gradients_end(const Plan& plan, int dp, const LinkModel& link) {
  const int pp = plan.pp, chunks = std::max(1, plan.num_chunks);
  std::vector<double> last_start(size_t(pp * chunks), -1), last_end(size_t(pp * chunks), 0);
  for (const TimelineEvent& event : plan.timeline.events) {
    if (event.action.kind != ActionKind::backward) continue;
    const size_t k = size_t(event.action.chunk * pp + event.stage);
    if (k < last_start.size() && event.start >= last_start[k]) {
      last_start[k] = event.start;
      last_end[k] = event.end;
    }
  }
  double end = 0;
  for (int rank = 0; rank < pp; ++rank) {
    std::vector<int> order;  // the rank's chunks by their last backward
    for (int chunk = 0; chunk < chunks; ++chunk) order.push_back(chunk * pp + rank);
    std::sort(order.begin(), order.end(),
              [&](int a, int b) { return last_start[size_t(a)] < last_start[size_t(b)]; });
    double stream = 0;
    for (int s : order) {
      if (s >= int(plan.stages.size()) || last_start[size_t(s)] < 0) continue;
      const double bytes = 4.0 * plan.stages[size_t(s)].parameters;
      const double seconds = all_reduce_seconds(bytes, dp, link);
      const double last_bucket = seconds * std::min(1.0, kBucketBytes / std::max(bytes, 1.0));
      stream = std::max({stream + seconds, last_start[size_t(s)] + seconds,
                         last_end[size_t(s)] + last_bucket});
    }
    end = std::max(end, stream);
  }
  return end;
}

// Layer l's tensor-parallel all-reduces of one micro-batch's forward (0 without tp).
double layer_collectives(const TrainCostModel& m, const ParallelChoice& c, size_t l) {
  if (c.tp <= 1) return 0;
  return m.tensor_collectives *
         all_reduce_seconds(double(c.micro_batch_size) * m.layer_output_bytes[l], c.tp, m.intra_node);
}

}  // namespace

PlanRequest training_request(const TrainCostModel& m, const ParallelChoice& c) {
  check_model(m, c);
  const double mbs = double(c.micro_batch_size);
  PlanRequest r;
  r.dp = c.dp;
  r.pp = c.pp;
  r.tp = c.tp;
  r.workload = Workload::train;
  r.schedule = c.pp == 1 ? PipelineSchedule::one_f_one_b : c.schedule;
  r.num_chunks = r.schedule == PipelineSchedule::interleaved ? c.chunks : 1;
  r.num_micro_batches = c.accumulation;
  r.items_per_micro_batch = mbs;
  r.backward_factor = m.backward_factor + (c.activation_checkpoint ? 1.0 : 0.0);
  r.zero_stage = c.zero_stage;
  r.balance = c.balanced && c.pp > 1 ? Balance::balanced : Balance::uniform;
  // A hop between stages: inside a node while the whole pipeline of a replica is.
  const LinkModel& hop = spans_nodes(c.pp * c.tp, m.devices_per_node) ? m.inter_node : m.intra_node;
  const double hidden_bytes = mbs * m.layer_output_bytes.front();
  r.transfer_time = c.pp > 1 ? hop.seconds(hidden_bytes) : 0.0;
  for (size_t l = 0; l < m.layer_flops.size(); ++l) {
    r.weight_bytes.push_back(0.0);  // the model state is all a layer holds
    r.layer_parameters.push_back(m.layer_parameters[l]);
    r.activation_bytes.push_back(
        mbs * (c.activation_checkpoint ? m.layer_output_bytes[l] : m.layer_activation_bytes[l]));
  }
  r.embedding.parameters = m.embedding_parameters;
  r.head.parameters = m.head_parameters;
  // compile_plan divides a stage's time by tp: the collectives and the fixed overhead, which do
  // not shrink with tp, are given tp times over (Note [Training cost model]).
  for (const DeviceRates& d : m.devices) {
    std::vector<double> times;
    for (size_t l = 0; l < m.layer_flops.size(); ++l)
      times.push_back(layer_time_from_profile(mbs * m.layer_flops[l],
                                              m.bytes_per_parameter * m.layer_parameters[l],
                                              d.gflops, d.gbs) +
                      c.tp * (layer_collectives(m, c, l) + d.overhead_seconds));
    r.layer_time.push_back(std::move(times));
    r.memory_cap.push_back(d.memory_bytes);
    r.embedding.time.push_back(
        layer_time_from_profile(mbs * m.embedding_flops, mbs * m.embedding_bytes, d.gflops, d.gbs));
    r.head.time.push_back(layer_time_from_profile(
        mbs * m.head_flops, m.bytes_per_parameter * m.head_parameters, d.gflops, d.gbs));
  }
  return r;
}

namespace {

bool all_alike(const std::vector<DeviceRates>& devices) {
  for (const DeviceRates& d : devices)
    if (d.gflops != devices.front().gflops || d.gbs != devices.front().gbs ||
        d.memory_bytes != devices.front().memory_bytes ||
        d.overhead_seconds != devices.front().overhead_seconds)
      return false;
  return true;
}

}  // namespace

namespace {

ParallelEstimate estimate(const TrainCostModel& m, const ParallelChoice& c, Plan* out,
                          EstimateCache* cache) {
  // Note [One replica stands for all]: every replica runs the same stages (the balanced split
  // is one for all replicas too, each stage as slow as its slowest replica's device); on
  // devices that are all alike they run them equally fast, so one replica's plan
  // (dp 1) has the step of all of them; its model state is ZeRO's over the real dp
  // (PlanRequest::zero_replicas), so a measured split weighs memory as the whole plan's does.
  // The data-parallel terms below use the real choice. Only
  // for the search (no plan asked for): a plan to print is compiled whole.
  const bool one_replica = out == nullptr && c.dp > 1 && all_alike(m.devices);
  PlanRequest request;
  if (one_replica) {
    check_model(m, c);
    TrainCostModel replica = m;
    replica.devices.resize(size_t(c.pp * c.tp));
    replica.global_batch = m.global_batch / c.dp;
    ParallelChoice alone = c;
    alone.dp = 1;
    request = training_request(replica, alone);
    request.zero_stage = c.zero_stage;
    request.zero_replicas = c.dp;  // ZeRO's shards over the real replicas
  } else {
    request = training_request(m, c);
  }
  // With a cache, the plan is compiled without its simulation, which is reused when only the
  // ZeRO stage changed and the plan came out the same otherwise.
  request.simulate = cache == nullptr;
  Plan plan = compile_plan(request);
  if (cache) {
    ParallelChoice key = c;
    key.zero_stage = 0;
    std::vector<int> slots;
    for (const StagePlan& s : plan.stages) slots.push_back(s.slot);
    if (cache->valid && cache->key == key && cache->stage_of == plan.stage_of &&
        cache->slots == slots && cache->quota == plan.quota) {
      plan.timeline = cache->timeline;
    } else {
      plan.timeline = simulate(plan.program, plan.costs, plan.quota);
      *cache = {key, plan.stage_of, std::move(slots), plan.quota, plan.timeline, true};
    }
  }
  ParallelEstimate e;
  e.pipeline_seconds = plan.timeline.step_time;
  e.bubble_fraction = measured_bubble_fraction(plan.timeline);
  // The tensor-parallel collectives' share of the step: per layer, forward and backward, each
  // micro-batch, on the busiest pipeline rank's layers.
  if (c.tp > 1) {
    double per_layer = 0;
    for (size_t l = 0; l < m.layer_output_bytes.size(); ++l)
      per_layer = std::max(per_layer, layer_collectives(m, c, l));
    int most_layers = 0;
    for (const StagePlan& s : plan.stages) most_layers = std::max(most_layers, s.num_layers());
    e.tensor_comm_seconds = per_layer * (1 + request.backward_factor) * most_layers * c.accumulation;
  }
  // Data parallelism (Note [Training cost model]): without ZeRO, each chunk's buckets reduce
  // during its last backward; with ZeRO, the fullest rank's gradients after the pipeline.
  if (c.dp > 1) {
    const LinkModel& link = spans_nodes(c.devices(), m.devices_per_node) ? m.inter_node : m.intra_node;
    if (c.zero_stage > 0) {
      double params = 0;
      for (const RankMemory& rank : plan.rank_memory) params = std::max(params, rank.parameters);
      const double bytes = 4.0 * params * (c.zero_stage == 3 ? 1.5 : 1.0);
      e.data_comm_seconds = all_reduce_seconds(bytes, c.dp, link);
    } else {
      e.data_comm_seconds =
          std::max(0.0, overlapped_gradients_end(plan, c.dp, link) - plan.timeline.step_time);
    }
  }
  e.step_seconds = e.pipeline_seconds + e.data_comm_seconds;
  e.samples_per_second = e.step_seconds > 0 ? double(m.global_batch) / e.step_seconds : 0;
  // Memory: the pipeline rank that comes closest to (or goes furthest past) its devices'
  // capacity; without capacities, the fullest.
  double worst_ratio = -1;
  for (int k = 0; k < plan.pp && k < int(plan.rank_memory.size()); ++k) {
    const double need = plan.rank_memory[size_t(k)].total();
    for (int d : plan.stages[size_t(k)].devices) {
      const double cap = plan.memory_cap.empty() ? 0 : plan.memory_cap[size_t(d)];
      const double ratio = cap > 0 ? need / cap : 0;
      if (ratio > worst_ratio || (ratio == worst_ratio && need > e.memory_bytes)) {
        worst_ratio = ratio;
        e.memory_bytes = need;
        e.memory_cap = cap;
      }
    }
  }
  if (out) *out = std::move(plan);
  return e;
}

}  // namespace

ParallelEstimate estimate_training(const TrainCostModel& m, const ParallelChoice& c, Plan* out) {
  return estimate(m, c, out, nullptr);
}

ParallelEstimate estimate_training(const TrainCostModel& m, const ParallelChoice& c,
                                   EstimateCache& cache) {
  return estimate(m, c, nullptr, &cache);
}

}  // namespace libai::schedule
