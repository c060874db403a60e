// The continuous-batching step of the service (service/batcher.h's RunningBatch over the
// model's decode_step) profiled by rows: the time of one decoding step at R rows against one
// row and against the floor of reading every weight once (the parameters' bytes at the
// bandwidth of a copy measured in the same run, on the same threads); and what a new row's
// join (its prefill plus the caches' copy into the running batch) and a row's leaving (the
// selection and trim sent with the next step) cost over a plain prefill and a plain step.
// Beside them, the step's GEMMs alone at R rows (GPT-2 small's four weight shapes, each layer):
// ours (ops::linear, Note [Few-row GEMM]) against OpenBLAS's sgemm on the same operands.
//
//   build/bench/bench_batched_step --model DIR [--threads 2] [--rows 1,2,4,8,16,32]
//                                  [--prompt 16] [--context 32] [--reps 9] [--steps-only 1]
//
// --steps-only 1 times the steps alone (for a profiler).
//
// One JSON line per row count on stdout; progress on stderr.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <cblas.h>

#include "models/decoder_lm.h"
#include "ops/matmul.h"
#include "runtime/rng.h"
#include "models/pipelines/pipelines.h"
#include "runtime/autograd.h"
#include "runtime/threads.h"
#include "service/batcher.h"

namespace {

using namespace libai;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

std::vector<int64_t> prompt(int64_t n, int64_t seed, int64_t vocab) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < n; ++i) ids.push_back(1 + (seed * 131 + i * 17) % (vocab - 1));
  return ids;
}

// GB/s of copying `bytes` (read + write counted once each) split over the thread budget,
// the best of `reps`.
double copy_bandwidth(int64_t bytes, int reps) {
  std::vector<char> a(size_t(bytes), 1), b(size_t(bytes), 0);
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t = Clock::now();
    parallel_for(0, bytes, 1 << 20, [&](int64_t begin, int64_t end) {
      std::memcpy(b.data() + begin, a.data() + begin, size_t(end - begin));
    });
    best = std::min(best, seconds_since(t));
  }
  return 2.0 * double(bytes) / best * 1e-9;
}

// Milliseconds of one pass over a layer's four weight matrices (x [rows, k] times W [n, k]ᵀ)
// times `layers`: ours and sgemm's, the fastest of `reps`.
std::pair<double, double> layer_gemms_ms(int64_t rows, int64_t hidden, int64_t layers, int reps) {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {3 * hidden, hidden}, {hidden, hidden}, {4 * hidden, hidden}, {hidden, 4 * hidden}};
  double ours = 0, blas = 0;
  for (auto [n, k] : shapes) {
    Tensor x = Tensor::empty({rows, k}), w = Tensor::empty({n, k}), y = Tensor::empty({rows, n});
    init_uniform(x, RngKey{1, 1}, -1.0, 1.0);
    init_uniform(w, RngKey{2, 1}, -1.0, 1.0);
    double best_ours = 1e30, best_blas = 1e30;
    for (int r = 0; r < reps; ++r) {
      auto t = Clock::now();
      Tensor out = ops::linear(x, w);
      best_ours = std::min(best_ours, seconds_since(t));
      t = Clock::now();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blasint(rows), blasint(n), blasint(k),
                  1.0f, x.data<float>(), blasint(k), w.data<float>(), blasint(k), 0.0f,
                  y.data<float>(), blasint(n));
      best_blas = std::min(best_blas, seconds_since(t));
    }
    ours += best_ours;
    blas += best_blas;
  }
  return {ours * double(layers) * 1e3, blas * double(layers) * 1e3};
}

}  // namespace

int main(int argc, char** argv) {
  std::string folder;
  int threads = 2, reps = 9;
  bool steps_only = false;
  int64_t prompt_tokens = 16, context = 32;
  std::vector<int64_t> row_counts = {1, 2, 4, 8, 16, 32};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--model") folder = value;
    else if (flag == "--threads") threads = std::stoi(value);
    else if (flag == "--reps") reps = std::stoi(value);
    else if (flag == "--steps-only") steps_only = value == "1";
    else if (flag == "--prompt") prompt_tokens = std::stoll(value);
    else if (flag == "--context") context = std::stoll(value);
    else if (flag == "--rows") {
      row_counts.clear();
      for (size_t at = 0; at < value.size();) {
        const size_t comma = value.find(',', at);
        row_counts.push_back(std::stoll(value.substr(at, comma - at)));
        at = comma == std::string::npos ? value.size() : comma + 1;
      }
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (folder.empty() || context < prompt_tokens) {
    std::fprintf(stderr, "usage: %s --model DIR [--threads N] [--rows 1,8] [--prompt 16] "
                         "[--context 32] [--reps 9]\n", argv[0]);
    return 2;
  }
  set_thread_budget(Device::cpu(), threads);
  autograd::NoGradGuard no_grad;
  auto m = models::pipelines::TextModel::load(folder);
  auto* decoder = dynamic_cast<models::DecoderLm*>(&m.model());
  if (decoder == nullptr) {
    std::fprintf(stderr, "%s: not a decoder-only model\n", folder.c_str());
    return 2;
  }
  const int64_t vocab = m.model().config().get_int("vocab_size", 2);
  int64_t weight_bytes = 0;
  for (auto& [name, p] : m.model().named_parameters()) weight_bytes += int64_t(p->nbytes());
  const double gbs = copy_bandwidth(std::max<int64_t>(weight_bytes, 64 << 20), 5);
  const double floor_ms = double(weight_bytes) / (gbs * 1e9) * 1e3;  // read once
  std::fprintf(stderr, "weights %.1f MB, copy %.1f GB/s: weight-read floor %.2f ms per step\n",
               weight_bytes / 1e6, gbs, floor_ms);

  double one_row_ms = 0;
  for (size_t k = 0; k < row_counts.size(); ++k) {
    const int64_t rows = row_counts[k];
    const auto t0 = Clock::now();
    // R rows prefilled together, stepped to `context` columns.
    service::RunningBatch batch(*decoder, rows + 1);
    std::vector<std::vector<int64_t>> prompts;
    for (int64_t r = 0; r < rows; ++r) prompts.push_back(prompt(prompt_tokens, r, vocab));
    batch.add(prompts);
    std::vector<int64_t> tokens(size_t(rows), 3);
    while (batch.length() < context) batch.step(tokens);
    std::vector<double> step;
    for (int i = 0; i < reps; ++i) {
      const auto t = Clock::now();
      batch.step(tokens);
      step.push_back(seconds_since(t));
    }
    if (steps_only) {
      std::printf("{\"rows\": %lld, \"step_ms\": %.3f}\n", static_cast<long long>(rows), median(step) * 1e3);
      continue;
    }
    // A new row joining: prefill + join into R rows, against its prefill alone.
    std::vector<double> join, alone;
    for (int i = 0; i < reps; ++i) {
      service::RunningBatch empty(*decoder, 1);
      auto t = Clock::now();
      empty.add({prompt(prompt_tokens, 1000 + i, vocab)});
      alone.push_back(seconds_since(t));
      t = Clock::now();
      batch.add({prompt(prompt_tokens, 1000 + i, vocab)});
      join.push_back(seconds_since(t));
      // It leaves again (the last row): its selection rides on the next step, timed apart.
      std::vector<int64_t> kept;
      for (int64_t r = 0; r < rows; ++r) kept.push_back(r);
      batch.keep_rows(kept);
      batch.step(tokens);
    }
    // A row leaving: the selection of R-1 of R rows (and a trim when it was the longest) sent
    // with the next step, against a plain step at R-1 rows.
    double leave_ms = 0;
    if (rows > 1) {
      std::vector<double> after, plain;
      for (int i = 0; i < reps; ++i) {
        batch.add({prompt(context + 4, 2000 + i, vocab)});  // the longest row
        std::vector<int64_t> tok(size_t(rows + 1), 3);
        batch.step(tok);
        std::vector<int64_t> kept;
        for (int64_t r = 0; r < rows; ++r) kept.push_back(r);
        batch.keep_rows(kept);  // it leaves: rows, and columns only it used
        auto t = Clock::now();
        batch.step(tokens);
        after.push_back(seconds_since(t));
        t = Clock::now();
        batch.step(tokens);
        plain.push_back(seconds_since(t));
      }
      leave_ms = (median(after) - median(plain)) * 1e3;
    }
    const int64_t hidden = m.model().config().get_int("n_embd", m.model().config().get_int("hidden_size", 768));
    const int64_t layers = decoder->num_layers();
    const auto [gemm_ours, gemm_blas] = layer_gemms_ms(rows, hidden, layers, reps);
    const double step_ms = median(step) * 1e3;
    if (k == 0) one_row_ms = step_ms / double(rows);
    std::printf("{\"rows\": %lld, \"context\": %lld, \"step_ms\": %.3f, \"tokens_per_s\": %.1f, "
                "\"step_over_one_row\": %.3f, \"step_over_weight_floor\": %.3f, "
                "\"prefill_alone_ms\": %.3f, \"join_ms\": %.3f, \"join_over_prefill\": %.3f, "
                "\"leave_extra_ms\": %.3f, \"weight_floor_ms\": %.3f, \"copy_gbs\": %.1f, "
                "\"gemms_ms\": %.3f, \"gemms_sgemm_ms\": %.3f, \"sgemm_over_ours\": %.2f, "
                "\"threads\": %d}\n",
                static_cast<long long>(rows), static_cast<long long>(context), step_ms,
                double(rows) / (step_ms * 1e-3), step_ms / one_row_ms, step_ms / floor_ms,
                median(alone) * 1e3, median(join) * 1e3, median(join) / median(alone), leave_ms,
                floor_ms, gbs, gemm_ours, gemm_blas, gemm_blas / gemm_ours, threads);
    std::fflush(stdout);
    std::fprintf(stderr, "[%zu/%zu] rows %lld: step %.2f ms (%.1f s)\n", k + 1, row_counts.size(),
                 static_cast<long long>(rows), step_ms, seconds_since(t0));
  }
}
