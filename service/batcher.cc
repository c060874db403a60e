#include "service/batcher.h"

#include <algorithm>
#include <cmath>

#include "ops/ops.h"
#include "runtime/autograd.h"
#include "runtime/error.h"

namespace libai::service {

namespace gen = models::generation;
using models::KVCache;

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

// A cache holding `keys` and `values` ([batch, kv_heads, length, d]); KVCache keeps room to
// grow by doubling.
KVCache cache_of(const Tensor& keys, const Tensor& values) {
  KVCache out;
  out.append(keys, values);
  return out;
}

// n zero columns in front of the cached ones (masked as padding by the caller).
KVCache padded_front(const KVCache& cache, int64_t n) {
  if (n == 0 || cache.empty()) return cache;
  Shape shape = cache.keys().shape();
  shape[2] = n;
  const Tensor zeros = Tensor::zeros(shape, cache.keys().dtype(), cache.keys().device());
  return cache_of(ops::cat({zeros, cache.keys()}, 2), ops::cat({zeros, cache.values()}, 2));
}

KVCache without_front(const KVCache& cache, int64_t n) {
  if (n == 0 || cache.empty()) return cache;
  const int64_t length = cache.length();
  return cache_of(ops::slice(cache.keys(), 2, n, length), ops::slice(cache.values(), 2, n, length));
}

}  // namespace

// ---- RunningBatch ----------------------------------------------------------------------

RunningBatch::RunningBatch(models::DecoderLm& model, int64_t max_rows)
    : model_(model), max_rows_(max_rows), caches_(size_t(model.num_layers())) {}

Tensor RunningBatch::keep_tensor() const {
  Tensor keep = Tensor::empty({rows(), length_}, DType::boolean);
  std::copy(keep_.begin(), keep_.end(), keep.data<bool>());
  return keep;
}

std::vector<std::vector<float>> RunningBatch::add(const std::vector<std::vector<int64_t>>& prompts) {
  autograd::NoGradGuard no_grad;
  // The new rows alone first: a failure leaves the running batch as it was.
  models::CausalInputs inputs(prompts, /*pad_id=*/0);  // pads are masked: any id will do
  const auto in = inputs.prefill();
  std::vector<models::LayerCache> fresh(caches_.size());
  const Tensor logits = model_.causal_step(
      {in.at("input_ids"), in.at("position_ids"), in.at("attention_mask"), &fresh});
  const int64_t added = int64_t(prompts.size()), n = inputs.length();
  std::vector<uint8_t> keep(size_t(added * n), 0);
  for (int64_t r = 0; r < added; ++r) {
    const int64_t size = int64_t(prompts[r].size());
    std::fill_n(keep.begin() + r * n + (n - size), size, 1);
  }

  // Align both sides on the right (Note [Continuous batching]), then stack the rows.
  const int64_t length = std::max(length_, n);
  const int64_t pad_old = rows() > 0 ? length - length_ : 0, pad_new = length - n;
  for (size_t l = 0; l < caches_.size(); ++l) {
    if (rows() == 0) {
      caches_[l] = std::move(fresh[l]);
      continue;
    }
    const KVCache old = padded_front(caches_[l].self, pad_old);
    const KVCache joined = padded_front(fresh[l].self, pad_new);
    caches_[l].self = cache_of(ops::cat({old.keys(), joined.keys()}, 0),
                               ops::cat({old.values(), joined.values()}, 0));
  }
  std::vector<uint8_t> merged;
  merged.reserve(size_t((rows() + added) * length));
  for (int64_t r = 0; r < rows(); ++r) {
    merged.insert(merged.end(), size_t(pad_old), 0);
    merged.insert(merged.end(), keep_.begin() + r * length_, keep_.begin() + (r + 1) * length_);
  }
  for (int64_t r = 0; r < added; ++r) {
    merged.insert(merged.end(), size_t(pad_new), 0);
    merged.insert(merged.end(), keep.begin() + r * n, keep.begin() + (r + 1) * n);
  }
  keep_ = std::move(merged);
  length_ = rows() > 0 ? length : n;
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
  const Tensor logits =
      model_.causal_step({Tensor::from_vector(tokens, {rows(), 1}),
                          Tensor::from_vector(last_position_, {rows(), 1}), keep_tensor(), &caches_});
  return split_rows(logits);
}

void RunningBatch::keep_rows(const std::vector<int64_t>& kept) {
  if (kept.empty()) {
    caches_.assign(caches_.size(), models::LayerCache{});
    keep_.clear();
    last_position_.clear();
    length_ = 0;
    return;
  }
  if (int64_t(kept.size()) != rows()) {
    const Tensor index = Tensor::from_vector(kept);
    for (auto& c : caches_) c.self.select_rows(index);
    std::vector<uint8_t> keep;
    std::vector<int64_t> last;
    for (int64_t r : kept) {
      keep.insert(keep.end(), keep_.begin() + r * length_, keep_.begin() + (r + 1) * length_);
      last.push_back(last_position_[size_t(r)]);
    }
    keep_ = std::move(keep);
    last_position_ = std::move(last);
  }
  // Columns that are padding in every row: a row's real tokens are its rightmost columns.
  int64_t unused = length_;
  for (int64_t r = 0; r < rows(); ++r) {
    int64_t first = 0;
    while (first < length_ && !keep_[size_t(r * length_ + first)]) ++first;
    unused = std::min(unused, first);
  }
  if (unused == 0) return;
  for (auto& c : caches_) c.self = without_front(c.self, unused);
  std::vector<uint8_t> keep;
  for (int64_t r = 0; r < rows(); ++r)
    keep.insert(keep.end(), keep_.begin() + r * length_ + unused, keep_.begin() + (r + 1) * length_);
  keep_ = std::move(keep);
  length_ -= unused;
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

GenerationEngine::GenerationEngine(models::pipelines::TextModel& model, const ServiceOptions& options)
    : model_(model),
      lm_([&]() -> gen::GenerativeModel& {
        auto* lm = model.model().generative();
        LIBAI_CHECK_KIND(Unsupported, lm != nullptr, model.folder().string(), ": a ",
                         models::task_name(model.model().task()), " model cannot generate text");
        return *lm;
      }()),
      max_queue_(options.max_queue) {
  LIBAI_CHECK(options.max_batch >= 1, "ServiceOptions.max_batch must be >= 1, got ", options.max_batch);
  LIBAI_CHECK(options.max_queue >= 0, "ServiceOptions.max_queue must be >= 0, got ", options.max_queue);
  if (auto* decoder = dynamic_cast<models::DecoderLm*>(&model.model()))
    rows_ = std::make_unique<RunningBatch>(*decoder, options.max_batch);
  else
    rows_ = std::make_unique<SessionRows>(lm_);
  gen::GenerationConfig config;
  models::pipelines::complete_generation_config(model, config);
  settings_.eos_token_ids = config.eos_token_ids;
  if (lm_.is_encoder_decoder()) settings_.decoder_start_token_id = lm_.decoder_start_token_id();
  max_positions_ = max_positions_of(model.config_json());
  thread_ = std::thread([this] { run(); });
}

GenerationEngine::~GenerationEngine() {
  {
    std::lock_guard lock(mutex_);
    closing_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::future<GenerateResult> GenerationEngine::submit(GenerateRequest request) {
  check_request(request);
  std::vector<int64_t> prompt = request.prompt_ids;
  if (prompt.empty()) {
    LIBAI_CHECK(!request.prompt.empty(), "GenerateRequest: the prompt is empty");
    const auto encoding = model_.tokenizer().encode(request.prompt);
    prompt.assign(encoding.ids.begin(), encoding.ids.end());
    LIBAI_CHECK(!prompt.empty(), "GenerateRequest: the prompt \"", request.prompt,
                "\" encodes to no tokens");
  }
  const int64_t vocab = lm_.vocab_size();
  for (size_t i = 0; i < prompt.size(); ++i)
    LIBAI_CHECK(prompt[i] >= 0 && prompt[i] < vocab, "GenerateRequest: prompt token ", i, " is ",
                prompt[i], ", outside the vocabulary [0, ", vocab, ")");
  if (max_positions_ > 0) {
    // A decoder-only model's positions hold the prompt and the new tokens; an encoder's the
    // prompt.
    const int64_t needed =
        int64_t(prompt.size()) + (lm_.is_encoder_decoder() ? 0 : request.max_new_tokens);
    LIBAI_CHECK(needed <= max_positions_, "GenerateRequest: the prompt's ", prompt.size(),
                " tokens", lm_.is_encoder_decoder() ? "" : " + max_new_tokens ",
                lm_.is_encoder_decoder() ? std::string() : std::to_string(request.max_new_tokens),
                " exceed the model's ", max_positions_, " positions");
  }
  std::promise<GenerateResult> promise;
  auto future = promise.get_future();
  const tokenizers::Tokenizer* tokenizer = model_.has_tokenizer() ? &model_.tokenizer() : nullptr;
  auto sequence = std::make_unique<Sequence>(std::move(request), std::move(prompt), settings_,
                                             tokenizer, std::move(promise));
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
  wake_.notify_one();
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

bool GenerationEngine::admit(std::vector<std::unique_ptr<Sequence>>& running,
                             std::vector<std::vector<float>>& logits) {
  std::vector<std::unique_ptr<Sequence>> joining, cancelled;
  {
    std::unique_lock lock(mutex_);
    wake_.wait(lock, [&] { return closing_ || !queue_.empty() || !running.empty(); });
    if (closing_) return false;
    while (!queue_.empty() && int64_t(running.size() + joining.size()) < rows_->max_rows()) {
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
    auto added = rows_->add(prompts);
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
  metrics_.running = int64_t(running.size());
  return true;
}

void GenerationEngine::decode(std::vector<std::unique_ptr<Sequence>>& running,
                              std::vector<std::vector<float>>& logits) {
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
  if (!done.empty()) rows_->keep_rows(kept);
  {
    std::lock_guard lock(mutex_);
    metrics_.running = int64_t(running.size());
  }
  for (auto& s : done) finish(std::move(s));
  logits.clear();
  if (running.empty()) return;
  try {
    logits = rows_->step(tokens);
  } catch (...) {  // the model failed mid-batch: every running request fails with it
    for (auto& s : running) {
      s->fail(std::current_exception());
      finish(std::move(s));
    }
    running.clear();
    rows_->keep_rows({});
    std::lock_guard lock(mutex_);
    metrics_.running = 0;
    return;
  }
  std::lock_guard lock(mutex_);
  ++metrics_.decode_steps;
  metrics_.batched_rows += int64_t(running.size());
}

void GenerationEngine::run() {
  std::vector<std::unique_ptr<Sequence>> running;
  std::vector<std::vector<float>> logits;  // the next-token logits of each running row
  while (admit(running, logits)) decode(running, logits);
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
    metrics_.running = 0;
  }
  for (auto& s : waiting) {
    s->fail(std::make_exception_ptr(
        Unavailable("the service closed before the request started")));
    finish(std::move(s));
  }
}

}  // namespace libai::service
