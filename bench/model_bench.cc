// Whole-model timings, the LiBai-Actor side of bench/run_model_bench.sh (the PyTorch +
// transformers side is bench/peer_models.py, which takes the same flags and prints the same
// JSON). One process loads one model folder, runs `--warmup` untimed passes, then `--reps`
// timed ones, and prints one JSON line per measurement on stdout (progress goes to stderr).
//
//   build/bench/model_bench --model DIR --mode forward --batch 8 --seq 128 --reps 5
//   build/bench/model_bench --model DIR --mode decode --new-tokens 128 --reps 3
//   build/bench/model_bench --model DIR --mode encode --texts FILE --encode-batch 32 --reps 3
//
// forward: Model::forward of input_ids [batch, seq] under NoGradGuard (all logits, as
//          transformers computes them); tokens/s = batch * seq / median time.
// decode:  greedy generation::generate from a fixed 8-token prompt, min = max new tokens
//          (eos suppressed), so exactly --new-tokens tokens per rep (KV cache; prefill
//          included, as in transformers' generate); tokens/s = new tokens / median time.
// encode:  pipelines::embed (tokenise, encoder, mean pooling, L2 norm) over every line of
//          --texts in batches of --encode-batch, longest first (--encode-in-order: batches
//          in file order, to measure what the length sort gains); sentences/s = lines / median.
// Every line also gives load_s, load_peak_rss_mb and loaded_rss_mb (VmHWM and VmRSS right
// after the load: the load's peak, what the model holds) and peak_rss_mb (at the end).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include "models/generation/generate.h"
#include "models/layers/linear.h"
#include "models/model.h"
#include "runtime/memory_stats.h"
#include "models/pipelines/pipelines.h"
#include "ops/ops.h"
#include "runtime/autograd.h"
#include "runtime/progress.h"
#include "runtime/threads.h"

namespace {

using namespace libai;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// CPU seconds of the whole process (all threads): under load it moves less than wall time,
// though threads that spin while waiting count too.
double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

struct Stats {
  double median = 0, min = 0, max = 0;
};

Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return {n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]), v.front(), v.back()};
}

std::string times_json(const std::vector<double>& seconds) {
  std::string s = "[";
  for (size_t i = 0; i < seconds.size(); ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%.3f", i ? ", " : "", seconds[i] * 1e3);
    s += buf;
  }
  return s + "]";
}

// The same ids on both sides (peer_models.py computes them alike).
int64_t input_id(int64_t b, int64_t s, int64_t vocab) {
  return (s * 7919 + b * 104729 + 13) % vocab;
}
// "The quick brown fox jumps over the lazy" in GPT-2's vocabulary.
const std::vector<int64_t> kPrompt = {464, 2068, 7586, 21831, 18045, 625, 262, 16931};

struct Options {
  std::string model, mode = "forward", texts;
  int64_t batch = 1, seq = 128, reps = 5, warmup = 1, new_tokens = 128, encode_batch = 32;
  int threads = 0;
  bool encode_in_order = false;
  bool no_pack = false;  // the weights left as loaded (ops::linear through OpenBLAS)
  std::string dtype = "f32";
  std::string packed_dtype = "f32";
  std::string quantize = "none";
  std::vector<std::string> quantize_keep;
  bool keep_f32_weights = false;  // LoadOptions::keep_f32_weights (no streaming packed load)

  models::LoadOptions load_options() const {
    models::LoadOptions options;
    options.pack_weights = !no_pack;
    options.dtype = dtype == "bf16" ? DType::bf16 : DType::f32;
    options.pack_dtype = packed_dtype == "bf16" ? DType::bf16 : DType::f32;
    options.quantize = ops::parse_quantization(quantize, "--quantize");
    options.quantize_keep = quantize_keep;
    options.keep_f32_weights = keep_f32_weights;
    return options;
  }
};

// The process's peak RSS and its RSS, in MB (/proc/self/status VmHWM, VmRSS), read right
// after the model loaded (Note [Streaming packed loads]: the load's peak).
double status_mb(const char* field) { return double(process_status_kb(field)) * 1024.0 / 1e6; }
double g_load_peak_rss_mb = 0, g_loaded_rss_mb = 0;
double loaded_seconds(Clock::time_point t0) {
  const double s = seconds_since(t0);
  g_load_peak_rss_mb = status_mb("VmHWM:");
  g_loaded_rss_mb = status_mb("VmRSS:");
  return s;
}

// CPU seconds of the timed reps of the last time_reps call.
std::vector<double> g_cpu_seconds;

// Runs `fn` warmup + reps times; returns the timed reps' wall seconds.
template <class Fn>
std::vector<double> time_reps(const Options& o, const std::string& what, int64_t units_per_rep,
                              const std::string& unit, Fn&& fn) {
  for (int64_t i = 0; i < o.warmup; ++i) fn();
  Progress progress(what, o.reps * units_per_rep, unit, 2.0);
  std::vector<double> seconds;
  for (int64_t i = 0; i < o.reps; ++i) {
    auto t0 = Clock::now();
    const double c0 = process_cpu_seconds();
    fn();
    seconds.push_back(seconds_since(t0));
    g_cpu_seconds.push_back(process_cpu_seconds() - c0);
    char detail[64];
    std::snprintf(detail, sizeof detail, "last rep %.1f ms", seconds.back() * 1e3);
    progress.advance(units_per_rep, detail);
  }
  return seconds;
}

void print_result(const Options& o, const std::string& shape, const std::vector<double>& seconds,
                  double units_per_rep, const std::string& rate_name, double load_s,
                  const std::string& extra) {
  Stats s = stats(seconds);
  std::printf(
      "{\"impl\": \"libai\", \"mode\": \"%s\", %s, \"dtype\": \"%s\", \"packed_dtype\": \"%s\", \"quantize\": \"%s\", \"threads\": %d, \"reps\": %lld, "
      "\"median_ms\": %.3f, \"min_ms\": %.3f, \"max_ms\": %.3f, \"cpu_ms\": %.3f, \"%s\": %.3f, "
      "\"load_s\": %.3f, \"load_peak_rss_mb\": %.1f, \"loaded_rss_mb\": %.1f, \"peak_rss_mb\": %.1f, "
      "\"times_ms\": %s%s}\n",
      o.mode.c_str(), shape.c_str(), o.dtype.c_str(), o.no_pack ? "none" : o.packed_dtype.c_str(), o.quantize.c_str(), thread_budget(Device::cpu()), (long long)o.reps,
      s.median * 1e3, s.min * 1e3, s.max * 1e3, stats(g_cpu_seconds).median * 1e3,
      rate_name.c_str(), units_per_rep / s.median, load_s, g_load_peak_rss_mb, g_loaded_rss_mb,
      status_mb("VmHWM:"), times_json(seconds).c_str(),
      extra.c_str());
  std::fflush(stdout);
}

void run_forward(const Options& o) {
  auto t0 = Clock::now();
  auto model = models::load_model(o.model, o.load_options());
  const double load_s = loaded_seconds(t0);
  const int64_t vocab = model->config().require_int("vocab_size");
  std::vector<int64_t> ids(o.batch * o.seq);
  for (int64_t b = 0; b < o.batch; ++b)
    for (int64_t s = 0; s < o.seq; ++s) ids[b * o.seq + s] = input_id(b, s, vocab);
  models::TensorMap inputs{{"input_ids", Tensor::from_vector(ids, {o.batch, o.seq})}};
  autograd::NoGradGuard no_grad;
  Tensor logits;
  auto seconds = time_reps(o, "forward", o.batch * o.seq, "tok",
                           [&] { logits = model->forward(inputs).at("logits"); });
  // A checksum of the last position's first logits, to compare with the peer's.
  Tensor last = ops::slice(ops::select(ops::select(logits, 0, 0), 0, o.seq - 1), 0, 0, 16);
  double check = 0;
  for (float x : ops::contiguous(last).to_vector<float>()) check += x;
  char shape[96], extra[64];
  std::snprintf(shape, sizeof shape, "\"batch\": %lld, \"seq\": %lld", (long long)o.batch,
                (long long)o.seq);
  std::snprintf(extra, sizeof extra, ", \"checksum\": %.5f", check);
  print_result(o, shape, seconds, double(o.batch * o.seq), "tokens_per_s", load_s, extra);
}

void run_decode(const Options& o) {
  auto t0 = Clock::now();
  auto model = models::load_model(o.model, o.load_options());
  const double load_s = loaded_seconds(t0);
  auto* lm = model->generative();
  LIBAI_CHECK(lm, o.model, ": model has no generation interface");
  models::generation::GenerationConfig config;
  config.max_new_tokens = o.new_tokens;
  config.min_new_tokens = o.new_tokens;
  config.do_sample = false;
  // eos as transformers reads it from config.json; min_new_tokens = max suppresses it on both
  // sides alike, so every rep makes exactly new_tokens tokens and the same greedy choices.
  config.eos_token_ids = model->config().get_int_list("eos_token_id");
  std::vector<int64_t> tokens;
  auto seconds = time_reps(o, "decode", o.new_tokens, "tok", [&] {
    auto out = models::generation::generate(*lm, {kPrompt}, config);
    tokens = out.at(0).at(0).tokens;
  });
  LIBAI_CHECK(int64_t(tokens.size()) == o.new_tokens, "decode: generated ", tokens.size(),
              " tokens, expected ", o.new_tokens);
  std::string extra = ", \"first_tokens\": [";
  for (size_t i = 0; i < std::min<size_t>(8, tokens.size()); ++i)
    extra += (i ? ", " : "") + std::to_string(tokens[i]);
  extra += "]";
  // What each token's products read: the packed copies (f32 copies stand for the f32 weights a
  // single row's gemv reads); the weight-read floor is this over the memory's read bandwidth.
  extra += ", \"weight_bytes\": " + std::to_string(models::packed_bytes(*model).total());
  char shape[96];
  std::snprintf(shape, sizeof shape, "\"batch\": 1, \"prompt\": %zu, \"new_tokens\": %lld",
                kPrompt.size(), (long long)o.new_tokens);
  print_result(o, shape, seconds, double(o.new_tokens), "tokens_per_s", load_s, extra);
}

void run_encode(const Options& o) {
  std::vector<std::string> texts;
  std::ifstream in(o.texts);
  LIBAI_CHECK(in, "encode: cannot read --texts ", o.texts);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) texts.push_back(line);
  LIBAI_CHECK(!texts.empty(), "encode: no sentences in ", o.texts);
  auto t0 = Clock::now();
  auto m = models::pipelines::TextModel::load(o.model, o.load_options());
  const double load_s = loaded_seconds(t0);
  std::vector<std::vector<float>> vectors;
  models::pipelines::EmbedOptions embedding;
  embedding.batch_size = size_t(o.encode_batch);
  embedding.sort_by_length = !o.encode_in_order;
  auto seconds = time_reps(o, "encode", int64_t(texts.size()), "sentence",
                           [&] { vectors = models::pipelines::embed(m, texts, embedding); });
  char shape[160], extra[64];
  std::snprintf(shape, sizeof shape,
                "\"sentences\": %zu, \"encode_batch\": %lld, \"sorted_by_length\": %s",
                texts.size(), (long long)o.encode_batch, o.encode_in_order ? "false" : "true");
  std::snprintf(extra, sizeof extra, ", \"checksum\": %.5f", double(vectors.at(0).at(0)));
  print_result(o, shape, seconds, double(texts.size()), "sentences_per_s", load_s, extra);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Whole-model timings (forward, greedy decode, sentence encoding)"};
  app.add_option("--model", o.model, "model folder (config.json, weights, tokenizer)")->required();
  app.add_option("--mode", o.mode, "forward | decode | encode")
      ->check(CLI::IsMember({"forward", "decode", "encode"}));
  app.add_option("--batch", o.batch, "forward: batch size");
  app.add_option("--seq", o.seq, "forward: tokens per sequence");
  app.add_option("--reps", o.reps, "timed repetitions")->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup, "untimed repetitions first");
  app.add_option("--new-tokens", o.new_tokens, "decode: new tokens per generation");
  app.add_option("--texts", o.texts, "encode: file of sentences, one a line");
  app.add_option("--encode-batch", o.encode_batch, "encode: sentences per forward pass");
  app.add_flag("--no-pack", o.no_pack,
               "leave the weights unpacked: every product through OpenBLAS (for comparison)");
  app.add_option("--dtype", o.dtype, "parameter and activation dtype")
      ->check(CLI::IsMember({"f32", "bf16"}));
  app.add_option("--packed-dtype", o.packed_dtype, "dtype of the packed weight copies")
      ->check(CLI::IsMember({"f32", "bf16"}));
  app.add_option("--quantize", o.quantize, "quantized packed weights (ops/packed_linear.h)");
  app.add_option("--quantize-keep", o.quantize_keep, "layers left unquantized");
  app.add_flag("--keep-f32-weights", o.keep_f32_weights,
               "keep the f32 weights of packed layers (the load holds the whole f32 model)");
  app.add_flag("--encode-in-order", o.encode_in_order,
               "encode: batch in file order instead of longest first");
  app.add_option("--threads", o.threads, "compute threads (default: all cores)");
  CLI11_PARSE(app, argc, argv);
  try {
    if (o.threads > 0) libai::set_thread_budget(libai::Device::cpu(), o.threads);
    if (o.mode == "forward") run_forward(o);
    if (o.mode == "decode") run_decode(o);
    if (o.mode == "encode") run_encode(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "model_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
