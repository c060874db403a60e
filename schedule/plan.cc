#include "schedule/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>

#include "runtime/error.h"
#include "schedule/device_order.h"

namespace libai::schedule {

double layer_time_from_profile(double flops, double bytes, double gflops, double gbs) {
  LIBAI_CHECK(flops >= 0 && bytes >= 0, "layer_time_from_profile: flops (", flops, ") and bytes (",
              bytes, ") must be >= 0");
  LIBAI_CHECK(gflops > 0 && gbs > 0, "layer_time_from_profile: the device's rate (", gflops,
              " GFLOP/s) and bandwidth (", gbs, " GB/s) must be > 0");
  return std::max(flops / (gflops * 1e9), bytes / (gbs * 1e9));
}

const char* workload_name(Workload workload) {
  switch (workload) {
    case Workload::train: return "train";
    case Workload::inference: return "inference";
    case Workload::decode: return "decode";
  }
  return "?";
}

const char* schedule_name(PipelineSchedule schedule) {
  switch (schedule) {
    case PipelineSchedule::gpipe: return "gpipe";
    case PipelineSchedule::one_f_one_b: return "1f1b";
    case PipelineSchedule::interleaved: return "interleaved";
  }
  return "?";
}

PipelineSchedule parse_schedule(const std::string& name, const std::string& key) {
  for (PipelineSchedule s :
       {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b, PipelineSchedule::interleaved})
    if (name == schedule_name(s)) return s;
  LIBAI_THROW(InvalidArgument, key, " is '", name, "'; expected one of gpipe, 1f1b, interleaved");
}

const char* balance_name(Balance balance) {
  switch (balance) {
    case Balance::uniform: return "uniform";
    case Balance::custom: return "custom";
    case Balance::balanced: return "balanced";
    case Balance::memory: return "memory";
  }
  return "?";
}

namespace {

void check_finite_non_negative(const std::vector<double>& v, const std::string& name) {
  for (size_t i = 0; i < v.size(); ++i)
    LIBAI_CHECK(std::isfinite(v[i]) && v[i] >= 0, "plan: ", name, "[", i, "] is ", v[i],
                "; expected a finite number >= 0");
}

void check_request(const PlanRequest& r) {
  LIBAI_CHECK(r.dp >= 1 && r.pp >= 1 && r.tp >= 1, "plan: parallel sizes dp ", r.dp, ", pp ", r.pp,
              ", tp ", r.tp, " must all be at least 1");
  const int D = r.dp * r.pp * r.tp, L = int(r.weight_bytes.size());
  LIBAI_CHECK(int(r.layer_time.size()) == D, "plan: layer_time covers ", r.layer_time.size(),
              " devices but dp x pp x tp = ", r.dp, " x ", r.pp, " x ", r.tp, " = ", D);
  LIBAI_CHECK(L >= 1, "plan: weight_bytes is empty: the model needs at least one layer");
  LIBAI_CHECK(r.pp <= L, "plan: pipeline_parallel_size ", r.pp, " exceeds the ", L,
              " layers: every stage needs at least one layer");
  for (int d = 0; d < D; ++d) {
    LIBAI_CHECK(int(r.layer_time[size_t(d)].size()) == L, "plan: layer_time[", d, "] has ",
                r.layer_time[size_t(d)].size(), " layers but weight_bytes has ", L);
    check_finite_non_negative(r.layer_time[size_t(d)], str_cat("layer_time[", d, "]"));
  }
  if (!r.layer_decode_time.empty()) {
    LIBAI_CHECK(int(r.layer_decode_time.size()) == D, "plan: layer_decode_time covers ",
                r.layer_decode_time.size(), " devices but there are ", D);
    for (int d = 0; d < D; ++d) {
      LIBAI_CHECK(int(r.layer_decode_time[size_t(d)].size()) == L, "plan: layer_decode_time[", d,
                  "] has ", r.layer_decode_time[size_t(d)].size(), " layers, expected ", L);
      check_finite_non_negative(r.layer_decode_time[size_t(d)],
                                str_cat("layer_decode_time[", d, "]"));
    }
  }
  LIBAI_CHECK(r.memory_cap.empty() || int(r.memory_cap.size()) == D, "plan: memory_cap has ",
              r.memory_cap.size(), " entries for ", D, " devices (or give none: unlimited)");
  for (size_t d = 0; d < r.memory_cap.size(); ++d)
    LIBAI_CHECK(!std::isnan(r.memory_cap[d]), "plan: memory_cap[", d, "] is not a number");
  check_finite_non_negative(r.weight_bytes, "weight_bytes");
  for (const auto* v : {&r.activation_bytes, &r.kv_cache_bytes})
    LIBAI_CHECK(v->empty() || int(v->size()) == L,
                "plan: ", v == &r.activation_bytes ? "activation_bytes" : "kv_cache_bytes", " has ",
                v->size(), " entries for ", L, " layers (or give none)");
  check_finite_non_negative(r.activation_bytes, "activation_bytes");
  check_finite_non_negative(r.kv_cache_bytes, "kv_cache_bytes");
  for (const auto* e : {&r.embedding, &r.head}) {
    const char* name = e == &r.embedding ? "embedding" : "head";
    for (const auto* v : {&e->time, &e->decode_time})
      LIBAI_CHECK(v->empty() || int(v->size()) == D, "plan: ", name, ".",
                  v == &e->time ? "time" : "decode_time", " has ", v->size(), " entries for ", D,
                  " devices (or give none)");
    check_finite_non_negative(e->time, str_cat(name, ".time"));
    check_finite_non_negative(e->decode_time, str_cat(name, ".decode_time"));
    check_finite_non_negative({e->bytes}, str_cat(name, ".bytes"));
  }
  LIBAI_CHECK(r.slot_weight_bytes.empty() || int(r.slot_weight_bytes.size()) == r.pp,
              "plan: slot_weight_bytes has ", r.slot_weight_bytes.size(), " rows for ", r.pp,
              " pipeline slots (or give none)");
  for (size_t k = 0; k < r.slot_weight_bytes.size(); ++k) {
    LIBAI_CHECK(int(r.slot_weight_bytes[k].size()) == L, "plan: slot_weight_bytes[", k, "] has ",
                r.slot_weight_bytes[k].size(), " layers but weight_bytes has ", L);
    check_finite_non_negative(r.slot_weight_bytes[k], str_cat("slot_weight_bytes[", k, "]"));
  }
  for (const auto* v : {&r.slot_embedding_bytes, &r.slot_head_bytes}) {
    const char* name = v == &r.slot_head_bytes ? "slot_head_bytes" : "slot_embedding_bytes";
    LIBAI_CHECK(v->empty() || int(v->size()) == r.pp, "plan: ", name, " has ", v->size(),
                " entries for ", r.pp, " pipeline slots (or give none)");
    check_finite_non_negative(*v, name);
  }
  LIBAI_CHECK(r.workload != Workload::train ||
                  (r.slot_weight_bytes.empty() && r.slot_embedding_bytes.empty() &&
                   r.slot_head_bytes.empty()),
              "plan: weights per pipeline slot (precision per stage) are for decoding and "
              "inference plans; training holds every stage's weights in f32");
  LIBAI_CHECK(r.num_micro_batches >= 1, "plan: num_micro_batches is ", r.num_micro_batches,
              "; expected at least 1");
  LIBAI_CHECK(r.num_steps >= 1, "plan: num_steps is ", r.num_steps, "; expected at least 1");
  LIBAI_CHECK(r.workload == Workload::decode || r.num_steps == 1, "plan: num_steps is ",
              r.num_steps, " but only decoding runs several steps");
  LIBAI_CHECK(std::isfinite(r.items_per_micro_batch) && r.items_per_micro_batch > 0,
              "plan: items_per_micro_batch is ", r.items_per_micro_batch, "; expected > 0");
  check_finite_non_negative({r.backward_factor}, "backward_factor");
  check_finite_non_negative({r.transfer_time}, "transfer_time");
  check_finite_non_negative({r.sample_time}, "sample_time");
  LIBAI_CHECK(r.balance == Balance::custom || r.custom_stage_ids.empty(),
              "plan: custom stage ids given but the balance policy is ", balance_name(r.balance));
  LIBAI_CHECK(r.zero_stage >= 0 && r.zero_stage <= 3, "plan: zero_stage is ", r.zero_stage,
              "; expected 0, 1, 2 or 3");
  LIBAI_CHECK(r.zero_replicas >= 0, "plan: zero_replicas is ", r.zero_replicas,
              "; expected 0 (dp) or the replicas ZeRO shards over");
  LIBAI_CHECK(r.layer_parameters.empty() || int(r.layer_parameters.size()) == L,
              "plan: layer_parameters has ", r.layer_parameters.size(), " entries for ", L,
              " layers (or give none)");
  check_finite_non_negative(r.layer_parameters, "layer_parameters");
  check_finite_non_negative({r.embedding.parameters, r.head.parameters},
                            "the embedding's and head's parameters");
  LIBAI_CHECK(r.layer_parameters.empty() || r.workload == Workload::train,
              "plan: layer_parameters (the model state of training) given for a ",
              workload_name(r.workload), " plan");
  LIBAI_CHECK(r.zero_stage == 0 || !r.layer_parameters.empty(), "plan: ZeRO stage ", r.zero_stage,
              " needs the layers' parameter counts (layer_parameters) to cost the model state");
  LIBAI_CHECK(r.num_chunks >= 1, "plan: num_chunks (train.dist.virtual_pipeline_size) is ",
              r.num_chunks, "; expected at least 1");
  const bool interleaved =
      r.workload == Workload::train && r.schedule == PipelineSchedule::interleaved;
  LIBAI_CHECK(r.num_chunks == 1 || interleaved,
              "plan: num_chunks (train.dist.virtual_pipeline_size) is ", r.num_chunks,
              " but only the interleaved training schedule runs several chunks per "
              "pipeline rank (the ",
              r.workload == Workload::train ? "" : "workload is ",
              r.workload == Workload::train ? schedule_name(r.schedule) : workload_name(r.workload),
              r.workload == Workload::train ? " schedule runs one)" : ")");
  if (r.num_chunks > 1) {
    LIBAI_CHECK(r.pp * r.num_chunks <= L, "plan: interleaved 1F1B cuts the ", L,
                " layers into pipeline_parallel_size x virtual_pipeline_size = ", r.pp, " x ",
                r.num_chunks, " = ", r.pp * r.num_chunks,
                " virtual stages: every virtual stage needs at least one layer");
    LIBAI_CHECK(r.balance == Balance::uniform, "plan: balance ", balance_name(r.balance),
                " with the interleaved schedule (", r.num_chunks,
                " chunks per rank) is not implemented yet: interleaved plans split the layers "
                "uniformly over the ",
                r.pp * r.num_chunks, " virtual stages (use balance uniform)");
  }
}

// Stages in a plan: pp, or pp x chunks virtual stages when interleaved.
int num_plan_chunks(const PlanRequest& r) {
  return r.workload == Workload::train ? r.num_chunks : 1;
}

// One pipeline slot's costs: per layer the slowest of its devices, / tp.
struct SlotCosts {
  std::vector<double> objective;  // what the partition balances (per micro-batch or group)
  std::vector<double> forward, decode;
  double embedding_objective = 0, head_objective = 0;
  double embedding_forward = 0, head_forward = 0, embedding_decode = 0, head_decode = 0;
  double memory_cap = 0;  // the tightest device's; <= 0: unlimited
};

class Compiler {
 public:
  explicit Compiler(const PlanRequest& r) : r_(r) {
    check_request(r);
    L_ = int(r.weight_bytes.size());
    V_ = num_plan_chunks(r);
    switch (r.workload) {
      case Workload::train:
        switch (r.schedule) {
          case PipelineSchedule::gpipe: program_ = gpipe(r.pp, r.num_micro_batches); break;
          case PipelineSchedule::one_f_one_b:
            program_ = one_f_one_b(r.pp, r.num_micro_batches);
            break;
          case PipelineSchedule::interleaved:
            program_ = interleaved_one_f_one_b(r.pp, r.num_micro_batches, V_);
            break;
        }
        break;
      case Workload::inference: program_ = inference_forward(r.pp, r.num_micro_batches); break;
      case Workload::decode:
        program_ = decode_program(r.pp, r.num_micro_batches, r.num_steps);
        break;
    }
    quota_ = buffer_quota(program_);
    // What each (virtual) stage stashes at its peak, by the schedule's program: the partition
    // weighs activation memory with it (GPipe m, 1F1B p - s).
    in_flight_.assign(size_t(r.pp * V_), 0.0);
    if (r.workload == Workload::train) {
      for (int s = 0; s < r.pp; ++s) {
        std::vector<int> live(size_t(V_), 0);
        for (const Action& a : program_[size_t(s)]) {
          int& now = live[size_t(a.chunk)];
          now += a.kind == ActionKind::forward ? 1 : -1;
          double& peak = in_flight_[size_t(a.chunk * r.pp + s)];
          peak = std::max(peak, double(now));
        }
      }
    }
    const double groups = r.workload == Workload::decode ? r.num_micro_batches : 0.0;
    fixed_bytes_.assign(size_t(L_), 0.0);
    activation_bytes_.assign(size_t(L_), 0.0);
    // Note [ZeRO memory model]: the model state is linear in the parameters but for what is
    // in flight, so a layer costs state_per_parameter_ a parameter (ZeRO-0's buckets
    // included) and, as a unit, unit_per_element_ an element. The balanced split charges a
    // stage its largest unit at that layer's rate, the rest included (max(U, R) x the rate),
    // which undercounts ZeRO-2 and 3 when a stage has both (ZeRO-2: 8 max(U, R), not 4 R + 8 U);
    // assemble() costs the plan it picks by the exact formula, which validate() checks.
    state_per_parameter_ = zero_state_bytes(r.zero_stage, r.zero_ranks(), 1).total();
    unit_per_element_ = zero_state_bytes(r.zero_stage, r.zero_ranks(), 0, 1).total();
    // Weights per slot: decoding and inference, so no model state beside them.
    slot_fixed_bytes_.assign(r.slot_weight_bytes.size(), std::vector<double>(size_t(L_), 0.0));
    for (int l = 0; l < L_; ++l) {
      for (size_t k = 0; k < slot_fixed_bytes_.size(); ++k)
        slot_fixed_bytes_[k][size_t(l)] = r.slot_weight_bytes[k][size_t(l)] / r.tp;
      fixed_bytes_[size_t(l)] =
          (r.weight_bytes[size_t(l)] + state_per_parameter_ * parameters_of(l)) / r.tp;
      if (unit_per_element_ > 0) unit_bytes_.push_back(unit_per_element_ * parameters_of(l) / r.tp);
      kv_bytes_.push_back(r.kv_cache_bytes.empty() ? 0.0
                                                   : groups * r.kv_cache_bytes[size_t(l)] / r.tp);
      fixed_bytes_[size_t(l)] += kv_bytes_.back();
      for (auto& row : slot_fixed_bytes_) row[size_t(l)] += kv_bytes_.back();
      if (r.workload == Workload::train && !r.activation_bytes.empty())
        activation_bytes_[size_t(l)] = r.activation_bytes[size_t(l)] / r.tp;
    }
    for (int k = 0; k < r.pp; ++k) slots_.push_back(slot_costs(k));
  }

  Plan compile() {
    std::vector<int> order(size_t(r_.pp));
    std::iota(order.begin(), order.end(), 0);
    StageAssignment stage_of;
    switch (r_.balance) {
      case Balance::uniform: stage_of = uniform_partition(L_, r_.pp * V_); break;
      case Balance::custom: stage_of = custom_partition(r_.custom_stage_ids, L_, r_.pp); break;
      case Balance::memory:
        stage_of = memory_proportional_partition(cost_model_for(device_costs(), order));
        break;
      case Balance::balanced: {
        OrderedPartition best = balanced_partition_over_orders(device_costs());
        order = std::move(best.order);
        stage_of = std::move(best.partition.stage_of);
        break;
      }
    }
    return assemble(order, stage_of);
  }

 private:
  std::vector<int> devices_of(int slot) const {
    std::vector<int> out;
    for (int d = 0; d < r_.dp; ++d)
      for (int t = 0; t < r_.tp; ++t) out.push_back((d * r_.pp + slot) * r_.tp + t);
    return out;
  }

  SlotCosts slot_costs(int k) const {
    SlotCosts c;
    c.forward.assign(size_t(L_), 0.0);
    c.decode.assign(size_t(L_), 0.0);
    c.objective.assign(size_t(L_), 0.0);
    const double later_steps = r_.workload == Workload::decode ? r_.num_steps - 1 : 0;
    // Training balances forward + backward time (the backward as backward_factor forwards).
    const double per_forward = r_.workload == Workload::train ? 1 + r_.backward_factor : 1.0;
    auto slowest = [&](double& into, const std::vector<double>& per_device, int device) {
      if (!per_device.empty()) into = std::max(into, per_device[size_t(device)] / r_.tp);
    };
    bool limited = false;
    double cap = std::numeric_limits<double>::infinity();
    for (int d : devices_of(k)) {
      for (int l = 0; l < L_; ++l) {
        const double f = r_.layer_time[size_t(d)][size_t(l)] / r_.tp;
        const double dec =
            r_.layer_decode_time.empty() ? f : r_.layer_decode_time[size_t(d)][size_t(l)] / r_.tp;
        c.forward[size_t(l)] = std::max(c.forward[size_t(l)], f);
        c.decode[size_t(l)] = std::max(c.decode[size_t(l)], dec);
      }
      slowest(c.embedding_forward, r_.embedding.time, d);
      slowest(c.head_forward, r_.head.time, d);
      slowest(c.embedding_decode,
              r_.embedding.decode_time.empty() ? r_.embedding.time : r_.embedding.decode_time, d);
      slowest(c.head_decode, r_.head.decode_time.empty() ? r_.head.time : r_.head.decode_time, d);
      if (!r_.memory_cap.empty() && r_.memory_cap[size_t(d)] > 0) {
        limited = true;
        cap = std::min(cap, r_.memory_cap[size_t(d)]);
      }
    }
    for (int l = 0; l < L_; ++l)
      c.objective[size_t(l)] =
          per_forward * c.forward[size_t(l)] + later_steps * c.decode[size_t(l)];
    c.embedding_objective = per_forward * c.embedding_forward + later_steps * c.embedding_decode;
    c.head_objective = per_forward * c.head_forward + later_steps * c.head_decode;
    c.memory_cap = limited ? cap : 0.0;
    return c;
  }

  double parameters_of(int layer) const {
    return r_.layer_parameters.empty() ? 0.0 : r_.layer_parameters[size_t(layer)];
  }

  // On each device of pipeline slot k: the weights of layer l, and of the embedding and the
  // head (the slot's own precision, when the request gives them per slot).
  double weight_bytes(int k, int l) const {
    return (r_.slot_weight_bytes.empty() ? r_.weight_bytes[size_t(l)]
                                         : r_.slot_weight_bytes[size_t(k)][size_t(l)]) /
           r_.tp;
  }
  double embedding_bytes(int k) const {
    return (r_.slot_embedding_bytes.empty() ? r_.embedding.bytes
                                            : r_.slot_embedding_bytes[size_t(k)]) /
           r_.tp;
  }
  double head_bytes(int k) const {
    return (r_.slot_head_bytes.empty() ? r_.head.bytes : r_.slot_head_bytes[size_t(k)]) / r_.tp;
  }
  // Of (virtual) stage s run by slot k, on each of its devices: the embedding's and head's
  // bytes, and their parameters (one unit: the rest of the stage's part).
  double extra_bytes(int s, int k) const {
    const int last = r_.pp * V_ - 1;
    return (s == 0 ? embedding_bytes(k) : 0.0) + (s == last ? head_bytes(k) : 0.0);
  }
  double extra_parameters(int s) const {
    if (r_.layer_parameters.empty()) return 0.0;
    const int last = r_.pp * V_ - 1;
    return ((s == 0 ? r_.embedding.parameters : 0.0) + (s == last ? r_.head.parameters : 0.0)) /
           r_.tp;
  }

  // Slots are the devices of DeviceCosts: which slot runs which stage is to be chosen.
  DeviceCosts device_costs() const {
    DeviceCosts costs;
    for (int k = 0; k < r_.pp; ++k) {
      const SlotCosts& c = slots_[size_t(k)];
      costs.layer_time.push_back(c.objective);
      costs.memory_cap.push_back(c.memory_cap);
      costs.first_time.push_back(c.embedding_objective);
      costs.last_time.push_back(c.head_objective);
      costs.first_memory.push_back(embedding_bytes(k));
      costs.last_memory.push_back(head_bytes(k));
    }
    costs.layer_memory = fixed_bytes_;
    costs.device_layer_memory = slot_fixed_bytes_;
    costs.layer_activation_memory = activation_bytes_;
    costs.in_flight = in_flight_;
    for (int s = 0; s < r_.pp; ++s) {
      costs.extra_memory.push_back(state_per_parameter_ * extra_parameters(s));
      if (!unit_bytes_.empty())
        costs.extra_unit_memory.push_back(unit_per_element_ * extra_parameters(s));
    }
    costs.layer_unit_memory = unit_bytes_;
    return costs;
  }

  Plan assemble(const std::vector<int>& order, const StageAssignment& stage_of) const {
    Plan plan;
    plan.dp = r_.dp;
    plan.pp = r_.pp;
    plan.tp = r_.tp;
    plan.num_layers = L_;
    plan.num_chunks = V_;
    plan.workload = r_.workload;
    plan.schedule = r_.schedule;
    plan.balance = r_.balance;
    plan.zero_stage = r_.zero_stage;
    plan.zero_ranks = r_.zero_ranks();
    plan.memory_cap = r_.memory_cap;
    plan.memory_cap.resize(r_.layer_time.size(), 0.0);
    plan.stage_of = stage_of;
    const int S = r_.pp * V_;
    // [virtual stage] elements of its largest layer and of its rest (Note [ZeRO memory model])
    std::vector<std::pair<double, double>> unit_of_stage;
    for (int s = 0; s < S; ++s) {
      const SlotCosts& c = slots_[size_t(order[size_t(s % r_.pp)])];
      StagePlan st;
      st.slot = order[size_t(s % r_.pp)];
      st.devices = devices_of(st.slot);
      st.first_layer = int(std::find(stage_of.begin(), stage_of.end(), s) - stage_of.begin());
      st.last_layer = int(stage_of.rend() - std::find(stage_of.rbegin(), stage_of.rend(), s)) - 1;
      st.forward_time = (s == 0 ? c.embedding_forward : 0.0) + (s == S - 1 ? c.head_forward : 0.0);
      st.decode_time = (s == 0 ? c.embedding_decode : 0.0) + (s == S - 1 ? c.head_decode : 0.0);
      st.weight_bytes = extra_bytes(s, st.slot);
      st.parameters = extra_parameters(s);
      double largest_layer = 0;
      const double rest = st.parameters;
      for (int l = st.first_layer; l <= st.last_layer; ++l) {
        st.forward_time += c.forward[size_t(l)];
        st.decode_time += c.decode[size_t(l)];
        st.weight_bytes += weight_bytes(st.slot, l);
        st.parameters += parameters_of(l) / r_.tp;
        largest_layer = std::max(largest_layer, parameters_of(l) / r_.tp);
        st.kv_cache_bytes += kv_bytes_[size_t(l)];
        st.activation_bytes += in_flight_[size_t(s)] * activation_bytes_[size_t(l)];
      }
      st.model_state =
          zero_state_bytes(r_.zero_stage, r_.zero_ranks(), st.parameters, largest_layer, rest);
      unit_of_stage.push_back({largest_layer, rest});
      st.input_slots = quota_[size_t(s)];
      plan.costs.forward.push_back(st.forward_time);
      plan.costs.backward.push_back(r_.backward_factor * st.forward_time);
      if (r_.workload == Workload::decode) plan.costs.decode.push_back(st.decode_time);
      plan.stages.push_back(std::move(st));
    }
    if (r_.workload != Workload::train) plan.costs.backward.clear();
    plan.costs.transfer = r_.transfer_time;
    plan.costs.sample = r_.sample_time;
    plan.program = program_;
    plan.quota = quota_;
    std::vector<double> stash_bytes;  // per (virtual) stage, per micro-batch
    for (const StagePlan& st : plan.stages) {
      double bytes = 0;
      for (int l = st.first_layer; l <= st.last_layer; ++l) bytes += activation_bytes_[size_t(l)];
      stash_bytes.push_back(bytes);
    }
    const std::vector<double> peak = r_.workload == Workload::train
                                         ? peak_stashed_bytes(program_, stash_bytes)
                                         : std::vector<double>(size_t(r_.pp), 0.0);
    plan.rank_memory.resize(size_t(r_.pp));
    for (int s = 0; s < S; ++s) {
      RankMemory& m = plan.rank_memory[size_t(s % r_.pp)];
      m.weight_bytes += plan.stages[size_t(s)].weight_bytes;
      m.kv_cache_bytes += plan.stages[size_t(s)].kv_cache_bytes;
      m.parameters += plan.stages[size_t(s)].parameters;
      // Each chunk's rest is a unit of its own (Note [ZeRO partitions]), reduced and freed
      // when that chunk's backward ends, so one chunk's rest is in flight at a time: the
      // largest, as for the layers.
      m.largest_layer = std::max(m.largest_layer, unit_of_stage[size_t(s)].first);
      m.rest_unit = std::max(m.rest_unit, unit_of_stage[size_t(s)].second);
      m.largest_unit = std::max(m.largest_layer, m.rest_unit);
    }
    for (RankMemory& m : plan.rank_memory)  // one unit in flight at a time, of all its chunks
      m.model_state =
          zero_state_bytes(r_.zero_stage, r_.zero_ranks(), m.parameters, m.largest_layer,
                           m.rest_unit);
    for (int r = 0; r < r_.pp; ++r) plan.rank_memory[size_t(r)].activation_bytes = peak[size_t(r)];
    if (r_.simulate) plan.timeline = simulate(plan.program, plan.costs, plan.quota);
    plan.items_per_step = double(r_.dp) * r_.num_micro_batches * r_.items_per_micro_batch *
                          (r_.workload == Workload::decode ? r_.num_steps : 1);
    plan.throughput =
        plan.timeline.step_time > 0 ? plan.items_per_step / plan.timeline.step_time : 0.0;
    for (double u : plan.timeline.utilisation) plan.utilisation += u / r_.pp;
    return plan;
  }

  const PlanRequest& r_;
  int L_ = 0;
  int V_ = 1;  // chunks per pipeline rank
  PipelineProgram program_;
  std::vector<int> quota_;
  std::vector<double> in_flight_;    // [(virtual) stage] micro-batches whose activations it keeps
  std::vector<double> fixed_bytes_;  // [layer] per device: weights, model state, KV caches
  std::vector<std::vector<double>> slot_fixed_bytes_;  // [slot][layer]: by slot (if given)
  std::vector<double> kv_bytes_;     // [layer] per device: KV caches alone
  std::vector<double> unit_bytes_;   // [layer] per device: its unit in flight (empty: none)
  double state_per_parameter_ = 0, unit_per_element_ = 0;
  std::vector<double> activation_bytes_;  // [layer] per device, per micro-batch in flight
  std::vector<SlotCosts> slots_;
};

}  // namespace

Plan compile_plan(const PlanRequest& request) { return Compiler(request).compile(); }

void validate(const Plan& plan) {
  LIBAI_CHECK(plan.dp >= 1 && plan.pp >= 1 && plan.tp >= 1, "plan: parallel sizes dp ", plan.dp,
              ", pp ", plan.pp, ", tp ", plan.tp, " must all be at least 1");
  LIBAI_CHECK(plan.num_chunks >= 1, "plan: ", plan.num_chunks, " chunks per pipeline rank");
  const int D = plan.dp * plan.pp * plan.tp, P = plan.pp, S = P * plan.num_chunks;
  const int L = plan.num_layers;
  const bool chunked = plan.num_chunks > 1;
  LIBAI_CHECK(int(plan.memory_cap.size()) == D, "plan: ", plan.memory_cap.size(),
              " devices given but dp x pp x tp = ", plan.dp, " x ", plan.pp, " x ", plan.tp, " = ",
              D);
  if (chunked)
    LIBAI_CHECK(S <= L, "plan: pipeline_parallel_size x virtual_pipeline_size = ", P, " x ",
                plan.num_chunks, " = ", S, " virtual stages exceed the ", L,
                " layers: every virtual stage needs at least one layer");
  else
    LIBAI_CHECK(S <= L, "plan: pipeline_parallel_size ", S, " exceeds the ", L,
                " layers: every stage needs at least one layer");
  LIBAI_CHECK(int(plan.stage_of.size()) == L, "plan: ", plan.stage_of.size(), " stage ids for ", L,
              " layers");
  for (int l = 0; l < L; ++l) {
    const int s = plan.stage_of[size_t(l)], before = l == 0 ? 0 : plan.stage_of[size_t(l) - 1];
    LIBAI_CHECK(s >= 0 && s < S, "plan: layer ", l, " is on stage ", s, ", out of range [0, ", S,
                ")");
    LIBAI_CHECK(s == before || s == before + 1, "plan: layer ", l, " is on stage ", s,
                " after stage ", before, ": stages must be contiguous and in order");
  }
  LIBAI_CHECK(L == 0 || plan.stage_of.back() == S - 1, "plan: the last layer is on stage ",
              plan.stage_of.back(), " of ", S, ": every stage needs at least one layer");
  LIBAI_CHECK(int(plan.stages.size()) == S, "plan: ", plan.stages.size(), " stages described for ",
              S, chunked ? " virtual stages" : " pipeline stages");
  std::vector<int> users(size_t(D), 0);
  for (int s = 0; s < S; ++s) {
    const StagePlan& st = plan.stages[size_t(s)];
    LIBAI_CHECK(int(st.devices.size()) == plan.dp * plan.tp, "plan: stage ", s, " runs on ",
                st.devices.size(), " devices; expected dp x tp = ", plan.dp * plan.tp);
    if (s >= P) {  // a later chunk runs on its rank's devices
      LIBAI_CHECK(st.devices == plan.stages[size_t(s % P)].devices, "plan: virtual stage ", s,
                  " is chunk ", s / P, " of pipeline rank ", s % P,
                  " but runs on other devices than the rank's chunk 0");
      continue;
    }
    for (int d : st.devices) {
      LIBAI_CHECK(d >= 0 && d < D, "plan: stage ", s, " uses device ", d, ", out of range [0, ", D,
                  ")");
      LIBAI_CHECK(++users[size_t(d)] == 1, "plan: device ", d, " is used by two stages");
    }
  }
  LIBAI_CHECK(int(plan.rank_memory.size()) == P, "plan: memory given for ", plan.rank_memory.size(),
              " pipeline ranks, expected ", P);
  for (int r = 0; r < P; ++r) {
    const RankMemory& m = plan.rank_memory[size_t(r)];
    for (int d : plan.stages[size_t(r)].devices) {
      const double cap = plan.memory_cap[size_t(d)];
      if (cap <= 0 || m.total() <= cap) continue;
      std::string what;
      if (chunked) {
        what = str_cat("pipeline rank ", r, " (layers");
        for (int s = r; s < S; s += P)
          what += str_cat(s == r ? " " : ", ", plan.stages[size_t(s)].first_layer, "-",
                          plan.stages[size_t(s)].last_layer);
        what += ")";
      } else {
        what = str_cat("stage ", r, " (layers ", plan.stages[size_t(r)].first_layer, "-",
                       plan.stages[size_t(r)].last_layer, ")");
      }
      LIBAI_THROW(InvalidArgument, "plan: ", what, " does not fit device ", d, ": it needs ",
                  std::llround(m.total()), " bytes (", format_bytes(m.total()), ": weights ",
                  format_bytes(m.weight_bytes),
                  m.parameters > 0
                      ? str_cat(", model state ", format_bytes(m.model_state.total()), " (",
                                zero_description(plan.zero_stage, plan.zero_ranks), ": parameters ",
                                format_bytes(m.model_state.parameters), ", gradients ",
                                format_bytes(m.model_state.gradients), ", optimizer ",
                                format_bytes(m.model_state.optimizer), ", in flight ",
                                format_bytes(m.model_state.in_flight), ")")
                      : std::string(),
                  ", kv cache ", format_bytes(m.kv_cache_bytes), ", activations ",
                  format_bytes(m.activation_bytes), ") and the device has ", std::llround(cap),
                  " bytes (", format_bytes(cap), ")");
    }
  }
  LIBAI_CHECK(int(plan.program.size()) == P && int(plan.quota.size()) == S,
              "plan: the program has ", plan.program.size(), " ranks and the quotas ",
              plan.quota.size(), " stages for ", P, " pipeline ranks of ", plan.num_chunks,
              " chunks");
  simulate(plan.program, plan.costs, plan.quota);  // throws, naming the stuck stages
}

}  // namespace libai::schedule
