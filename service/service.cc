#include "service/service.h"

#include <algorithm>
#include <atomic>

#include "models/pipelines/pipelines.h"
#include "runtime/error.h"
#include "runtime/threads.h"
#include "service/batcher.h"
#include "service/encoder.h"

namespace libai {

struct CancelToken::State {
  std::atomic<bool> cancelled{false};
};

CancelToken::CancelToken() : state_(std::make_shared<State>()) {}
void CancelToken::cancel() const { state_->cancelled.store(true, std::memory_order_relaxed); }
bool CancelToken::cancelled() const { return state_->cancelled.load(std::memory_order_relaxed); }

const char* to_string(FinishReason reason) {
  switch (reason) {
    case FinishReason::length: return "length";
    case FinishReason::eos: return "eos";
    case FinishReason::stop: return "stop";
    case FinishReason::cancelled: return "cancelled";
  }
  return "unknown";
}

Service::~Service() = default;

namespace {

namespace pipelines = models::pipelines;

models::LoadOptions load_options(const ServiceOptions& options) {
  LIBAI_CHECK(!options.bf16_weights || options.pack_weights,
              "ServiceOptions.bf16_weights needs ServiceOptions.pack_weights");
  models::LoadOptions out{.pack_weights = options.pack_weights,
                          .pack_dtype = options.bf16_weights ? DType::bf16 : DType::f32,
                          .quantize = ops::parse_quantization(options.quantize,
                                                              "ServiceOptions.quantize"),
                          .quantize_keep = options.quantize_keep};
  LIBAI_CHECK(out.quantize.kind == ops::Quantization::none || !options.bf16_weights,
              "ServiceOptions.quantize ", options.quantize, " and bf16_weights exclude each other");
  return out;
}

// One model folder: a generation engine for a model that generates, an encoder queue for the
// others (sentence embeddings, classification).
class ModelService final : public Service {
 public:
  explicit ModelService(const ServiceOptions& options)
      : model_(pipelines::TextModel::load(options.model_dir,
                                          load_options(options))) {
    const models::Task task = model_.model().task();
    info_.model_type = model_.config_json().value("model_type", std::string());
    info_.task = models::task_name(task);
    info_.can_generate = model_.model().generative() != nullptr;
    info_.can_embed = !info_.can_generate && model_.has_tokenizer() &&
                      (task == models::Task::encoder || task == models::Task::masked_lm);
    info_.can_classify =
        model_.has_tokenizer() && task == models::Task::sequence_classification;
    if (info_.can_generate) {
      engine_ = std::make_unique<service::GenerationEngine>(service::engine_model(model_, options),
                                                           options);
      info_.max_positions = engine_->max_positions();
    } else {
      encoder_ = std::make_unique<service::EncoderQueue>(model_, options);
      info_.max_positions = model_.model().config().get_int("max_position_embeddings", 0);
      input_limit_ = info_.can_embed ? int64_t(pipelines::embedding_max_length(
                                           model_.folder(), model_.model().config()))
                                     : info_.max_positions;
    }
  }

  ServiceInfo info() const override { return info_; }
  ServiceMetrics metrics() const override {
    return engine_ ? engine_->metrics() : encoder_->metrics();
  }

  GenerateResult generate(const GenerateRequest& request) override {
    return submit(request).get();
  }
  std::future<GenerateResult> submit(GenerateRequest request) override {
    LIBAI_CHECK_KIND(Unsupported, engine_ != nullptr, model_.folder().string(), ": a ",
                     info_.task, " model cannot generate text");
    return engine_->submit(std::move(request));
  }
  std::vector<std::vector<float>> embed(const std::vector<std::string>& texts) override {
    LIBAI_CHECK_KIND(Unsupported, encoder_ != nullptr, model_.folder().string(), ": a ",
                     info_.task, " model does not embed sentences");
    return encoder_->embed(texts);
  }
  std::vector<LabelScore> classify(const std::string& text) override {
    LIBAI_CHECK_KIND(Unsupported, encoder_ != nullptr, model_.folder().string(), ": a ",
                     info_.task, " model does not classify text");
    return encoder_->classify(text);
  }
  int64_t count_tokens(const std::string& text) const override {
    const auto n = int64_t(model_.tokenizer().encode(text).ids.size());
    return input_limit_ > 0 ? std::min(n, input_limit_) : n;
  }

 private:
  pipelines::TextModel model_;
  ServiceInfo info_;
  int64_t input_limit_ = 0;  // embed / classify truncate their inputs here (0: no limit)
  // Declared after the model: they stop (and let go of it) first.
  std::unique_ptr<service::GenerationEngine> engine_;
  std::unique_ptr<service::EncoderQueue> encoder_;
};

}  // namespace

std::unique_ptr<Service> Service::open(const ServiceOptions& options) {
  LIBAI_CHECK(!options.model_dir.empty(), "ServiceOptions.model_dir is empty");
  LIBAI_CHECK(options.threads >= 0, "ServiceOptions.threads must be >= 0 (0: all cores), got ",
              options.threads);
  if (options.threads > 0) set_thread_budget(Device::cpu(), options.threads);
  return std::make_unique<ModelService>(options);
}

}  // namespace libai
