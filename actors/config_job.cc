#include "actors/config_job.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <ostream>

#include "actors/model_jobs.h"
#include "actors/synthetic.h"
#include "models/hf_config.h"
#include "models/pipelines/pipelines.h"
#include "models/tokenizers/tokenizer.h"
#include "runtime/device_profile.h"
#include "runtime/error.h"
#include "runtime/threads.h"

namespace libai::actors {

namespace mp = models::pipeline;

ConfigJob::ConfigJob(const config::Config& cfg, int nodes) : nodes_(nodes) { read(cfg); }

void ConfigJob::read(const config::Config& cfg) {
  cfg_ = cfg;
  const std::string target = cfg.get_or<std::string>("job._target_", "train");
  if (target == "generate")
    kind_ = JobKind::generate;
  else if (target == "encode")
    kind_ = JobKind::encode;
  else if (target == "synthetic")
    kind_ = JobKind::synthetic;
  else
    LIBAI_THROW(InvalidArgument, "job._target_ is '", target,
                "': `libai-actor run` runs generate, encode or synthetic jobs");
  dp_ = cfg.get_or<int>("train.dist.data_parallel_size", 1);
  tp_ = cfg.get_or<int>("train.dist.tensor_parallel_size", 1);
  pp_ = cfg.get_or<int>("train.dist.pipeline_parallel_size", 1);
  per_node_ = cfg.get_or<int>("train.cluster.devices_per_node", 1);
  threads_ = cfg.get_or<int>("train.cluster.device_threads", 1);
  balance_ = cfg.get_or<std::string>("train.dist.balance", "uniform");
  const int devices = nodes_ * per_node_;
  LIBAI_CHECK(dp_ * tp_ * pp_ == devices, "train.dist: data_parallel_size ", dp_,
              " x tensor_parallel_size ", tp_, " x pipeline_parallel_size ", pp_, " = ",
              dp_ * tp_ * pp_, " slots, but the cluster has ", nodes_, " node(s) x ",
              "train.cluster.devices_per_node ", per_node_, " = ", devices, " devices");
  LIBAI_CHECK(tp_ == 1 || per_node_ % tp_ == 0, "train.dist.tensor_parallel_size ", tp_,
              " does not divide train.cluster.devices_per_node ", per_node_,
              ": the ranks of a stage must share a node");
  slowdown_ = cfg.get_or<std::vector<double>>("train.cluster.device_slowdown",
                                              std::vector<double>(size_t(devices), 1.0));
  LIBAI_CHECK(int(slowdown_.size()) == devices, "train.cluster.device_slowdown has ",
              slowdown_.size(), " entries but the cluster has ", devices, " devices");

  if (kind_ == JobKind::synthetic) {
    auto layers = cfg.get_or<std::optional<int>>("train.dist.pipeline_num_layers", std::nullopt);
    LIBAI_CHECK(layers.has_value(), "a synthetic job needs train.dist.pipeline_num_layers");
    num_layers_ = *layers;
    layer_seconds_ = cfg.get_or<double>("job.layer_seconds", 0.001);
    LIBAI_CHECK(layer_seconds_ >= 0, "job.layer_seconds must not be negative");
    num_groups_ = cfg.get_or<int>("job.num_micro_batches", pp_ * dp_);
    steps_ = cfg.get_or<int>("job.steps", 1);
  } else {
    const auto weights = cfg.get_or<std::string>("model.weights", "");
    LIBAI_CHECK(!weights.empty(), "model.weights is not set: a ", target,
                " job needs a model folder");
    model_ = weights;
    const auto hf = models::HfConfig::load(model_);
    num_layers_ = mp::pipeline_num_layers(hf);
    auto tokenizer = [&] { return tokenizers::load_tokenizer(model_); };
    if (kind_ == JobKind::generate) {
      prompt_texts_ = cfg.get_or<std::vector<std::string>>("job.prompts", {});
      if (!prompt_texts_.empty()) {
        auto tok = tokenizer();
        for (const auto& text : prompt_texts_) {
          auto ids = tok->encode(text).ids;
          LIBAI_CHECK(!ids.empty(), "job.prompts: the prompt '", text, "' has no tokens");
          prompts_.emplace_back(ids.begin(), ids.end());
        }
      }
      for (auto& ids : cfg.get_or<std::vector<std::vector<int64_t>>>("job.prompt_ids", {}))
        prompts_.push_back(ids);
      LIBAI_CHECK(!prompts_.empty(), "a generate job needs job.prompts or job.prompt_ids");
      encoder_decoder_ = mp::is_encoder_decoder(hf);
      // A model that cannot generate through stages is named here, before any node loads it.
      if (encoder_decoder_)
        mp::seq2seq_lm_info(hf);
      else
        mp::causal_lm_info(hf);
      num_groups_ = std::min<int>(cfg.get_or<int>("job.num_groups", pp_ * dp_), int(prompts_.size()));
    } else {
      texts_ = cfg.get_or<std::vector<std::string>>("job.texts", {});
      LIBAI_CHECK(!texts_.empty(), "an encode job needs job.texts");
      micro_batch_size_ = cfg.get_or<int>("job.micro_batch_size", 8);
      LIBAI_CHECK(micro_batch_size_ >= 1, "job.micro_batch_size must be at least 1");
      num_groups_ = int((texts_.size() + size_t(micro_batch_size_) - 1) / size_t(micro_batch_size_));
    }
  }
  if (kind_ == JobKind::generate) steps_ = int(cfg.get_or<int64_t>("job.max_new_tokens", 20));
  if (kind_ == JobKind::encode) steps_ = 1;
  LIBAI_CHECK(pp_ <= num_layers_, "train.dist.pipeline_parallel_size ", pp_, " is more than the ",
              num_layers_, " layers of the model");
  LIBAI_CHECK(num_groups_ >= dp_, "the job has ", num_groups_,
              " groups of work but train.dist.data_parallel_size is ", dp_);
}

std::vector<wire::DeviceProfile> ConfigJob::profile_devices(int node_rank) {
  std::vector<wire::DeviceProfile> out;
  const auto* overrides = cfg_.root().find_path("train.cluster.profiles");
  for (int d = 0; d < per_node_; ++d) {
    const int global = node_rank * per_node_ + d;
    DeviceProfile p = profile_cpu_device(Device::cpu(d), threads_, slowdown_[size_t(global)]);
    p.name = str_cat("node", node_rank, ":cpu:", d);
    if (overrides && !overrides->is_null()) {
      if (const auto* fields = overrides->find_path(p.name)) apply_profile_overrides(p, *fields);
    }
    out.push_back({p.name, p.matmul_gflops, p.memory_bandwidth_gbs, p.free_memory_bytes});
  }
  return out;
}

schedule::CostModel ConfigJob::build_cost_model(const std::vector<wire::DeviceProfile>& devices) const {
  schedule::CostModel cost;
  double fastest = 0;
  for (const auto& d : devices) fastest = std::max(fastest, d.matmul_gflops);
  std::vector<mp::LayerCost> layers;
  if (kind_ != JobKind::synthetic) {
    const auto hf = models::HfConfig::load(model_);
    // One decoding step of a group (or one micro-batch of encoding), 64 tokens of context.
    layers = mp::layer_costs(hf, kind_ == JobKind::generate ? 1 : 32, DType::f32, 64);
  }
  for (int s = 0; s < pp_; ++s) {
    // A stage is as fast as the slowest device of its (replica, rank) copies.
    double gflops = 1e300, gbs = 1e300, memory = 1e300;
    for (int r = 0; r < dp_; ++r)
      for (int t = 0; t < tp_; ++t) {
        const auto& d = devices[size_t((r * pp_ + s) * tp_ + t)];
        gflops = std::min(gflops, d.matmul_gflops);
        gbs = std::min(gbs, d.memory_bandwidth_gbs);
        memory = std::min(memory, double(d.free_memory_bytes) / per_node_);
      }
    std::vector<double> times;
    for (int l = 0; l < num_layers_; ++l) {
      if (kind_ == JobKind::synthetic) {
        times.push_back(layer_seconds_ * fastest / gflops);
      } else {
        const auto& c = layers[size_t(l)];
        times.push_back(std::max(c.flops / (gflops * 1e9), c.weight_bytes / (gbs * 1e9)) / tp_);
      }
    }
    cost.layer_time.push_back(std::move(times));
    cost.memory_cap.push_back(memory);
  }
  for (int l = 0; l < num_layers_; ++l)
    cost.layer_memory.push_back(kind_ == JobKind::synthetic ? 0.0
                                                            : layers[size_t(l)].weight_bytes / tp_);
  return cost;
}

void ConfigJob::plan(wire::Assignment& assignment) {
  cost_ = build_cost_model(assignment.devices);
  schedule::StageAssignment split;
  if (auto custom = cfg_.get_or<std::optional<std::vector<int64_t>>>(
          "train.dist.custom_pipeline_stage_id", std::nullopt))
    split = schedule::custom_partition(*custom, num_layers_, pp_);
  else if (balance_ == "measured")
    split = schedule::balanced_partition(cost_).stage_of;
  else if (balance_ == "memory")
    split = schedule::memory_proportional_partition(cost_);
  else
    split = schedule::uniform_partition(num_layers_, pp_);
  assignment.stage_of.assign(split.begin(), split.end());
  assignment.device_of_stage.clear();
  for (int s = 0; s < pp_; ++s) assignment.device_of_stage.push_back(s);
}

PipelineLayout ConfigJob::layout(const wire::Assignment& assignment) {
  if (!assignment.config_yaml.empty() && assignment.config_yaml != cfg_.to_yaml())
    read(config::Config::parse(assignment.config_yaml, "node 0's config"));
  LIBAI_CHECK(int(assignment.stage_of.size()) == num_layers_, "the assignment splits ",
              assignment.stage_of.size(), " layers but the model has ", num_layers_);
  PipelineLayout layout = make_layout({.dp = dp_, .pp = pp_, .tp = tp_}, num_groups_);
  for (SlotSpec& slot : layout.slots) {
    const int position = assignment.device_of_stage.empty()
                             ? slot.stage
                             : assignment.device_of_stage[size_t(slot.stage)];
    const int device = (slot.replica * pp_ + position) * tp_ + slot.rank;
    slot.node = device / per_node_;
    slot.device = Device::cpu(device % per_node_);
    slot.slowdown = slowdown_[size_t(device)];
  }
  return layout;
}

ComputeFactory ConfigJob::compute(const PipelineLayout& layout, const wire::Assignment& assignment) {
  for (int d = 0; d < per_node_; ++d)
    if (thread_budget(Device::cpu(d)) != threads_) set_thread_budget(Device::cpu(d), threads_);
  const std::vector<int> stage_of(assignment.stage_of.begin(), assignment.stage_of.end());
  if (kind_ == JobKind::synthetic) {
    std::vector<int> layers_of(size_t(pp_), 0);
    for (int s : stage_of) ++layers_of[size_t(s)];
    const double per_layer = layer_seconds_;
    return [layers_of, per_layer](const SlotSpec& slot) -> std::shared_ptr<StageCompute> {
      return std::make_shared<SyntheticCompute>(per_layer * layers_of[size_t(slot.stage)]);
    };
  }
  return model_stage_factory(model_, layout, stage_of);
}

void ConfigJob::drive(PipelineClient& client, const PipelineLayout& layout) {
  if (kind_ == JobKind::synthetic) {
    run_synthetic_job(client, layout, steps_);
    return;
  }
  const auto hf = models::HfConfig::load(model_);
  if (kind_ == JobKind::generate) {
    models::generation::GenerationConfig g;
    g.max_new_tokens = cfg_.get_or<int64_t>("job.max_new_tokens", 20);
    g.min_new_tokens = cfg_.get_or<int64_t>("job.min_new_tokens", 0);
    g.do_sample = cfg_.get_or<bool>("job.do_sample", false);
    g.temperature = cfg_.get_or<double>("job.temperature", 1.0);
    g.top_k = cfg_.get_or<int64_t>("job.top_k", 50);
    g.top_p = cfg_.get_or<double>("job.top_p", 1.0);
    g.seed = cfg_.get_or<uint64_t>("job.seed", 0);
    g.num_beams = cfg_.get_or<int64_t>("job.num_beams", 1);
    g.length_penalty = cfg_.get_or<double>("job.length_penalty", 1.0);
    g.num_return_sequences = cfg_.get_or<int64_t>("job.num_return_sequences", 1);
    g.repetition_penalty = cfg_.get_or<double>("job.repetition_penalty", 1.0);
    g.no_repeat_ngram_size = cfg_.get_or<int64_t>("job.no_repeat_ngram_size", 0);
    models::pipelines::complete_generation_config(model_, hf.json(), g);
    const auto groups = split_into_groups(prompts_, num_groups_);
    auto results = run_generation(client, layout, hf, groups, g);
    generated_.clear();
    generated_text_.clear();
    std::unique_ptr<tokenizers::Tokenizer> tok;
    try {
      tok = tokenizers::load_tokenizer(model_);
    } catch (const Error&) {
      // No tokenizer: ids only.
    }
    for (auto& group : results)
      for (auto& per_prompt : group) {
        generated_.emplace_back();
        for (auto& seq : per_prompt) {
          generated_.back().push_back(seq.tokens);
          generated_text_.push_back(
              tok ? tok->decode(std::vector<int32_t>(seq.tokens.begin(), seq.tokens.end()), true)
                  : std::string());
        }
      }
    return;
  }
  // Encoding.
  auto tok = tokenizers::load_tokenizer(model_);
  const size_t max_length = models::pipelines::embedding_max_length(model_, hf);
  std::vector<models::TensorMap> batches;
  std::vector<Tensor> masks;
  for (size_t start = 0; start < texts_.size(); start += size_t(micro_batch_size_)) {
    std::vector<std::string> chunk(texts_.begin() + std::ptrdiff_t(start),
                                   texts_.begin() + std::ptrdiff_t(std::min(
                                                        texts_.size(), start + size_t(micro_batch_size_))));
    auto enc = models::pipelines::encode_batch(*tok, chunk, max_length);
    models::TensorMap batch{{"input_ids", enc.input_ids}, {"attention_mask", enc.attention_mask}};
    if (enc.token_type_ids.defined()) batch["token_type_ids"] = enc.token_type_ids;
    batches.push_back(std::move(batch));
    masks.push_back(enc.attention_mask);
  }
  auto hidden = run_encoding(client, layout, batches);
  embeddings_.clear();
  for (size_t b = 0; b < hidden.size(); ++b)
    for (auto& e : models::pipelines::mean_pool_normalize(hidden[b], masks[b]))
      embeddings_.push_back(std::move(e));
}

void ConfigJob::print_plan(std::ostream& out, const wire::Assignment& assignment) const {
  out << "plan: " << num_layers_ << " layers, data " << dp_ << " x pipeline " << pp_
      << " x tensor " << tp_ << " over " << nodes_ << " node(s) x " << per_node_
      << " device(s), balance " << balance_ << "\n";
  for (int s = 0; s < pp_; ++s) {
    int first = -1, last = -1;
    for (int l = 0; l < num_layers_; ++l)
      if (assignment.stage_of[size_t(l)] == s) {
        if (first < 0) first = l;
        last = l;
      }
    double seconds = 0;
    if (!cost_.layer_time.empty())
      for (int l = first; l <= last; ++l) seconds += cost_.layer_time[size_t(s)][size_t(l)];
    const int device = s * tp_;  // replica 0, rank 0
    out << "  stage " << s << ": layers " << first << "-" << last << " on node "
        << device / per_node_ << " cpu:" << device % per_node_;
    if (size_t(device) < assignment.devices.size())
      out << " (" << std::lround(assignment.devices[size_t(device)].matmul_gflops)
          << " GFLOP/s measured, slow-down " << slowdown_[size_t(device)] << ")";
    if (seconds > 0) out << ", predicted " << seconds * 1e3 << " ms per action";
    out << "\n";
  }
}

void ConfigJob::print_results(std::ostream& out, bool json) const {
  if (kind_ == JobKind::generate) {
    if (json) {
      nlohmann::json seqs = nlohmann::json::array();
      size_t k = 0;
      for (size_t p = 0; p < generated_.size(); ++p)
        for (const auto& tokens : generated_[p]) {
          nlohmann::json prompt = p < prompt_texts_.size() ? nlohmann::json(prompt_texts_[p])
                                                           : nlohmann::json(prompts_[p]);
          // As `libai-actor generate` prints them: the decoder's new tokens for T5.
          std::vector<int64_t> ids = encoder_decoder_ ? std::vector<int64_t>() : prompts_[p];
          ids.insert(ids.end(), tokens.begin(), tokens.end());
          seqs.push_back({{"prompt", prompt}, {"token_ids", ids}, {"text", generated_text_[k++]}});
        }
      out << nlohmann::json{{"sequences", seqs}}.dump(2) << "\n";
      return;
    }
    size_t k = 0;
    for (size_t p = 0; p < generated_.size(); ++p)
      for (const auto& tokens : generated_[p]) {
        out << "prompt " << p << ": "
            << (p < prompt_texts_.size() ? "\"" + prompt_texts_[p] + "\"" : std::string("ids"))
            << "\n  -> \"" << generated_text_[k++] << "\"\n     new token ids [";
        for (size_t i = 0; i < tokens.size(); ++i) out << (i ? ", " : "") << tokens[i];
        out << "]\n";
      }
    return;
  }
  if (kind_ == JobKind::encode) {
    if (json) {
      out << nlohmann::json{{"embeddings", embeddings_}}.dump() << "\n";
      return;
    }
    for (size_t i = 0; i < embeddings_.size(); ++i) {
      out << "text " << i << ": \"" << texts_[i] << "\" -> " << embeddings_[i].size()
          << " dims [" << embeddings_[i][0] << ", " << embeddings_[i][1] << ", ...]\n";
    }
    if (embeddings_.size() > 1) {
      out << "cosine similarity:\n";
      for (size_t i = 0; i < embeddings_.size(); ++i) {
        out << "  ";
        for (size_t j = 0; j < embeddings_.size(); ++j) {
          char cell[16];
          std::snprintf(cell, sizeof cell, "%7.4f",
                        models::pipelines::cosine(embeddings_[i], embeddings_[j]));
          out << cell;
        }
        out << "\n";
      }
    }
  }
}

}  // namespace libai::actors
