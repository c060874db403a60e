#include "service/encoder.h"

#include "ops/ops.h"
#include "runtime/autograd.h"
#include "runtime/error.h"

namespace libai::service {

namespace pipelines = models::pipelines;

EncoderQueue::EncoderQueue(pipelines::TextModel& model, const ServiceOptions& options)
    : model_(model), embed_batch_(size_t(options.embed_batch)), max_queue_(options.max_queue) {
  LIBAI_CHECK(options.embed_batch >= 1, "ServiceOptions.embed_batch must be >= 1, got ",
              options.embed_batch);
  LIBAI_CHECK(options.max_queue >= 0, "ServiceOptions.max_queue must be >= 0, got ", options.max_queue);
  thread_ = std::thread([this] { run(); });
}

EncoderQueue::~EncoderQueue() {
  {
    std::lock_guard lock(mutex_);
    closing_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void EncoderQueue::enqueue(const std::shared_ptr<Job>& job) {
  {
    std::lock_guard lock(mutex_);
    LIBAI_CHECK_KIND(Unavailable, !closing_, "the service is closing");
    LIBAI_CHECK_KIND(Unavailable, int64_t(queue_.size()) < max_queue_,
                     "the service is overloaded: ", queue_.size(),
                     " requests are waiting (ServiceOptions.max_queue = ", max_queue_,
                     "); try again later");
    queue_.push_back(job);
    metrics_.queue_depth = int64_t(queue_.size());
  }
  wake_.notify_one();
}

std::vector<std::vector<float>> EncoderQueue::embed(const std::vector<std::string>& texts) {
  if (texts.empty()) return {};
  LIBAI_CHECK_KIND(Unsupported, model_.model().task() != models::Task::causal_lm &&
                                    model_.model().task() != models::Task::seq2seq_lm,
                   model_.folder().string(), ": a ", models::task_name(model_.model().task()),
                   " model does not embed sentences");
  auto job = std::make_shared<Job>();
  job->texts = texts;
  auto result = job->vectors.get_future();
  enqueue(job);
  return result.get();
}

std::vector<LabelScore> EncoderQueue::classify(const std::string& text) {
  LIBAI_CHECK_KIND(Unsupported, model_.model().task() == models::Task::sequence_classification,
                   model_.folder().string(),
                   ": text classification needs a sequence-classification model, this one is ",
                   models::task_name(model_.model().task()));
  auto job = std::make_shared<Job>();
  job->classify = true;
  job->texts = {text};
  auto result = job->labels.get_future();
  enqueue(job);
  return result.get().at(0);
}

ServiceMetrics EncoderQueue::metrics() const {
  std::lock_guard lock(mutex_);
  return metrics_;
}

EncoderQueue::Labels EncoderQueue::classify_batch(const std::vector<std::string>& texts) {
  const size_t max_length = size_t(model_.model().config().get_int("max_position_embeddings", 512));
  const auto enc = pipelines::encode_batch(model_.tokenizer(), texts, max_length);
  const Tensor logits = model_.model().forward({{"input_ids", enc.input_ids},
                                                {"attention_mask", enc.attention_mask},
                                                {"token_type_ids", enc.token_type_ids}})
                            .at("logits");  // [texts, labels]
  Labels out;
  for (int64_t i = 0; i < int64_t(texts.size()); ++i) {
    std::vector<LabelScore> row;
    for (auto& s : pipelines::scores_from_logits(model_.model(), ops::select(logits, 0, i)))
      row.push_back({std::move(s.label), s.score});
    out.push_back(std::move(row));
  }
  return out;
}

void EncoderQueue::serve(const std::vector<std::shared_ptr<Job>>& jobs) {
  autograd::NoGradGuard no_grad;
  std::vector<std::string> texts;
  for (const auto& job : jobs) texts.insert(texts.end(), job->texts.begin(), job->texts.end());
  try {
    size_t at = 0;
    if (jobs.front()->classify) {
      Labels labels = classify_batch(texts);
      for (const auto& job : jobs) {
        job->labels.set_value(Labels(labels.begin() + at, labels.begin() + at + job->texts.size()));
        at += job->texts.size();
      }
    } else {
      Vectors vectors = pipelines::embed(model_, texts, embed_batch_);
      for (const auto& job : jobs) {
        job->vectors.set_value(Vectors(std::make_move_iterator(vectors.begin() + at),
                                       std::make_move_iterator(vectors.begin() + at + job->texts.size())));
        at += job->texts.size();
      }
    }
  } catch (...) {  // the batch failed (a bad folder, no tokenizer): each of its callers hears
    for (const auto& job : jobs) {
      try {
        if (job->classify) job->labels.set_exception(std::current_exception());
        else job->vectors.set_exception(std::current_exception());
      } catch (const std::future_error&) {  // answered before the failure
      }
    }
    std::lock_guard lock(mutex_);
    metrics_.failed += int64_t(jobs.size());
  }
  std::lock_guard lock(mutex_);
  metrics_.requests += int64_t(jobs.size());
  ++metrics_.decode_steps;
  metrics_.batched_rows += int64_t(texts.size());
}

void EncoderQueue::run() {
  while (true) {
    std::vector<std::shared_ptr<Job>> jobs;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return closing_ || !queue_.empty(); });
      if (closing_) break;
      // Whole requests of the first one's kind, up to embed_batch texts (at least one request).
      size_t texts = 0;
      const bool classify = queue_.front()->classify;
      for (auto it = queue_.begin(); it != queue_.end();) {
        if ((*it)->classify != classify) {
          ++it;
          continue;
        }
        if (!jobs.empty() && texts + (*it)->texts.size() > embed_batch_) break;
        texts += (*it)->texts.size();
        jobs.push_back(*it);
        it = queue_.erase(it);
      }
      metrics_.queue_depth = int64_t(queue_.size());
      metrics_.running = int64_t(jobs.size());
    }
    serve(jobs);
    std::lock_guard lock(mutex_);
    metrics_.running = 0;
  }
  std::deque<std::shared_ptr<Job>> waiting;
  {
    std::lock_guard lock(mutex_);
    waiting.swap(queue_);
    metrics_.queue_depth = 0;
    metrics_.failed += int64_t(waiting.size());
    metrics_.requests += int64_t(waiting.size());
  }
  const auto closed = std::make_exception_ptr(Unavailable("the service closed before the request started"));
  for (const auto& job : waiting) {
    if (job->classify) job->labels.set_exception(closed);
    else job->vectors.set_exception(closed);
  }
}

}  // namespace libai::service
