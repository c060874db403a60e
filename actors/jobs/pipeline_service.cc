#include "actors/jobs/pipeline_service.h"

#include <algorithm>

#include "models/hf_config.h"
#include "models/stages/stage.h"
#include "models/pipelines/pipelines.h"
#include "models/tokenizers/tokenizer.h"
#include "runtime/error.h"
#include "service/batcher.h"

namespace libai::actors {

namespace {

namespace mp = models::stages;

// One group's steps: round trips through the pipeline, numbered for the stages.
class GroupSteps {
 public:
  GroupSteps(PipelineClient& client, int replica, int group)
      : client_(client), replica_(replica), group_(group) {}
  Tensor logits(const models::TensorMap& inputs) {
    client_.submit(replica_, Packet{.group = group_, .step = step_++, .done = false, .tensors = inputs});
    Packet out = client_.wait(group_);
    auto it = out.tensors.find("logits");
    LIBAI_CHECK(it != out.tensors.end(), "group ", group_, ": the last stage returned no logits");
    return it->second;
  }
  void done() noexcept {
    try {
      if (!client_.failed())
        client_.submit(replica_, Packet{.group = group_, .step = step_, .done = true, .tensors = {}});
    } catch (const Error&) {
      // The job failed meanwhile: its stages are ending anyway.
    }
  }

 private:
  PipelineClient& client_;
  int replica_, group_;
  int step_ = 0;
};

class PipelineService final : public Service {
 public:
  PipelineService(PipelineClient& client, const PipelineLayout& layout,
                  const std::filesystem::path& folder, const ServiceOptions& options)
      : folder_(folder), client_(client) {
    LIBAI_CHECK(layout.by_arrival, "a pipeline service needs a layout whose stages run by arrival");
    LIBAI_CHECK(options.max_batch >= 1, "ServiceOptions.max_batch must be >= 1, got ", options.max_batch);
    const auto hf = models::HfConfig::load(folder);
    LIBAI_CHECK_KIND(Unsupported, !mp::is_encoder_decoder(hf), folder.string(), ": model_type \"",
                     hf.model_type(), "\" is encoder-decoder; serving it through pipeline stages is "
                     "not supported (serve its folder from one process)");
    const mp::CausalLmInfo lm = mp::causal_lm_info(hf);
    if (tokenizers::has_tokenizer(folder)) tokenizer_ = tokenizers::load_tokenizer(folder);

    info_.model_type = hf.model_type();
    info_.task = models::task_name(models::Task::causal_lm);
    info_.can_generate = true;
    info_.max_positions = lm.max_positions;

    service::EngineModel model;
    model.tokenizer = tokenizer_.get();
    models::generation::GenerationConfig config;
    models::pipelines::complete_generation_config(folder, hf.json(), config);
    model.settings.eos_token_ids = config.eos_token_ids;
    model.vocab_size = lm.vocab_size;
    model.max_positions = lm.max_positions;
    int groups = 0;
    for (const auto& g : layout.groups) groups += int(g.size());
    const int64_t rows = (options.max_batch + groups - 1) / groups;
    for (size_t replica = 0; replica < layout.groups.size(); ++replica)
      for (int g : layout.groups[replica]) {
        auto steps = std::make_shared<GroupSteps>(client, int(replica), g);
        groups_.push_back(steps);
        model.lanes.push_back(std::make_unique<service::RunningBatch>(
            [steps](const models::TensorMap& in) { return steps->logits(in); }, rows));
      }
    engine_ = std::make_unique<service::GenerationEngine>(std::move(model), options);
  }

  ~PipelineService() override {
    engine_.reset();  // the lanes' last steps are back: nothing of theirs is in flight
    for (auto& g : groups_) g->done();
  }

  ServiceInfo info() const override { return info_; }
  ServiceMetrics metrics() const override { return engine_->metrics(); }
  GenerateResult generate(const GenerateRequest& request) override { return submit(request).get(); }
  std::future<GenerateResult> submit(GenerateRequest request) override {
    return engine_->submit(std::move(request));
  }
  std::vector<std::vector<float>> embed(const std::vector<std::string>&) override {
    LIBAI_THROW(Unsupported, folder_.string(), ": a causal_lm model does not embed sentences");
  }
  std::vector<LabelScore> classify(const std::string&) override {
    LIBAI_THROW(Unsupported, folder_.string(), ": a causal_lm model does not classify text");
  }
  std::string failure() const override { return client_.failure(); }
  int64_t count_tokens(const std::string& text) const override {
    if (tokenizer_ == nullptr) tokenizers::throw_no_tokenizer(folder_);
    return int64_t(tokenizer_->encode(text).ids.size());
  }

 private:
  std::filesystem::path folder_;
  PipelineClient& client_;
  std::unique_ptr<tokenizers::Tokenizer> tokenizer_;
  ServiceInfo info_;
  std::vector<std::shared_ptr<GroupSteps>> groups_;
  std::unique_ptr<service::GenerationEngine> engine_;  // last: stops first
};

}  // namespace

std::unique_ptr<Service> make_pipeline_service(PipelineClient& client,
                                               const PipelineLayout& layout,
                                               const std::filesystem::path& folder,
                                               const ServiceOptions& options) {
  return std::make_unique<PipelineService>(client, layout, folder, options);
}

}  // namespace libai::actors
