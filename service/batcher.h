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
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
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

// One decoding step of a group of rows through a decoder-only model, whole or in pipeline
// stages: inputs under the stage contract of models/stages/stage.h (input_ids,
// position_ids, attention_mask, select_rows, trim_front, join_rows), the last position's
// logits [rows, vocab] back.
using StepFunction = std::function<Tensor(const models::TensorMap&)>;

// The running batch of a decoder-only model (Note [Continuous batching]). The caches live
// where the step function runs the layers (models::DecoderLm::decode_step's state, on every
// pipeline stage); this side keeps which columns are real tokens and each row's position, and
// sends the row changes (rows leaving, columns dropped) with the next step.
class RunningBatch : public DecodeRows {
 public:
  // `release`: frees the caches at once when no row is left (else the next step's
  // select_rows does).
  RunningBatch(StepFunction step, int64_t max_rows, std::function<void()> release = {});
  // The model's own decode_step over a state of this batch.
  RunningBatch(models::DecoderLm& model, int64_t max_rows);
  int64_t rows() const override { return int64_t(last_position_.size()); }
  int64_t max_rows() const override { return max_rows_; }
  int64_t length() const { return length_; }  // cache columns
  std::vector<std::vector<float>> add(const std::vector<std::vector<int64_t>>& prompts) override;
  std::vector<std::vector<float>> step(const std::vector<int64_t>& tokens) override;
  void keep_rows(const std::vector<int64_t>& kept) override;

 private:
  Tensor keep_tensor() const;  // [rows, length] bool
  // Adds the row changes not sent yet to `inputs`.
  void take_pending(models::TensorMap& inputs);

  StepFunction step_;
  int64_t max_rows_;
  std::function<void()> release_;
  std::vector<uint8_t> keep_;           // [rows, length]: 1 = a real token
  std::vector<int64_t> last_position_;  // per row
  int64_t length_ = 0;
  std::optional<std::vector<int64_t>> pending_rows_;  // select_rows for the next step
  int64_t pending_trim_ = 0;                           // trim_front for the next step
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

// What the engine needs of a model that generates.
struct EngineModel {
  const tokenizers::Tokenizer* tokenizer = nullptr;  // null: prompts as ids, results without text
  SequenceSettings settings;
  int64_t vocab_size = 0;
  bool encoder_decoder = false;
  int64_t max_positions = 0;  // prompt + new tokens (encoder-decoder: the prompt); 0: unbounded
  // Note [Lanes]: the rows each engine thread decodes.
  std::vector<std::unique_ptr<DecodeRows>> lanes;
};

// One lane over `model` in this process: a RunningBatch of options.max_batch rows for a
// decoder-only model, SessionRows for the others. Unsupported for a model that cannot generate.
EngineModel engine_model(models::pipelines::TextModel& model, const ServiceOptions& options);

// Note [Lanes]
// A decoding step through pipeline stages is a round trip: while one group of rows is on
// stage 1, stage 0 would idle. So the engine runs lanes, each its own thread with its own
// rows (a pipeline group: its own caches on every stage), sharing one request queue, as
// generation over a pipeline runs at least as many groups as stages. A lane admits waiting
// requests up to an even share of all requests (waiting and running, over the lanes), so the
// lanes' batches stay alike; a lane without rows always takes one. In one process there is
// one lane: the model is one object, and one batch of all rows uses it best.
class GenerationEngine {
 public:
  // The lanes' models (and the tokenizer) must outlive the engine and be used by nothing else
  // while it runs.
  GenerationEngine(EngineModel model, const ServiceOptions& options);
  // Fails the waiting requests (Unavailable), ends the running ones as cancelled after the
  // current step, and joins the threads.
  ~GenerationEngine();

  // Checks and tokenises the request on the calling thread; InvalidArgument for a bad one,
  // Unavailable when the queue is full or the engine is closing.
  std::future<GenerateResult> submit(GenerateRequest request);
  ServiceMetrics metrics() const;
  int64_t max_positions() const { return model_.max_positions; }
  int lanes() const { return int(model_.lanes.size()); }

 private:
  void run(size_t lane);
  // Step (1) of Note [Continuous batching]; false when closing.
  bool admit(size_t lane, std::vector<std::unique_ptr<Sequence>>& running,
             std::vector<std::vector<float>>& logits);
  void decode(size_t lane, std::vector<std::unique_ptr<Sequence>>& running,
              std::vector<std::vector<float>>& logits);
  void finish(std::unique_ptr<Sequence> sequence);  // counts it, then hands out its result
  void set_running(size_t lane, int64_t rows);     // under mutex_

  EngineModel model_;
  int max_queue_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::unique_ptr<Sequence>> queue_;
  bool closing_ = false;
  ServiceMetrics metrics_;
  std::vector<int64_t> running_;     // per lane
  std::vector<std::thread> threads_;  // last: start once the rest is built
};

}  // namespace libai::service
