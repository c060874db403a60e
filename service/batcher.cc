#include "service/batcher.h"

#include <algorithm>
#include <cmath>

#include "ops/ops.h"
#include "runtime/autograd.h"
#include "runtime/error.h"

namespace libai::service {

namespace gen = models::generation;

namespace {

// Logits [rows, vocab] (any float dtype) as one f32 vector per row.
std::vector<std::vector<float>> split_rows(const Tensor& logits) {
  Tensor f32 = logits;
  if (logits.dtype() != DType::f32) {
    f32 = Tensor::empty(logits.shape());
    f32.copy_from(logits);
  }
  const int64_t rows = f32.size(0), vocab = f32.size(1);
  const std::vector<float> all = ops::contiguous(f32).to_vector<float>();
  std::vector<std::vector<float>> out(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    out[size_t(r)].assign(all.begin() + r * vocab, all.begin() + (r + 1) * vocab);
  return out;
}

}  // namespace

// ---- RunningBatch ----------------------------------------------------------------------

RunningBatch::RunningBatch(StepFunction step, int64_t max_rows, std::function<void()> release)
    : step_(std::move(step)), max_rows_(max_rows), release_(std::move(release)) {}

RunningBatch::RunningBatch(models::DecoderLm& model, int64_t max_rows) : max_rows_(max_rows) {
  auto state = std::make_shared<std::unique_ptr<models::DecodeState>>(model.new_decode_state());
  step_ = [&model, state](const models::TensorMap& in) {
    return model.decode_step(in, **state).at("logits");
  };
  release_ = [&model, state] { *state = model.new_decode_state(); };
}

Tensor RunningBatch::keep_tensor() const {
  Tensor keep = Tensor::empty({rows(), length_}, DType::boolean);
  std::copy(keep_.begin(), keep_.end(), keep.data<bool>());
  return keep;
}

void RunningBatch::take_pending(models::TensorMap& inputs) {
  if (pending_rows_) {
    const auto n = int64_t(pending_rows_->size());
    inputs["select_rows"] = Tensor::from_vector(*pending_rows_, {n});
  }
  if (pending_trim_ > 0) inputs["trim_front"] = Tensor::from_vector(std::vector<int64_t>{pending_trim_}, {});
}

std::vector<std::vector<float>> RunningBatch::add(const std::vector<std::vector<int64_t>>& prompts) {
  autograd::NoGradGuard no_grad;
  // The new rows run over caches of their own, joined after the running rows' once computed
  // (join_rows): a failure leaves the running batch as it was, row changes still pending.
  models::CausalInputs inputs(prompts, /*pad_id=*/0);  // pads are masked: any id will do
  models::TensorMap in = inputs.prefill();
  in["join_rows"] = Tensor::from_vector(std::vector<int64_t>{1}, {});
  take_pending(in);
  const Tensor logits = step_(in);
  pending_rows_.reset();
  pending_trim_ = 0;

  // Align both sides on the right (Note [Continuous batching]), as join_rows did the caches.
  const int64_t added = int64_t(prompts.size()), n = inputs.length();
  const int64_t length = std::max(length_, n);
  const int64_t pad_old = length - length_, pad_new = length - n;
  std::vector<uint8_t> merged;
  merged.reserve(size_t((rows() + added) * length));
  for (int64_t r = 0; r < rows(); ++r) {
    merged.insert(merged.end(), size_t(pad_old), 0);
    merged.insert(merged.end(), keep_.begin() + r * length_, keep_.begin() + (r + 1) * length_);
  }
  for (int64_t r = 0; r < added; ++r) {
    const int64_t size = int64_t(prompts[size_t(r)].size());
    merged.insert(merged.end(), size_t(pad_new + n - size), 0);
    merged.insert(merged.end(), size_t(size), 1);
  }
  keep_ = std::move(merged);
  length_ = length;
  for (const auto& p : prompts) last_position_.push_back(int64_t(p.size()) - 1);
  return split_rows(logits);
}

std::vector<std::vector<float>> RunningBatch::step(const std::vector<int64_t>& tokens) {
  autograd::NoGradGuard no_grad;
  LIBAI_ASSERT(int64_t(tokens.size()) == rows(), "a token per running row");
  std::vector<uint8_t> keep(size_t(rows() * (length_ + 1)));
  for (int64_t r = 0; r < rows(); ++r) {
    std::copy_n(keep_.begin() + r * length_, length_, keep.begin() + r * (length_ + 1));
    keep[size_t(r * (length_ + 1) + length_)] = 1;
    ++last_position_[size_t(r)];
  }
  keep_ = std::move(keep);
  ++length_;
  models::TensorMap in{{"input_ids", Tensor::from_vector(tokens, {rows(), 1})},
                       {"position_ids", Tensor::from_vector(last_position_, {rows(), 1})},
                       {"attention_mask", keep_tensor()}};
  take_pending(in);
  pending_rows_.reset();
  pending_trim_ = 0;
  return split_rows(step_(in));
}

void RunningBatch::keep_rows(const std::vector<int64_t>& kept) {
  if (kept.empty()) {
    keep_.clear();
    last_position_.clear();
    length_ = 0;
    pending_trim_ = 0;
    if (release_) {
      release_();
      pending_rows_.reset();
    } else {
      pending_rows_ = std::vector<int64_t>{};
    }
    return;
  }
  if (int64_t(kept.size()) != rows()) {
    std::vector<uint8_t> keep;
    std::vector<int64_t> last;
    for (int64_t r : kept) {
      keep.insert(keep.end(), keep_.begin() + r * length_, keep_.begin() + (r + 1) * length_);
      last.push_back(last_position_[size_t(r)]);
    }
    keep_ = std::move(keep);
    last_position_ = std::move(last);
    // Rows left before: compose with the selection not sent yet.
    std::vector<int64_t> select = kept;
    if (pending_rows_)
      for (auto& r : select) r = (*pending_rows_)[size_t(r)];
    pending_rows_ = std::move(select);
  }
  // Columns that are padding in every row: a row's real tokens are its rightmost columns.
  int64_t unused = length_;
  for (int64_t r = 0; r < rows(); ++r) {
    int64_t first = 0;
    while (first < length_ && !keep_[size_t(r * length_ + first)]) ++first;
    unused = std::min(unused, first);
  }
  if (unused == 0) return;
  std::vector<uint8_t> keep;
  for (int64_t r = 0; r < rows(); ++r)
    keep.insert(keep.end(), keep_.begin() + r * length_ + unused, keep_.begin() + (r + 1) * length_);
  keep_ = std::move(keep);
  length_ -= unused;
  pending_trim_ += unused;
}

// ---- SessionRows -----------------------------------------------------------------------

std::vector<std::vector<float>> SessionRows::add(const std::vector<std::vector<int64_t>>& prompts) {
  LIBAI_ASSERT(!session_ && prompts.size() == 1, "one request at a time");
  autograd::NoGradGuard no_grad;
  session_ = model_.start(prompts);
  return split_rows(session_->logits());
}

std::vector<std::vector<float>> SessionRows::step(const std::vector<int64_t>& tokens) {
  autograd::NoGradGuard no_grad;
  session_->append(tokens);
  return split_rows(session_->logits());
}

void SessionRows::keep_rows(const std::vector<int64_t>& kept) {
  if (kept.empty()) session_.reset();
}

// ---- GenerationEngine ------------------------------------------------------------------

namespace {

// config.json's limit on positions (GPT-2's n_positions, Llama's max_position_embeddings);
// 0 when the model has none (T5's relative positions).
int64_t max_positions_of(const nlohmann::json& config) {
  for (const char* key : {"n_positions", "max_position_embeddings"})
    if (config.contains(key) && config[key].is_number_integer()) return config[key].get<int64_t>();
  return 0;
}

void check_request(const GenerateRequest& r) {
  LIBAI_CHECK(r.max_new_tokens >= 1, "GenerateRequest.max_new_tokens must be >= 1, got ",
              r.max_new_tokens);
  LIBAI_CHECK(r.min_new_tokens >= 0, "GenerateRequest.min_new_tokens must be >= 0, got ",
              r.min_new_tokens);
  LIBAI_CHECK(r.repetition_penalty > 0 && std::isfinite(r.repetition_penalty),
              "GenerateRequest.repetition_penalty must be > 0 (1 = off), got ", r.repetition_penalty);
  if (!r.do_sample) return;
  LIBAI_CHECK(r.temperature > 0 && std::isfinite(r.temperature),
              "GenerateRequest.temperature must be > 0 when do_sample, got ", r.temperature);
  LIBAI_CHECK(r.top_k >= 0, "GenerateRequest.top_k must be >= 0 (0 = off), got ", r.top_k);
  LIBAI_CHECK(r.top_p > 0 && r.top_p <= 1, "GenerateRequest.top_p must be in (0, 1], got ", r.top_p);
}

}  // namespace

EngineModel engine_model(models::pipelines::TextModel& model, const ServiceOptions& options) {
  auto* lm = model.model().generative();
  LIBAI_CHECK_KIND(Unsupported, lm != nullptr, model.folder().string(), ": a ",
                   models::task_name(model.model().task()), " model cannot generate text");
  LIBAI_CHECK(options.max_batch >= 1, "ServiceOptions.max_batch must be >= 1, got ", options.max_batch);
  EngineModel out;
  out.tokenizer = model.has_tokenizer() ? &model.tokenizer() : nullptr;
  gen::GenerationConfig config;
  models::pipelines::complete_generation_config(model, config);
  out.settings.eos_token_ids = config.eos_token_ids;
  out.encoder_decoder = lm->is_encoder_decoder();
  if (out.encoder_decoder) out.settings.decoder_start_token_id = lm->decoder_start_token_id();
  out.vocab_size = lm->vocab_size();
  out.max_positions = max_positions_of(model.config_json());
  if (auto* decoder = dynamic_cast<models::DecoderLm*>(&model.model()))
    out.lanes.push_back(std::make_unique<RunningBatch>(*decoder, options.max_batch));
  else
    out.lanes.push_back(std::make_unique<SessionRows>(*lm));
  return out;
}

GenerationEngine::GenerationEngine(EngineModel model, const ServiceOptions& options)
    : model_(std::move(model)), max_queue_(options.max_queue) {
  LIBAI_CHECK(options.max_batch >= 1, "ServiceOptions.max_batch must be >= 1, got ", options.max_batch);
  LIBAI_CHECK(options.max_queue >= 0, "ServiceOptions.max_queue must be >= 0, got ", options.max_queue);
  LIBAI_CHECK(!model_.lanes.empty(), "a generation engine needs at least one lane");
  running_.assign(model_.lanes.size(), 0);
  for (size_t lane = 0; lane < model_.lanes.size(); ++lane)
    threads_.emplace_back([this, lane] { run(lane); });
}

GenerationEngine::~GenerationEngine() {
  {
    std::lock_guard lock(mutex_);
    closing_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

std::future<GenerateResult> GenerationEngine::submit(GenerateRequest request) {
  check_request(request);
  std::vector<int64_t> prompt = request.prompt_ids;
  if (prompt.empty()) {
    LIBAI_CHECK(!request.prompt.empty(), "GenerateRequest: the prompt is empty");
    LIBAI_CHECK_KIND(NotFound, model_.tokenizer != nullptr,
                     "GenerateRequest: a text prompt needs the model folder's tokenizer; give "
                     "prompt_ids");
    const auto encoding = model_.tokenizer->encode(request.prompt);
    prompt.assign(encoding.ids.begin(), encoding.ids.end());
    LIBAI_CHECK(!prompt.empty(), "GenerateRequest: the prompt \"", request.prompt,
                "\" encodes to no tokens");
  }
  const int64_t vocab = model_.vocab_size;
  for (size_t i = 0; i < prompt.size(); ++i)
    LIBAI_CHECK(prompt[i] >= 0 && prompt[i] < vocab, "GenerateRequest: prompt token ", i, " is ",
                prompt[i], ", outside the vocabulary [0, ", vocab, ")");
  if (model_.max_positions > 0) {
    // A decoder-only model's positions hold the prompt and the new tokens; an encoder's the
    // prompt.
    const int64_t needed =
        int64_t(prompt.size()) + (model_.encoder_decoder ? 0 : request.max_new_tokens);
    LIBAI_CHECK(needed <= model_.max_positions, "GenerateRequest: the prompt's ", prompt.size(),
                " tokens", model_.encoder_decoder ? "" : " + max_new_tokens ",
                model_.encoder_decoder ? std::string() : std::to_string(request.max_new_tokens),
                " exceed the model's ", model_.max_positions, " positions");
  }
  std::promise<GenerateResult> promise;
  auto future = promise.get_future();
  auto sequence = std::make_unique<Sequence>(std::move(request), std::move(prompt),
                                             model_.settings, model_.tokenizer, std::move(promise));
  {
    std::lock_guard lock(mutex_);
    LIBAI_CHECK_KIND(Unavailable, !closing_, "the service is closing");
    LIBAI_CHECK_KIND(Unavailable, int64_t(queue_.size()) < max_queue_,
                     "the service is overloaded: ", queue_.size(),
                     " requests are waiting (ServiceOptions.max_queue = ", max_queue_,
                     "); try again later");
    queue_.push_back(std::move(sequence));
    metrics_.queue_depth = int64_t(queue_.size());
  }
  wake_.notify_all();  // an idle lane should take it, not one that is mid-step
  return future;
}

ServiceMetrics GenerationEngine::metrics() const {
  std::lock_guard lock(mutex_);
  return metrics_;
}

void GenerationEngine::finish(std::unique_ptr<Sequence> sequence) {
  {
    std::lock_guard lock(mutex_);
    ++metrics_.requests;
    if (sequence->failed()) ++metrics_.failed;
    else if (sequence->result().finish_reason == FinishReason::cancelled) ++metrics_.cancelled;
    metrics_.prompt_tokens += int64_t(sequence->prompt().size());
    metrics_.completion_tokens += sequence->result().completion_tokens;
  }
  sequence->deliver();
}

void GenerationEngine::set_running(size_t lane, int64_t rows) {
  running_[lane] = rows;
  metrics_.running = 0;
  for (int64_t r : running_) metrics_.running += r;
}

bool GenerationEngine::admit(size_t lane, std::vector<std::unique_ptr<Sequence>>& running,
                             std::vector<std::vector<float>>& logits) {
  DecodeRows& rows = *model_.lanes[lane];
  std::vector<std::unique_ptr<Sequence>> joining, cancelled;
  {
    std::unique_lock lock(mutex_);
    wake_.wait(lock, [&] { return closing_ || !queue_.empty() || !running.empty(); });
    if (closing_) return false;
    // Note [Lanes]: up to an even share of every request, and one at least for an idle lane.
    const auto lanes = int64_t(running_.size());
    const int64_t share = (int64_t(queue_.size()) + metrics_.running + lanes - 1) / lanes;
    const int64_t room = rows.max_rows() - int64_t(running.size());
    const int64_t take = std::min(room, std::max<int64_t>(share - int64_t(running.size()),
                                                          running.empty() ? 1 : 0));
    while (!queue_.empty() && int64_t(joining.size()) < take) {
      auto sequence = std::move(queue_.front());
      queue_.pop_front();
      (sequence->cancel_requested() ? cancelled : joining).push_back(std::move(sequence));
    }
    metrics_.queue_depth = int64_t(queue_.size());
  }
  for (auto& s : cancelled) {
    s->cancel();
    finish(std::move(s));
  }
  if (joining.empty()) return true;
  std::vector<std::vector<int64_t>> prompts;
  for (const auto& s : joining) prompts.push_back(s->prompt());
  try {
    auto added = rows.add(prompts);
    for (auto& row : added) logits.push_back(std::move(row));
  } catch (...) {
    for (auto& s : joining) {
      s->fail(std::current_exception());
      finish(std::move(s));
    }
    return true;
  }
  for (auto& s : joining) running.push_back(std::move(s));
  std::lock_guard lock(mutex_);
  set_running(lane, int64_t(running.size()));
  return true;
}

void GenerationEngine::decode(size_t lane, std::vector<std::unique_ptr<Sequence>>& running,
                              std::vector<std::vector<float>>& logits) {
  DecodeRows& rows = *model_.lanes[lane];
  std::vector<int64_t> kept, tokens;
  std::vector<std::unique_ptr<Sequence>> still, done;
  for (size_t r = 0; r < running.size(); ++r) {
    auto& s = running[r];
    int64_t token = 0;
    try {
      if (s->cancel_requested()) {
        s->cancel();
      } else {
        token = s->choose(logits[r]);
        s->accept(token);
      }
    } catch (...) {  // an on_token callback threw: that request fails with its exception
      s->fail(std::current_exception());
    }
    if (s->finished()) {
      done.push_back(std::move(s));
    } else {
      kept.push_back(int64_t(r));
      tokens.push_back(token);
      still.push_back(std::move(s));
    }
  }
  running = std::move(still);
  if (!done.empty()) rows.keep_rows(kept);
  {
    std::lock_guard lock(mutex_);
    set_running(lane, int64_t(running.size()));
  }
  for (auto& s : done) finish(std::move(s));
  logits.clear();
  if (running.empty()) return;
  try {
    logits = rows.step(tokens);
  } catch (...) {  // the model failed mid-batch: every running request fails with it
    for (auto& s : running) {
      s->fail(std::current_exception());
      finish(std::move(s));
    }
    running.clear();
    rows.keep_rows({});
    std::lock_guard lock(mutex_);
    set_running(lane, 0);
    return;
  }
  std::lock_guard lock(mutex_);
  ++metrics_.decode_steps;
  metrics_.batched_rows += int64_t(running.size());
}

void GenerationEngine::run(size_t lane) {
  std::vector<std::unique_ptr<Sequence>> running;
  std::vector<std::vector<float>> logits;  // the next-token logits of each running row
  while (admit(lane, running, logits)) decode(lane, running, logits);
  // Closing: the running requests end as cancelled with what they made, the waiting fail.
  for (auto& s : running) {
    s->cancel();
    finish(std::move(s));
  }
  std::deque<std::unique_ptr<Sequence>> waiting;
  {
    std::lock_guard lock(mutex_);
    waiting.swap(queue_);
    metrics_.queue_depth = 0;
    set_running(lane, 0);
  }
  for (auto& s : waiting) {
    s->fail(std::make_exception_ptr(
        Unavailable("the service closed before the request started")));
    finish(std::move(s));
  }
}

}  // namespace libai::service
