// The generation engine behind libai::Service: a bounded queue of requests and one thread
// that owns the model and decodes every running request together.
//
//   GenerationEngine engine(text_model, options);           // starts the engine thread
//   std::future<GenerateResult> f = engine.submit(request);  // any thread
//
// Note [Continuous batching]
// The engine thread loops: (1) it takes waiting requests while fewer than max_batch rows
// run, prefills their prompts together (left-padded, as generate pads a batch) into fresh
// KV caches, and appends those rows to the running batch; (2) every row picks its next token
// from its own logits (Sequence: its own processors and seeded draws, so a row's tokens do
// not depend on its neighbours), streams it, and ends on eos, max_new_tokens, a stop string
// or cancellation; (3) finished rows leave (select_rows on the caches and the mask) and
// their callers get their results; (4) one forward feeds each remaining row its token.
//
// Rows of different lengths share one cache by alignment on the right: every row's newest
// token is in the last column, and a row shorter than the batch has padding columns on its
// left, masked out of attention exactly like a left-padded prompt's. Position ids are kept
// per row (the row's own count of real tokens), so a row computes what it computes alone:
// attention over its real keys at its own positions. Joining pads the shorter side (the new
// rows or the running ones) in front, then concatenates along the batch axis. When rows
// leave, the leading columns that are padding in every remaining row are dropped, so the
// cache is never longer than the longest running sequence (and a model's position limit
// applies to that, not to the history of the batch).
//
// A model that is not decoder-only (T5: its encoder output is per row and its decoder's
// caches are not aligned that way) runs one request at a time through its DecodeSession,
// with the same per-request processing, streaming and cancellation.
#pragma once

#include <condition_variable>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "models/decoder_lm.h"
#include "models/pipelines/pipelines.h"
#include "service/sequence.h"
#include "service/service.h"

namespace libai::service {

// The rows being decoded and their model state; the engine asks it for logits.
class DecodeRows {
 public:
  virtual ~DecodeRows() = default;
  virtual int64_t rows() const = 0;
  virtual int64_t max_rows() const = 0;
  // Prefills `prompts` and appends them as the last rows; their next-token logits.
  virtual std::vector<std::vector<float>> add(const std::vector<std::vector<int64_t>>& prompts) = 0;
  // Feeds tokens[i] to row i; every row's next-token logits.
  virtual std::vector<std::vector<float>> step(const std::vector<int64_t>& tokens) = 0;
  // Keeps the rows `kept` (ascending) in that order.
  virtual void keep_rows(const std::vector<int64_t>& kept) = 0;
};

// The running batch of a decoder-only model (Note [Continuous batching]).
class RunningBatch : public DecodeRows {
 public:
  RunningBatch(models::DecoderLm& model, int64_t max_rows);
  int64_t rows() const override { return int64_t(last_position_.size()); }
  int64_t max_rows() const override { return max_rows_; }
  int64_t length() const { return length_; }  // cache columns
  std::vector<std::vector<float>> add(const std::vector<std::vector<int64_t>>& prompts) override;
  std::vector<std::vector<float>> step(const std::vector<int64_t>& tokens) override;
  void keep_rows(const std::vector<int64_t>& kept) override;

 private:
  Tensor keep_tensor() const;  // [rows, length] bool

  models::DecoderLm& model_;
  int64_t max_rows_;
  std::vector<models::LayerCache> caches_;  // one per layer, [rows, kv_heads, length, d]
  std::vector<uint8_t> keep_;               // [rows, length]: 1 = a real token
  std::vector<int64_t> last_position_;      // per row
  int64_t length_ = 0;
};

// Any GenerativeModel, one request at a time through its DecodeSession.
class SessionRows : public DecodeRows {
 public:
  explicit SessionRows(models::generation::GenerativeModel& model) : model_(model) {}
  int64_t rows() const override { return session_ ? 1 : 0; }
  int64_t max_rows() const override { return 1; }
  std::vector<std::vector<float>> add(const std::vector<std::vector<int64_t>>& prompts) override;
  std::vector<std::vector<float>> step(const std::vector<int64_t>& tokens) override;
  void keep_rows(const std::vector<int64_t>& kept) override;

 private:
  models::generation::GenerativeModel& model_;
  std::unique_ptr<models::generation::DecodeSession> session_;
};

class GenerationEngine {
 public:
  // `model` must outlive the engine and be used by nothing else while it runs.
  GenerationEngine(models::pipelines::TextModel& model, const ServiceOptions& options);
  // Fails the waiting requests (Unavailable), ends the running ones as cancelled after the
  // current step, and joins the thread.
  ~GenerationEngine();

  // Checks and tokenises the request on the calling thread; InvalidArgument for a bad one,
  // Unavailable when the queue is full or the engine is closing.
  std::future<GenerateResult> submit(GenerateRequest request);
  ServiceMetrics metrics() const;
  int64_t max_positions() const { return max_positions_; }

 private:
  void run();
  // Step (1) of Note [Continuous batching]; false when closing.
  bool admit(std::vector<std::unique_ptr<Sequence>>& running,
             std::vector<std::vector<float>>& logits);
  void decode(std::vector<std::unique_ptr<Sequence>>& running,
              std::vector<std::vector<float>>& logits);
  void finish(std::unique_ptr<Sequence> sequence);  // counts it, then hands out its result

  models::pipelines::TextModel& model_;
  models::generation::GenerativeModel& lm_;
  std::unique_ptr<DecodeRows> rows_;
  SequenceSettings settings_;
  int64_t max_positions_ = 0;  // 0: unbounded
  int max_queue_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::unique_ptr<Sequence>> queue_;
  bool closing_ = false;
  ServiceMetrics metrics_;
  std::thread thread_;  // last: starts once the rest is built
};

}  // namespace libai::service
