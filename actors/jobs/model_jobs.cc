#include "actors/jobs/model_jobs.h"

#include <algorithm>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/autograd.h"
#include "runtime/comm/local_communicator.h"
#include "runtime/device_profile.h"
#include "runtime/error.h"
#include "runtime/threads.h"

namespace libai::actors {

namespace mp = models::stages;

ModelStageCompute::ModelStageCompute(std::unique_ptr<mp::PipelineStage> stage)
    : stage_(std::move(stage)) {}

models::TensorMap ModelStageCompute::forward(int group, const models::TensorMap& inputs) {
  auto& state = states_[group];
  if (!state) state = stage_->new_state();
  autograd::NoGradGuard no_grad;
  return stage_->forward(inputs, *state);
}

void ModelStageCompute::release(int group) { states_.erase(group); }

std::vector<mp::StageSpec> stage_specs(const std::vector<int>& stage_of) {
  LIBAI_CHECK(!stage_of.empty(), "stage_specs: no layers");
  std::vector<int> per_stage;
  for (int s : stage_of) {
    LIBAI_CHECK(s == int(per_stage.size()) - 1 || s == int(per_stage.size()),
                "stage_specs: stages must be contiguous and start at 0");
    if (s == int(per_stage.size())) per_stage.push_back(0);
    ++per_stage.back();
  }
  return mp::contiguous_stages(per_stage);
}

ComputeFactory model_stage_factory(const std::filesystem::path& folder, const PipelineLayout& layout,
                                   const std::vector<int>& stage_of, DType dtype,
                                   const ops::QuantSpec& quantize,
                                   const std::vector<std::string>& keep,
                                   const std::vector<ops::WeightPrecision>& precision_of_stage) {
  const auto specs = stage_specs(stage_of);
  LIBAI_CHECK(int(specs.size()) == layout.sizes.pp, folder.string(), ": the split has ",
              specs.size(), " stages but pipeline_parallel_size is ", layout.sizes.pp);
  LIBAI_CHECK(precision_of_stage.empty() || precision_of_stage.size() == specs.size(),
              folder.string(), ": ", precision_of_stage.size(), " stage precisions for ",
              specs.size(), " stages");
  // One local tensor-parallel group per (replica, stage), made when its first rank loads.
  auto groups = std::make_shared<std::map<std::pair<int, int>, std::vector<std::shared_ptr<comm::Communicator>>>>();
  auto mutex = std::make_shared<std::mutex>();
  const int tp = layout.sizes.tp;
  return [folder, specs, groups, mutex, tp, dtype, quantize, keep, precision_of_stage](
             const SlotSpec& slot) -> std::shared_ptr<StageCompute> {
    models::LoadOptions options;
    options.dtype = dtype;
    options.pack_weights = true;  // inference stages
    options.quantize = quantize;
    options.quantize_keep = keep;
    if (!precision_of_stage.empty()) {
      options.pack_dtype = precision_of_stage[size_t(slot.stage)].pack_dtype;
      options.quantize = precision_of_stage[size_t(slot.stage)].quantize;
    }
    if (tp > 1) {
      std::lock_guard lock(*mutex);
      auto& comms = (*groups)[{slot.replica, slot.stage}];
      if (comms.empty()) comms = comm::LocalGroup::create(tp, std::chrono::seconds(120));
      options.tp = comms[size_t(slot.rank)];
    }
    return std::make_shared<ModelStageCompute>(
        mp::load_stage(folder, specs[size_t(slot.stage)], options));
  };
}

std::vector<std::vector<std::vector<int64_t>>> split_into_groups(
    const std::vector<std::vector<int64_t>>& prompts, int groups) {
  LIBAI_CHECK(groups >= 1 && size_t(groups) <= prompts.size(), "cannot split ", prompts.size(),
              " prompts into ", groups, " groups");
  std::vector<std::vector<std::vector<int64_t>>> out(static_cast<size_t>(groups));
  const size_t base = prompts.size() / size_t(groups), extra = prompts.size() % size_t(groups);
  size_t next = 0;
  for (size_t g = 0; g < size_t(groups); ++g)
    for (size_t i = 0; i < base + (g < extra ? 1 : 0); ++i) out[g].push_back(prompts[next++]);
  return out;
}

namespace {

// The model calls of one group's generation: each is a round trip through the pipeline (its
// step numbers count them, and the done packet follows the last).
class PipelineRoundTrip {
 public:
  PipelineRoundTrip(PipelineClient& client, int replica, int group)
      : client_(client), replica_(replica), group_(group) {}
  Tensor logits(const models::TensorMap& inputs) {
    client_.submit(replica_,
                   Packet{.group = group_, .step = steps_++, .done = false, .tensors = inputs});
    Packet out = client_.wait(group_);
    auto it = out.tensors.find("logits");
    LIBAI_CHECK(it != out.tensors.end(), "group ", group_, ": the last stage returned no logits");
    return it->second;
  }
  void done() {
    client_.submit(replica_, Packet{.group = group_, .step = steps_, .done = true, .tensors = {}});
  }

 private:
  PipelineClient& client_;
  int replica_, group_;
  int steps_ = 0;
};

void check_vocabulary(const std::vector<std::vector<int64_t>>& prompts, int64_t vocab_size) {
  for (const auto& p : prompts)
    for (int64_t id : p)
      LIBAI_CHECK(id >= 0 && id < vocab_size, "token id ", id, " outside the vocabulary of ",
                  vocab_size);
}

// A decoder-only model whose every step is a round trip through the pipeline.
class PipelineCausalLm : public models::generation::GenerativeModel {
 public:
  PipelineCausalLm(PipelineRoundTrip& pipeline, mp::CausalLmInfo info)
      : pipeline_(pipeline), info_(info) {}
  std::unique_ptr<models::generation::DecodeSession> start(
      const std::vector<std::vector<int64_t>>& prompts) override {
    check_vocabulary(prompts, info_.vocab_size);
    return std::make_unique<models::CausalLmSession>(
        prompts, info_.pad_id,
        [this](const models::TensorMap& inputs) { return pipeline_.logits(inputs); });
  }
  bool is_encoder_decoder() const override { return false; }
  int64_t vocab_size() const override { return info_.vocab_size; }

 private:
  PipelineRoundTrip& pipeline_;
  mp::CausalLmInfo info_;
};

// An encoder-decoder model (T5) whose every step is a round trip through the pipeline: the
// session is ChainedSeq2SeqLm's (Seq2SeqInputs), so eager stages and the pipeline are fed alike.
class PipelineSeq2SeqLm : public models::generation::GenerativeModel {
 public:
  PipelineSeq2SeqLm(PipelineRoundTrip& pipeline, mp::Seq2SeqLmInfo info)
      : pipeline_(pipeline), info_(info) {}
  std::unique_ptr<models::generation::DecodeSession> start(
      const std::vector<std::vector<int64_t>>& prompts) override {
    check_vocabulary(prompts, info_.vocab_size);
    return std::make_unique<models::Seq2SeqLmSession>(
        prompts, info_.pad_id, info_.decoder_start_id,
        [this](const models::TensorMap& inputs) { return pipeline_.logits(inputs); });
  }
  bool is_encoder_decoder() const override { return true; }
  int64_t decoder_start_token_id() const override { return info_.decoder_start_id; }
  int64_t vocab_size() const override { return info_.vocab_size; }

 private:
  PipelineRoundTrip& pipeline_;
  mp::Seq2SeqLmInfo info_;
};

using GenerationResults =
    std::vector<std::vector<std::vector<models::generation::GeneratedSequence>>>;
using ModelOfGroup = std::function<std::unique_ptr<models::generation::GenerativeModel>(
    PipelineRoundTrip& pipeline)>;

// generate() for every group on its own thread, over the model `model_of` makes.
GenerationResults generate_groups(
    PipelineClient& client, const PipelineLayout& layout,
    const std::vector<std::vector<std::vector<int64_t>>>& prompt_groups,
    const models::generation::GenerationConfig& config, const ModelOfGroup& model_of) {
  const size_t groups = prompt_groups.size();
  GenerationResults results(groups);
  std::vector<std::exception_ptr> errors(groups);
  std::vector<std::thread> threads;
  for (size_t g = 0; g < groups; ++g)
    threads.emplace_back([&, g] {
      PipelineRoundTrip pipeline(client, layout.replica_of_group(int(g)), int(g));
      try {
        auto model = model_of(pipeline);
        results[g] = models::generation::generate(*model, prompt_groups[g], config);
        pipeline.done();
      } catch (...) {
        errors[g] = std::current_exception();
        client.fail(str_cat("generation of group ", g, " failed"));
      }
    });
  for (auto& t : threads) t.join();
  // The pipeline's own error (a stage's) names the cause better than the groups' echoes.
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return results;
}

}  // namespace

GenerationResults run_generation(
    PipelineClient& client, const PipelineLayout& layout, const mp::CausalLmInfo& info,
    const std::vector<std::vector<std::vector<int64_t>>>& prompt_groups,
    const models::generation::GenerationConfig& config) {
  return generate_groups(client, layout, prompt_groups, config, [&](PipelineRoundTrip& pipeline) {
    return std::make_unique<PipelineCausalLm>(pipeline, info);
  });
}

GenerationResults run_generation(
    PipelineClient& client, const PipelineLayout& layout, const mp::Seq2SeqLmInfo& info,
    const std::vector<std::vector<std::vector<int64_t>>>& prompt_groups,
    const models::generation::GenerationConfig& config) {
  return generate_groups(client, layout, prompt_groups, config, [&](PipelineRoundTrip& pipeline) {
    return std::make_unique<PipelineSeq2SeqLm>(pipeline, info);
  });
}

GenerationResults run_generation(
    PipelineClient& client, const PipelineLayout& layout, const models::HfConfig& model,
    const std::vector<std::vector<std::vector<int64_t>>>& prompt_groups,
    const models::generation::GenerationConfig& config) {
  if (mp::is_encoder_decoder(model))
    return run_generation(client, layout, mp::seq2seq_lm_info(model), prompt_groups, config);
  return run_generation(client, layout, mp::causal_lm_info(model), prompt_groups, config);
}

std::vector<Tensor> run_encoding(PipelineClient& client, const PipelineLayout& layout,
                                 const std::vector<models::TensorMap>& micro_batches) {
  const int groups = int(micro_batches.size());
  for (int g = 0; g < groups; ++g)
    client.submit(layout.replica_of_group(g),
                  Packet{.group = g, .step = 0, .done = false, .tensors = micro_batches[size_t(g)]});
  std::vector<Tensor> out;
  for (int g = 0; g < groups; ++g) {
    Packet p = client.wait(g);
    auto it = p.tensors.find("last_hidden_state");
    LIBAI_CHECK(it != p.tensors.end(), "micro-batch ", g, ": the last stage returned no last_hidden_state");
    out.push_back(it->second);
    client.submit(layout.replica_of_group(g), Packet{.group = g, .step = 1, .done = true, .tensors = {}});
  }
  return out;
}

}  // namespace libai::actors
