#include "plan/run_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>

#include "models/hf_config.h"
#include "models/stages/stage.h"
#include "runtime/error.h"
#include "schedule/precision.h"

namespace libai::plan {

namespace mp = models::stages;

namespace {

bool decodes(const JobShape& job) {
  if (job.training) return false;
  return job.kind == JobKind::generate || (job.kind == JobKind::synthetic && job.steps > 1);
}

double roofline(double flops, double bytes, const DeviceProfile& device) {
  return schedule::layer_time_from_profile(flops, bytes, device.matmul_gflops,
                                           device.memory_bandwidth_gbs);
}

// A synthetic layer costs what it was timed at on each device (ConfigJob::profile_devices);
// without timings (what-if rates), layer_seconds on the fastest device, scaled by the rates.
void add_synthetic_costs(schedule::PlanRequest& r, const JobShape& job,
                         const std::vector<DeviceProfile>& devices) {
  const bool timed = std::all_of(devices.begin(), devices.end(),
                                 [](const DeviceProfile& d) { return d.layer_seconds > 0; });
  double fastest = 0;
  for (const auto& d : devices) fastest = std::max(fastest, d.matmul_gflops);
  for (const auto& d : devices)
    r.layer_time.emplace_back(size_t(job.num_layers),
                              timed ? d.layer_seconds : job.layer_seconds * fastest / d.matmul_gflops);
  r.weight_bytes.assign(size_t(job.num_layers), 0.0);
}

// Note [Decoding costs of a model job]
// A group's first step (the prefill) runs its rows x the longest prompt through every layer;
// each later step one token per row, attending to the mean context (prompt + half the new
// tokens), reading the layer's weights and its KV cache. T5's decoder layers see one token at
// step 0 (with cross-attention over the prompt) and its encoder layers only pass the decoder's
// states on after it: they hold no KV cache, which is how they are told apart. A group's KV
// cache holds rows x (prompt + max_new_tokens) tokens: T5's self-attention over the new tokens
// and cross-attention over the prompt cost the same bytes per token.
// A layer's weights cost ops::weight_bytes_ratio of their f32 bytes in the precision priced.
// Its timed layer: the one at that precision (DeviceProfile::timings) when the job prices
// precisions per slot, else the one at the job's own.
struct TimedLayer {
  double forward = 0, step = 0;
};
TimedLayer timed_layer(const DeviceProfile& d, const JobShape& job,
                       const ops::WeightPrecision& precision) {
  if (!job.mixed_precision()) return {d.layer_seconds, d.layer_step_seconds};
  const std::string name = ops::weight_precision_name(precision);
  for (const auto& t : d.timings)
    if (t.precision == name) return {t.layer_seconds, t.layer_step_seconds};
  return {};
}

void add_model_costs(schedule::PlanRequest& r, const JobShape& job,
                     const std::vector<DeviceProfile>& devices,
                     const ops::WeightPrecision& precision) {
  const auto hf = models::HfConfig::load(job.model);
  const int64_t rows = job.rows, prompt = job.input_tokens;
  const bool generate = job.kind == JobKind::generate;
  const bool seq2seq = generate && mp::is_encoder_decoder(hf);
  std::vector<mp::LayerCost> prefill = mp::layer_costs(hf, rows * prompt, DType::f32, prompt);
  LIBAI_CHECK(int(prefill.size()) == job.num_layers, hf.path(), ": the cost model has ",
              prefill.size(), " layers but the job cuts ", job.num_layers);
  const int64_t context = prompt + std::max<int64_t>(job.max_new_tokens, 1) / 2;
  std::vector<mp::LayerCost> first_step = prefill, step;
  if (generate) {
    step = mp::layer_costs(hf, rows, DType::f32, context);
    if (seq2seq) {
      const auto decoder_step0 = mp::layer_costs(hf, rows, DType::f32, prompt);
      for (size_t l = 0; l < prefill.size(); ++l)
        if (prefill[l].kv_bytes_per_token > 0) first_step[l] = decoder_step0[l];
    }
  }
  // model.quantize (or the slot's precision): the layers' and the head's weights in their
  // packed bytes (norms and biases, a few per cent of a layer's, are counted at the same rate);
  // the embedding table stays f32 for its lookups.
  const double quantized = ops::weight_bytes_ratio(precision);
  for (auto* costs : {&prefill, &first_step, &step})
    for (auto& c : *costs) c.weight_bytes *= quantized;
  const double tokens_kept = double(rows) * double(prompt + job.max_new_tokens);
  for (const auto& c : prefill) {
    r.weight_bytes.push_back(c.weight_bytes);
    if (generate) r.kv_cache_bytes.push_back(c.kv_bytes_per_token * tokens_kept);
  }
  const mp::LayerCost embedding = mp::embedding_cost(hf, rows * prompt, DType::f32);
  const mp::LayerCost embedding_step = mp::embedding_cost(hf, rows, DType::f32);
  mp::LayerCost head = mp::head_cost(hf, generate ? rows : rows * prompt, DType::f32);
  head.weight_bytes *= quantized;
  r.embedding.bytes = embedding.weight_bytes;
  r.head.bytes = head.weight_bytes;
  // Note [Calibrated layer costs]: with layer 1 timed on every device, each device's rooflines
  // are scaled by timed / roofline of that layer (the forward and the decoding step apart).
  const bool calibrated =
      !seq2seq && prefill.size() >= 3 &&
      std::all_of(devices.begin(), devices.end(), [&](const DeviceProfile& d) {
        const TimedLayer t = timed_layer(d, job, precision);
        return t.forward > 0 && (!generate || t.step > 0);
      });
  for (const auto& d : devices) {
    std::vector<double> first, later;
    for (size_t l = 0; l < prefill.size(); ++l) {
      first.push_back(roofline(first_step[l].flops, first_step[l].weight_bytes, d));
      if (!generate) continue;
      const bool passes_on = seq2seq && prefill[l].kv_bytes_per_token == 0;  // T5's encoder
      later.push_back(passes_on ? roofline(0, double(rows) * step[l].output_bytes_per_token, d)
                                : roofline(step[l].flops,
                                           step[l].weight_bytes + double(rows) * double(context) *
                                                                      step[l].kv_bytes_per_token,
                                           d));
    }
    const TimedLayer timed = timed_layer(d, job, precision);
    const double scale = calibrated ? timed.forward / first[1] : 1.0;
    const double step_scale = calibrated && generate ? timed.step / later[1] : 1.0;
    for (double& t : first) t *= scale;
    for (double& t : later) t *= step_scale;
    r.layer_time.push_back(std::move(first));
    if (generate) r.layer_decode_time.push_back(std::move(later));
    // An embedding reads the rows it looks up; a head reads its whole matrix.
    r.embedding.time.push_back(
        scale * roofline(embedding.flops, double(rows * prompt) * embedding.output_bytes_per_token, d));
    r.head.time.push_back(scale * roofline(head.flops, head.weight_bytes, d));
    if (generate) {
      r.embedding.decode_time.push_back(
          step_scale *
          roofline(embedding_step.flops, double(rows) * embedding_step.output_bytes_per_token, d));
      r.head.decode_time.push_back(step_scale * roofline(head.flops, head.weight_bytes, d));
    }
  }
}

// Note [Calibrated layer costs]
// The roofline (flops over the measured GFLOP/s, bytes over the measured GB/s) gets the shape
// of a model's costs right (which layers, prefill against decoding, context length) but not
// their level on a CPU: a small layer is a dozen ops, each with its own overhead, and took
// 1.5-3x its roofline (bench/RESULTS.md, GPT-2 at 1:2). When every device timed the job's
// layer 1 at the job's shapes (time_model_layer), each device's layer, embedding and head costs
// are its rooflines times timed / roofline of layer 1 (the forward and the decoding step each
// by their own ratio), so the split and the prediction follow what the device measured.


std::string format_rate(double value, const char* unit) {
  char text[48];
  std::snprintf(text, sizeof text, value >= 100 ? "%.0f %s" : "%.3g %s", value, unit);
  return text;
}

}  // namespace

std::string format_seconds(double seconds) {
  char text[48];
  const double s = std::fabs(seconds);
  if (s >= 1)
    std::snprintf(text, sizeof text, "%.3f s", seconds);
  else if (s >= 1e-3)
    std::snprintf(text, sizeof text, "%.3f ms", seconds * 1e3);
  else if (s >= 1e-6 || s == 0)
    std::snprintf(text, sizeof text, "%.1f us", seconds * 1e6);
  else
    std::snprintf(text, sizeof text, "%.1f ns", seconds * 1e9);
  return text;
}

namespace {

// The request with every slot's weights in `precision` (the job's own: f32 or model.quantize).
schedule::PlanRequest uniform_request(const JobShape& job,
                                      const std::vector<DeviceProfile>& devices,
                                      const ops::WeightPrecision& precision) {
  const int count = job.dp * job.pp * job.tp;
  LIBAI_CHECK(int(devices.size()) == count, "planning: ", devices.size(),
              " device profiles, but data ", job.dp, " x pipeline ", job.pp, " x tensor ", job.tp,
              " parallelism needs ", count, " devices");
  LIBAI_CHECK(job.devices_per_node >= 1, "planning: devices_per_node is ", job.devices_per_node,
              "; expected at least 1");
  for (const auto& d : devices)
    LIBAI_CHECK(d.matmul_gflops > 0 && d.memory_bandwidth_gbs > 0, "device ", d.name, " reports ",
                d.matmul_gflops, " GFLOP/s and ", d.memory_bandwidth_gbs,
                " GB/s; planning needs both > 0 (measured, or set in train.cluster.profiles)");
  for (const auto& d : devices) {
    std::vector<double> times = {d.layer_seconds, d.layer_step_seconds};
    for (const auto& t : d.timings) times.insert(times.end(), {t.layer_seconds, t.layer_step_seconds});
    for (double t : times)
      LIBAI_CHECK(std::isfinite(t) && t >= 0 && t < 1e6, "device ", d.name,
                  " reports a layer time of ", t, " s; expected a finite number >= 0");
  }
  schedule::PlanRequest r;
  const int nodes = (count + job.devices_per_node - 1) / job.devices_per_node;
  const double local = job.local_hop_seconds.value_or(0.0);
  const double remote = job.remote_hop_seconds.value_or(0.0);
  r.transfer_time = nodes > 1 && remote > 0 ? remote : local;
  r.sample_time = local;
  r.dp = job.dp;
  r.pp = job.pp;
  r.tp = job.tp;
  r.workload = decodes(job) ? schedule::Workload::decode : schedule::Workload::inference;
  if (job.training) {
    r.workload = schedule::Workload::train;
    r.schedule = schedule::parse_schedule(job.schedule, "job.schedule");
    r.num_chunks = r.schedule == schedule::PipelineSchedule::interleaved ? job.chunks : 1;
    r.backward_factor = job.backward_factor;
  }
  r.num_micro_batches = job.groups_per_replica();
  r.num_steps = decodes(job) ? job.steps : 1;
  r.items_per_micro_batch = job.kind == JobKind::synthetic ? 1.0 : double(job.rows);
  for (const auto& d : devices)
    r.memory_cap.push_back(double(d.free_memory_bytes) / job.devices_per_node);
  if (job.kind == JobKind::synthetic)
    add_synthetic_costs(r, job, devices);
  else
    add_model_costs(r, job, devices, precision);
  if (job.custom_stage_ids) {
    r.balance = schedule::Balance::custom;
    r.custom_stage_ids = *job.custom_stage_ids;
  } else if (job.balance == "measured") {
    r.balance = schedule::Balance::balanced;
  } else if (job.balance == "memory") {
    r.balance = schedule::Balance::memory;
  } else {
    LIBAI_CHECK(job.balance == "uniform", "train.dist.balance is '", job.balance,
                "'; expected uniform, measured or memory");
    r.balance = schedule::Balance::uniform;
  }
  return r;
}

// One request per precision the job prices, in the job's order.
std::vector<schedule::PlanRequest> precision_requests(
    const JobShape& job, const std::vector<DeviceProfile>& devices) {
  LIBAI_CHECK(job.kind != JobKind::synthetic && !job.training,
              "train.dist.stage_precision: synthetic stages hold no weights");
  std::vector<schedule::PlanRequest> out;
  for (const auto& p : job.precisions) out.push_back(uniform_request(job, devices, p));
  return out;
}

}  // namespace

schedule::PlanRequest plan_request(const JobShape& job,
                                   const std::vector<DeviceProfile>& devices) {
  if (!job.mixed_precision()) return uniform_request(job, devices, {.quantize = job.quantize});
  LIBAI_CHECK(int(job.slot_precision.size()) == job.pp, "planning: ", job.slot_precision.size(),
              " stage precisions for ", job.pp,
              " pipeline slots (train.dist.stage_precision auto is chosen by "
              "resolve_stage_precision first)");
  return schedule::mix_precisions(precision_requests(job, devices), job.slot_precision);
}

void resolve_stage_precision(JobShape& job, const std::vector<DeviceProfile>& devices) {
  if (!job.mixed_precision() || !job.slot_precision.empty()) return;
  const std::vector<schedule::PlanRequest> requests = precision_requests(job, devices);
  try {
    job.slot_precision = schedule::choose_precisions(requests).precision_of_slot;
  } catch (const InvalidArgument& e) {  // the least precise plan's shortfall
    std::string names;
    for (const auto& p : job.precisions) names += (names.empty() ? "" : ", ") + ops::weight_precision_name(p);
    LIBAI_THROW(InvalidArgument, "train.dist.stage_precision auto: no choice of precisions per "
                "stage (of ", names, ") fits the devices' memory; with every stage in ",
                ops::weight_precision_name(job.precisions.back()), ": ", e.what());
  }
}

schedule::Plan compile_job_plan(const JobShape& job,
                                const std::vector<DeviceProfile>& devices) {
  return schedule::compile_plan(plan_request(job, devices));
}

void check_job_plan(const schedule::Plan& plan, const std::vector<DeviceProfile>& devices,
                    int devices_per_node) {
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const schedule::StagePlan& st = plan.stages[s];
    for (int d : st.devices) {
      const double cap =
          d >= 0 && size_t(d) < plan.memory_cap.size() ? plan.memory_cap[size_t(d)] : 0;
      if (cap <= 0 || st.memory() <= cap) continue;
      const std::string name = size_t(d) < devices.size() ? devices[size_t(d)].name : "?";
      LIBAI_THROW(InvalidArgument, "the plan does not fit: stage ", s, " (layers ", st.first_layer,
                  "-", st.last_layer, ") needs ", std::llround(st.memory()), " bytes (",
                  schedule::format_bytes(st.memory()), ": weights ",
                  schedule::format_bytes(st.weight_bytes), ", kv cache ",
                  schedule::format_bytes(st.kv_cache_bytes), ") on device ", d, " (", name,
                  "), which has ", std::llround(cap), " bytes (", schedule::format_bytes(cap),
                  ": its node's free memory / ", devices_per_node, " device(s) per node)");
    }
  }
  schedule::validate(plan);  // sizes and deadlocks
}

void print_job_plan(std::ostream& out, const JobShape& job, const schedule::Plan& plan,
                    const std::vector<DeviceProfile>& devices, int width) {
  const bool decoding = plan.workload == schedule::Workload::decode;
  const int groups = job.groups_per_replica();
  const char* per_replica = job.dp > 1 ? " per replica" : "";
  out << "plan: " << plan.num_layers << " layers ";
  if (job.kind == JobKind::synthetic)
    out << "of " << format_seconds(job.layer_seconds) << " (synthetic)";
  else
    out << "of " << models::HfConfig::load(job.model).model_type() << " (" << job.model.string()
        << ")";
  if (job.mixed_precision())
    out << ", weights per stage";
  else if (job.quantize.kind != ops::Quantization::none)
    out << ", weights " << ops::quantization_name(job.quantize);
  out << ", " << plan.pp << " stages, ";
  const bool training = plan.workload == schedule::Workload::train;
  if (decoding)
    out << groups << " groups x " << job.steps << " steps" << per_replica << " (decoding)";
  else if (training)
    out << groups << " micro-batches" << per_replica << " (training, "
        << schedule::schedule_name(plan.schedule)
        << (plan.num_chunks > 1 ? str_cat(" over ", plan.num_chunks, " chunks per stage") : "")
        << ", backward " << job.backward_factor << "x forward)";
  else
    out << groups << " micro-batches" << per_replica << " (inference)";
  out << ", balance " << (job.custom_stage_ids ? "custom" : job.balance) << "\n";
  const int count = plan.dp * plan.pp * plan.tp;
  out << "  " << count << " device(s) on " << count / job.devices_per_node << " node(s) x "
      << job.devices_per_node << ": data " << plan.dp << " x pipeline " << plan.pp << " x tensor "
      << plan.tp << "\n";
  const char* unit =
      decoding ? (job.kind == JobKind::generate ? "step of a group" : "step") : "micro-batch";
  // Interleaved training plans list their virtual stages: chunk s / pp of pipeline rank s % pp.
  for (int s = 0; s < int(plan.stages.size()); ++s) {
    const schedule::StagePlan& st = plan.stages[size_t(s)];
    const DeviceProfile* slowest = &devices[size_t(st.devices[0])];
    for (int d : st.devices)
      if (devices[size_t(d)].matmul_gflops < slowest->matmul_gflops) slowest = &devices[size_t(d)];
    out << "  stage " << s << ": layers " << st.first_layer << "-" << st.last_layer << " ("
        << st.num_layers() << "), " << device_names(st.devices, devices) << " ("
        << format_rate(slowest->matmul_gflops, "GFLOP/s") << ", "
        << format_rate(slowest->memory_bandwidth_gbs, "GB/s") << "), "
        << format_seconds(decoding ? st.decode_time : st.forward_time) << " per " << unit;
    if (decoding && st.decode_time != st.forward_time)
      out << " (prefill " << format_seconds(st.forward_time) << ")";
    if (training) out << " forward, " << format_seconds(plan.costs.backward[size_t(s)]) << " backward";
    if (const std::string p = stage_precision_name(job, st); !p.empty()) out << ", weights " << p;
    out << ", " << st.input_slots << " input slot" << (st.input_slots == 1 ? "" : "s") << "\n";
  }

  bool any_memory = false;
  for (const auto& st : plan.stages) any_memory = any_memory || st.memory() > 0;
  if (any_memory) {
    out << "\nmemory per device (weights" << (decoding ? " + kv cache" : "") << "):\n";
    for (int s = 0; s < plan.pp; ++s) {
      const schedule::StagePlan& st = plan.stages[size_t(s)];
      const double cap = stage_cap(plan, st);
      out << "  " << device_names(st.devices, devices) << " (stage " << s
          << "): " << schedule::format_bytes(st.memory());
      if (decoding)
        out << " (" << schedule::format_bytes(st.weight_bytes) << " + "
            << schedule::format_bytes(st.kv_cache_bytes) << ")";
      out << (st.devices.size() > 1 ? " each" : "") << " of "
          << (cap > 0 ? schedule::format_bytes(cap) : std::string("unlimited"))
          << (cap > 0 && st.memory() > cap ? "  DOES NOT FIT" : "") << "\n";
    }
  } else {
    out << "\nmemory per device: not modelled (synthetic stages hold no weights)\n";
  }

  out << "\npredicted timeline ("
      << (decoding ? "digits: group k, any step" : "digits: micro-batch k") << "):\n"
      << schedule::render_timeline(plan.timeline, plan.pp, width);
  const char* items = job.kind == JobKind::generate ? "tokens"
                      : job.kind == JobKind::encode ? "texts"
                      : decoding                    ? "group steps"
                                                    : "micro-batches";
  char line[200];
  std::snprintf(line, sizeof line, "%.4g %s per second (%g in all)", plan.throughput, items,
                plan.items_per_step);
  out << (training ? "\npredicted step time " : "\npredicted job time ") << format_seconds(plan.timeline.step_time) << ": " << line
      << ", mean utilisation " << std::lround(100.0 * plan.utilisation) << "%\n";
}

std::string stage_precision_name(const JobShape& job, const schedule::StagePlan& stage) {
  if (!job.mixed_precision() || size_t(stage.slot) >= job.slot_precision.size()) return "";
  return ops::weight_precision_name(job.precisions[size_t(job.slot_precision[size_t(stage.slot)])]);
}

std::string device_names(const std::vector<int>& devices,
                         const std::vector<DeviceProfile>& profiles) {
  std::string out;
  for (size_t i = 0; i < devices.size() && i < 4; ++i)
    out += (i ? "," : "") + profiles[size_t(devices[i])].name;
  if (devices.size() > 4) out += ",... (" + std::to_string(devices.size()) + ")";
  return out;
}

double stage_cap(const schedule::Plan& plan, const schedule::StagePlan& stage) {
  double cap = 0;
  for (int d : stage.devices) {
    const double c = plan.memory_cap[size_t(d)];
    if (c > 0 && (cap <= 0 || c < cap)) cap = c;
  }
  return cap;
}

}  // namespace libai::plan
