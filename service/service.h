// The runtime inside a C++ service: one object that loads a model folder, takes requests from
// any number of threads and batches them together (docs/SERVICE.md).
//
//   auto svc = libai::Service::open({.model_dir = "gpt2/"});
//   libai::GenerateRequest r{.prompt = "Hello, my name is", .max_new_tokens = 20};
//   r.on_token = [](const libai::TokenEvent& t) { std::cout << t.text; return true; };
//   libai::GenerateResult out = svc->generate(r);             // blocks; any thread
//   auto vectors = svc->embed({"A cat sits.", "A dog runs."});  // sentence models
//
// Errors are exceptions, always: every failure (a bad folder, a bad request, a full queue, a
// service shutting down) throws a libai::Error (runtime/error.h) whose kind() says which and
// whose what() is one line naming what was wrong. A cancelled request is not an error: it
// returns with finish_reason cancelled and the tokens made so far.
//
// Generation is continuously batched (Note [Continuous batching] in service/batcher.h): one
// engine thread runs decoding steps over every running sequence; a new request's prompt is
// prefilled and joins the running batch between two steps, and a finished or cancelled one
// leaves it at once, freeing its slot. Greedy results equal those of the same request made
// alone; sampled ones depend only on the request's seed.
//
// This header and what it includes are the installed API: no CAF, Cap'n Proto, UCX or
// protobuf types appear in it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

namespace libai {

struct ServiceOptions {
  std::filesystem::path model_dir;  // a Hugging Face folder (config.json, weights, tokenizer)
  int threads = 0;                  // compute threads; 0: all cores
  int max_batch = 16;               // sequences decoded together (generation)
  int max_queue = 256;              // requests waiting beyond the running ones; more: overloaded
  int embed_batch = 32;             // texts per forward pass (embed, classify)
  // The weights packed for the CPU's inference kernel (Note [Packed inference weights] in
  // models/layers/linear.h): faster, and one more copy of the linear weights in memory.
  bool pack_weights = true;
  // The packed copies in bf16: the linear and output weights rounded to bf16, half the bytes
  // read per decoded token (activations stay f32). Needs pack_weights.
  bool bf16_weights = false;
  // Quantized packed copies: "none", "int8", "int8-dynamic", "q4", "q4:GROUP[:min]"
  // (ops/packed_linear.h), but the layers `quantize_keep` names. Needs pack_weights.
  std::string quantize = "none";
  std::vector<std::string> quantize_keep;
};

// A piece of generated text, in order. `text` is the new text since the previous event (empty
// while a multi-byte character is incomplete); token_id the token that produced it.
struct TokenEvent {
  int64_t token_id = 0;
  std::string text;
};

// Stops a request from another thread: generate() returns soon after with finish_reason
// cancelled (its slot is freed between two decoding steps). Copies share one flag.
class CancelToken {
 public:
  CancelToken();
  void cancel() const;
  bool cancelled() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

struct GenerateRequest {
  std::string prompt{};             // text, through the folder's tokenizer, or
  std::vector<int64_t> prompt_ids{};  // token ids (used when not empty; no tokenizer needed)
  int max_new_tokens = 16;
  int min_new_tokens = 0;
  bool do_sample = false;  // false: greedy
  double temperature = 1.0;
  int top_k = 0;       // 0: off
  double top_p = 1.0;  // 1: off
  uint64_t seed = 0;   // sampling: the same seed, the same tokens, whatever else is running
  double repetition_penalty = 1.0;
  // Generation ends when the text contains one of these; the result's text ends before it.
  std::vector<std::string> stop{};
  // Called on the engine's thread after each new token; return false to cancel. Keep it short:
  // every running request waits for it.
  std::function<bool(const TokenEvent&)> on_token{};
  CancelToken cancel{};
};

enum class FinishReason { length, eos, stop, cancelled };
const char* to_string(FinishReason reason);  // "length", "eos", "stop", "cancelled"

struct GenerateResult {
  std::string text;                // the new text (empty without a tokenizer)
  std::vector<int64_t> token_ids;  // the new tokens
  FinishReason finish_reason = FinishReason::length;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

struct LabelScore {
  std::string label;
  double score = 0;  // softmax probability
};

struct ServiceInfo {
  std::string model_type;           // config.json's model_type
  std::string task;                 // "causal_lm", "seq2seq_lm", "embedding", "classification", ...
  bool can_generate = false, can_embed = false, can_classify = false;
  int64_t max_positions = 0;        // the longest prompt + new tokens (0: unbounded)
};

// Counters since open(), for /metrics and logs.
struct ServiceMetrics {
  int64_t requests = 0, failed = 0, cancelled = 0;  // finished requests, by outcome
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int64_t queue_depth = 0;    // waiting now
  int64_t running = 0;        // sequences in the running batch now
  int64_t decode_steps = 0;   // engine steps so far
  int64_t batched_rows = 0;   // sum over steps of the rows in the step (mean batch = this / steps)
};

class Service {
 public:
  // Loads the model; throws libai::Error (NotFound, CorruptInput, Unsupported, ...).
  static std::unique_ptr<Service> open(const ServiceOptions& options);
  virtual ~Service();  // finishes the running requests' current step, fails the waiting ones

  virtual ServiceInfo info() const = 0;
  virtual ServiceMetrics metrics() const = 0;

  // Blocks until the request finishes. Safe from any number of threads at once.
  virtual GenerateResult generate(const GenerateRequest& request) = 0;
  // The same without blocking; the future holds the result or the exception.
  virtual std::future<GenerateResult> submit(GenerateRequest request) = 0;
  // Unit-length sentence vectors (mean pooling, as sentence-transformers), one per text.
  virtual std::vector<std::vector<float>> embed(const std::vector<std::string>& texts) = 0;
  // Labels by score, best first (sequence-classification heads).
  virtual std::vector<LabelScore> classify(const std::string& text) = 0;
  // The tokens the model reads for `text` (special tokens included; for embed and classify,
  // cut at the length they truncate to), for usage reports. NotFound without a tokenizer.
  virtual int64_t count_tokens(const std::string& text) const = 0;
  // Empty while the service can serve; else why it cannot any more (a service over a cluster
  // whose job failed: a node died or hung). Every request then fails with that error.
  virtual std::string failure() const { return {}; }

 protected:
  Service() = default;
};

}  // namespace libai
