// Embedding and classification behind libai::Service: callers on any thread queue their
// texts; one worker thread owns the model and runs the texts of several waiting requests as
// one batch (up to embed_batch texts, whole requests), then hands each caller its rows.
//
//   EncoderQueue queue(text_model, options);
//   auto vectors = queue.embed({"A cat sits.", "A dog runs."});   // blocks; any thread
//   auto labels = queue.classify("I loved it.");
//
// Embedding reuses models::pipelines::embed (mean pooling, unit length; it sorts a batch by
// length so that little is padded); classification pads a batch to its longest text with
// an attention mask, so each row scores as it would alone.
#pragma once

#include <condition_variable>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "models/pipelines/pipelines.h"
#include "service/service.h"

namespace libai::service {

class EncoderQueue {
 public:
  // `model` must outlive the queue and be used by nothing else while it runs.
  EncoderQueue(models::pipelines::TextModel& model, const ServiceOptions& options);
  // Fails the waiting requests (Unavailable) after the current batch, joins the thread.
  ~EncoderQueue();

  std::vector<std::vector<float>> embed(const std::vector<std::string>& texts);
  std::vector<LabelScore> classify(const std::string& text);
  ServiceMetrics metrics() const;

 private:
  using Vectors = std::vector<std::vector<float>>;
  using Labels = std::vector<std::vector<LabelScore>>;
  struct Job {
    bool classify = false;
    std::vector<std::string> texts;
    std::promise<Vectors> vectors;  // embed
    std::promise<Labels> labels;    // classify
  };

  // Queues the job (shared: the caller may stop waiting before the worker lets go of it).
  void enqueue(const std::shared_ptr<Job>& job);
  void run();
  // Runs `jobs` (all of one kind) as one batch.
  void serve(const std::vector<std::shared_ptr<Job>>& jobs);
  Labels classify_batch(const std::vector<std::string>& texts);

  models::pipelines::TextModel& model_;
  size_t embed_batch_;
  int max_queue_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool closing_ = false;
  ServiceMetrics metrics_;
  std::thread thread_;  // last: starts once the rest is built
};

}  // namespace libai::service
