// libai::Service against independent references: every generation result is compared with
// models::pipelines::generate_ids / generate_text of the same request made alone (and the
// tokenizer's own decode), every embedding with pipelines::embed, every classification with
// pipelines::classify_text, on the small random-weight fixtures of tests/data/models.
// Nothing here waits without a deadline: a wait that runs out aborts the test binary.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "models/decoder_lm.h"
#include "models/pipelines/pipelines.h"
#include "runtime/error.h"
#include "service/batcher.h"
#include "service/service.h"
#include "service/text_stream.h"

namespace libai {
namespace {

namespace pipelines = models::pipelines;
using namespace std::chrono_literals;

const std::string kModels = LIBAI_SOURCE_DIR "/tests/data/models/";

// The value of `f` within `limit`; a hang becomes a failed test binary, not a stuck one.
template <typename T>
T within(std::future<T>& f, std::chrono::seconds limit = 120s) {
  if (f.wait_for(limit) != std::future_status::ready) {
    std::fprintf(stderr, "service_test: a wait ran out after %llds\n", (long long)limit.count());
    std::abort();
  }
  return f.get();
}

template <typename T>
bool ready_within(std::future<T>& f, std::chrono::milliseconds limit) {
  return f.wait_for(limit) == std::future_status::ready;
}

// The new tokens of `request` generated alone by the pipelines (no service involved).
std::vector<int64_t> reference_tokens(pipelines::TextModel& m, const GenerateRequest& r) {
  models::generation::GenerationConfig c;
  c.max_new_tokens = r.max_new_tokens;
  c.min_new_tokens = r.min_new_tokens;
  c.do_sample = r.do_sample;
  c.temperature = r.temperature;
  c.top_k = r.top_k;
  c.top_p = r.top_p;
  c.seed = r.seed;
  c.repetition_penalty = r.repetition_penalty;
  std::vector<int64_t> prompt = r.prompt_ids;
  if (prompt.empty()) {
    auto e = m.tokenizer().encode(r.prompt);
    prompt.assign(e.ids.begin(), e.ids.end());
  }
  auto out = pipelines::generate_ids(m, {prompt}, c);
  // Decoder-only: the prompt, then the new tokens; encoder-decoder: the new tokens.
  auto& ids = out.at(0).token_ids;
  const bool seq2seq = m.model().generative()->is_encoder_decoder();
  return std::vector<int64_t>(ids.begin() + (seq2seq ? 0 : int64_t(prompt.size())), ids.end());
}

std::string decode(pipelines::TextModel& m, const std::vector<int64_t>& ids) {
  return m.tokenizer().decode(std::vector<int32_t>(ids.begin(), ids.end()), true);
}

double max_difference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    worst = std::max(worst, std::abs(double(a[i]) - double(b[i])));
  return worst;
}

// Token ids 3 .. vocab - 1 (past the fixtures' special tokens).
std::vector<int64_t> ids_prompt(int64_t length, int64_t salt, int64_t vocab = 503) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < length; ++i) ids.push_back(3 + (salt * 37 + i * 11) % (vocab - 3));
  return ids;
}

// ---- the text stream ---------------------------------------------------------------------

TEST(TextStream, HandsOutCompleteCharactersAndHoldsBackStopStrings) {
  auto m = pipelines::TextModel::load(kModels + "gpt2");
  const std::string text = "h\xC3\xA9llo w\xC3\xB6rld, \xE6\x97\xA5\xE6\x9C\xAC und so weiter";
  const auto enc = m.tokenizer().encode(text, false);
  ASSERT_GT(enc.ids.size(), 8u);
  service::TextStream plain(&m.tokenizer(), {});
  std::string joined;
  for (int32_t id : enc.ids) {
    const std::string piece = plain.push(id);
    EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos) << "an incomplete character";
    joined += piece;
  }
  joined += plain.finish();
  EXPECT_EQ(joined, text);

  service::TextStream stopping(&m.tokenizer(), {"XYZ", "w\xC3\xB6r"});
  std::string shown;
  size_t pushed = 0;
  for (int32_t id : enc.ids) {
    shown += stopping.push(id);
    ++pushed;
    if (stopping.stopped()) break;
  }
  EXPECT_TRUE(stopping.stopped());
  EXPECT_LT(pushed, enc.ids.size());
  EXPECT_EQ(shown, "h\xC3\xA9llo ");
  EXPECT_EQ(stopping.text(), "h\xC3\xA9llo ");
}

// ---- the running batch -------------------------------------------------------------------

// Rows that join a running batch at different times, and leave it, compute what they compute
// alone; the cache shrinks to the longest running row once a long one leaves.
TEST(RunningBatch, RowsComputeWhatTheyComputeAloneAndTheCacheIsTrimmed) {
  auto m = pipelines::TextModel::load(kModels + "llama3");
  auto* decoder = dynamic_cast<models::DecoderLm*>(&m.model());
  ASSERT_NE(decoder, nullptr);
  const std::vector<int64_t> a = ids_prompt(12, 1), b = ids_prompt(3, 2), c = ids_prompt(5, 3);
  // Alone: each prompt then a fixed continuation through the model's own session.
  auto alone = [&](const std::vector<int64_t>& prompt, const std::vector<int64_t>& feed) {
    auto session = decoder->start({prompt});
    for (int64_t t : feed) session->append({t});
    return session->logits().to_vector<float>();
  };
  service::RunningBatch batch(*decoder, 8);
  batch.add({a});
  batch.step({7});                      // a: 13 tokens
  batch.add({b, c});                    // b: 3, c: 5, padded in front to 13
  EXPECT_EQ(batch.length(), 13);
  auto logits = batch.step({8, 9, 10});  // a 14, b 4, c 6
  EXPECT_LT(max_difference(logits[0], alone(a, {7, 8})), 1e-4);
  EXPECT_LT(max_difference(logits[1], alone(b, {9})), 1e-4);
  EXPECT_LT(max_difference(logits[2], alone(c, {10})), 1e-4);
  batch.keep_rows({1, 2});  // a leaves: c's 6 tokens are the longest
  EXPECT_EQ(batch.rows(), 2);
  EXPECT_EQ(batch.length(), 6);
  logits = batch.step({11, 12});
  EXPECT_LT(max_difference(logits[0], alone(b, {9, 11})), 1e-4);
  EXPECT_LT(max_difference(logits[1], alone(c, {10, 12})), 1e-4);
  EXPECT_GT(max_difference(logits[0], logits[1]), 1e-3);  // the rows are not mixed up
}

// ---- concurrency -------------------------------------------------------------------------

// 16 threads at once, generating (greedy, prompts and lengths of all kinds, some with stop
// strings) and embedding: each gets what the pipelines give for its request alone.
TEST(Service, ConcurrentGenerateAndEmbedEqualSerialCalls) {
  auto gpt2 = pipelines::TextModel::load(kModels + "gpt2");
  auto bert = pipelines::TextModel::load(kModels + "bert");
  auto generator = Service::open({.model_dir = kModels + "gpt2", .max_batch = 8});
  auto embedder = Service::open({.model_dir = kModels + "bert", .embed_batch = 6});

  const std::vector<std::string> words = {"The", "quick", "brown", "fox", "jumps", "over",
                                          "the", "lazy", "dog", "again", "and", "again"};
  struct Case {
    GenerateRequest request;
    std::vector<int64_t> expected;
    std::string expected_text;
    FinishReason reason = FinishReason::length;
    std::vector<std::string> texts;  // embed cases
    std::vector<std::vector<float>> vectors;
  };
  std::vector<Case> cases(16);
  int stops = 0;
  for (int i = 0; i < 16; ++i) {
    Case& k = cases[size_t(i)];
    if (i % 4 == 3) {
      for (int j = 0; j <= i % 5; ++j) k.texts.push_back(words[size_t(i + j) % words.size()] + " " + words[size_t(j)]);
      k.vectors = pipelines::embed(bert, k.texts, size_t(1));
      continue;
    }
    std::string prompt;
    for (int j = 0; j <= i % 7; ++j) prompt += (j ? " " : "") + words[size_t(i + j) % words.size()];
    k.request.prompt = prompt;
    k.request.max_new_tokens = 4 + (i * 7) % 23;
    k.expected = reference_tokens(gpt2, k.request);
    k.expected_text = decode(gpt2, k.expected);
    k.reason = k.expected.back() == 2 && int(k.expected.size()) < k.request.max_new_tokens
                   ? FinishReason::eos : FinishReason::length;
    if (i % 3 == 0) {
      // A stop string taken from the middle of the reference text (ASCII, so it is whole
      // characters): the result ends before its first occurrence, after the token completing it.
      const std::string& t = k.expected_text;
      for (size_t p = t.size() / 3; p + 2 < t.size(); ++p) {
        if (!std::isgraph((unsigned char)t[p]) || !std::isgraph((unsigned char)t[p + 1])) continue;
        const std::string stop = t.substr(p, 2);
        k.request.stop = {stop};
        const size_t at = t.find(stop);
        for (size_t n = 1; n <= k.expected.size(); ++n)
          if (decode(gpt2, {k.expected.begin(), k.expected.begin() + int64_t(n)}).find(stop) != std::string::npos) {
            k.expected.resize(n);
            break;
          }
        k.expected_text = t.substr(0, at);
        k.reason = FinishReason::stop;
        ++stops;
        break;
      }
    }
  }
  EXPECT_GE(stops, 2) << "the fixture's texts should offer stop strings";

  std::vector<std::future<void>> threads;
  std::vector<GenerateResult> results(16);
  std::vector<std::string> streamed(16);
  std::vector<std::vector<std::vector<float>>> vectors(16);
  for (int i = 0; i < 16; ++i) {
    threads.push_back(std::async(std::launch::async, [&, i] {
      Case& k = cases[size_t(i)];
      if (!k.texts.empty()) {
        vectors[size_t(i)] = embedder->embed(k.texts);
        return;
      }
      GenerateRequest r = k.request;
      r.on_token = [&streamed, i](const TokenEvent& e) {
        streamed[size_t(i)] += e.text;
        return true;
      };
      auto f = generator->submit(r);
      results[size_t(i)] = within(f);
    }));
  }
  for (auto& t : threads) within(t);

  for (int i = 0; i < 16; ++i) {
    const Case& k = cases[size_t(i)];
    if (!k.texts.empty()) {
      ASSERT_EQ(vectors[size_t(i)].size(), k.vectors.size());
      for (size_t j = 0; j < k.vectors.size(); ++j)
        EXPECT_LT(max_difference(vectors[size_t(i)][j], k.vectors[j]), 1e-5) << "case " << i;
      continue;
    }
    const GenerateResult& r = results[size_t(i)];
    EXPECT_EQ(r.token_ids, k.expected) << "case " << i << " prompt \"" << k.request.prompt << "\"";
    EXPECT_EQ(r.text, k.expected_text) << "case " << i;
    EXPECT_EQ(streamed[size_t(i)], r.text) << "case " << i;
    EXPECT_STREQ(to_string(r.finish_reason), to_string(k.reason)) << "case " << i;
    EXPECT_EQ(r.completion_tokens, int64_t(r.token_ids.size()));
  }
  const ServiceMetrics g = generator->metrics();
  EXPECT_EQ(g.requests, 12);
  EXPECT_EQ(g.failed, 0);
  EXPECT_EQ(g.running, 0);
  EXPECT_EQ(g.queue_depth, 0);
}

// Llama-family rows (rotary positions per row) joining one batch: greedy ids as alone, and the
// batch really forms.
TEST(Service, EightConcurrentRequestsBatchTogether) {
  auto qwen2 = pipelines::TextModel::load(kModels + "qwen2");
  auto svc = Service::open({.model_dir = kModels + "qwen2", .max_batch = 8});
  std::vector<GenerateRequest> requests(8);
  // The first request holds the engine at its first token until every request is queued, so
  // all of them meet in the batch.
  std::promise<void> all_queued;
  std::shared_future<void> queued = all_queued.get_future().share();
  for (int i = 0; i < 8; ++i) {
    requests[size_t(i)].prompt_ids = ids_prompt(2 + i * 3, i);
    requests[size_t(i)].max_new_tokens = 6 + (i * 5) % 17;
  }
  requests[0].on_token = [queued](const TokenEvent&) {
    return queued.wait_for(30s) == std::future_status::ready;
  };
  std::vector<std::future<GenerateResult>> futures;
  for (auto& r : requests) futures.push_back(svc->submit(r));
  all_queued.set_value();
  for (int i = 0; i < 8; ++i) {
    const GenerateResult r = within(futures[size_t(i)]);
    EXPECT_EQ(r.token_ids, reference_tokens(qwen2, requests[size_t(i)])) << "request " << i;
    EXPECT_EQ(r.prompt_tokens, int64_t(requests[size_t(i)].prompt_ids.size()));
  }
  const ServiceMetrics m = svc->metrics();
  ASSERT_GT(m.decode_steps, 0);
  EXPECT_GT(double(m.batched_rows) / double(m.decode_steps), 1.0)
      << m.batched_rows << " rows over " << m.decode_steps << " steps";
  EXPECT_EQ(m.running, 0);
}

// A sampled request draws what generation::generate draws for it alone with the same seed,
// whether it runs alone or among other requests (greedy and sampled with other seeds).
TEST(Service, SampledTokensDependOnlyOnTheSeed) {
  auto llama = pipelines::TextModel::load(kModels + "llama3");
  auto svc = Service::open({.model_dir = kModels + "llama3", .max_batch = 8});
  GenerateRequest sampled;
  sampled.prompt_ids = ids_prompt(6, 9);
  sampled.max_new_tokens = 14;
  sampled.do_sample = true;
  sampled.temperature = 0.8;
  sampled.top_k = 40;
  sampled.top_p = 0.95;
  sampled.repetition_penalty = 1.1;
  sampled.seed = 1234;
  const auto expected = reference_tokens(llama, sampled);

  auto alone = svc->submit(sampled);
  EXPECT_EQ(within(alone).token_ids, expected);

  std::vector<std::future<GenerateResult>> busy;
  for (int i = 0; i < 7; ++i) {
    GenerateRequest other;
    other.prompt_ids = ids_prompt(3 + 2 * i, 20 + i);
    other.max_new_tokens = 5 + 3 * i;
    other.do_sample = i % 2 == 0;
    other.seed = uint64_t(i);
    busy.push_back(svc->submit(other));
    if (i == 3) busy.push_back(svc->submit(sampled));  // joins a batch already running
  }
  for (size_t i = 0; i < busy.size(); ++i) {
    const GenerateResult r = within(busy[i]);
    if (i == 4) {
      EXPECT_EQ(r.token_ids, expected);
    }
  }
  GenerateRequest other_seed = sampled;
  other_seed.seed = 99;
  auto different = svc->submit(other_seed);
  EXPECT_NE(within(different).token_ids, expected) << "the seed should matter";
}

// ---- cancellation ------------------------------------------------------------------------

TEST(Service, CancellationEndsTheRequestAndFreesItsSlot) {
  auto svc = Service::open({.model_dir = kModels + "gpt2", .max_batch = 1});
  // From another thread: the request's third token waits until the cancel is made.
  std::promise<void> third_token, cancelled;
  std::shared_future<void> cancel_made = cancelled.get_future().share();
  GenerateRequest r;
  r.prompt = "Hello there";
  r.max_new_tokens = 40;
  r.min_new_tokens = 40;  // no eos: the request can only end by the cancel
  int tokens = 0;
  r.on_token = [&](const TokenEvent&) {
    if (++tokens == 3) {
      third_token.set_value();
      return cancel_made.wait_for(30s) == std::future_status::ready;
    }
    return true;
  };
  auto f = svc->submit(r);
  auto started = third_token.get_future();
  within(started);
  r.cancel.cancel();  // copies share the flag
  cancelled.set_value();
  GenerateResult out = within(f);
  EXPECT_EQ(out.finish_reason, FinishReason::cancelled);
  EXPECT_EQ(out.completion_tokens, 3);
  EXPECT_EQ(svc->metrics().running, 0);

  // From on_token returning false.
  GenerateRequest stop_early;
  stop_early.prompt = "Once upon a time";
  stop_early.max_new_tokens = 30;
  stop_early.min_new_tokens = 30;
  int seen = 0;
  stop_early.on_token = [&seen](const TokenEvent&) { return ++seen < 5; };
  auto g = svc->submit(stop_early);
  out = within(g);
  EXPECT_EQ(out.finish_reason, FinishReason::cancelled);
  EXPECT_EQ(out.completion_tokens, 5);

  // The slot is free: the next request runs to its end.
  GenerateRequest next;
  next.prompt = "And then";
  next.max_new_tokens = 6;
  auto h = svc->submit(next);
  out = within(h);
  EXPECT_NE(out.finish_reason, FinishReason::cancelled);
  const ServiceMetrics m = svc->metrics();
  EXPECT_EQ(m.running, 0);
  EXPECT_EQ(m.cancelled, 2);
  EXPECT_EQ(m.requests, 3);
}

// ---- embed and classify ------------------------------------------------------------------

TEST(Service, ConcurrentClassifyEqualsClassifyTextAlone) {
  auto bert = pipelines::TextModel::load(kModels + "bert_cls");
  auto svc = Service::open({.model_dir = kModels + "bert_cls", .embed_batch = 4});
  EXPECT_TRUE(svc->info().can_classify);
  EXPECT_FALSE(svc->info().can_generate);
  const std::vector<std::string> texts = {"I loved it.", "Terrible, just terrible.", "ok",
                                          "It was a film.", "Best thing I have seen all year, truly.",
                                          "meh", "Not bad at all, I would say.", "No."};
  std::vector<std::future<std::vector<LabelScore>>> futures;
  for (const auto& t : texts)
    futures.push_back(std::async(std::launch::async, [&svc, t] { return svc->classify(t); }));
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto got = within(futures[i]);
    const auto expected = pipelines::classify_text(bert, texts[i]);
    ASSERT_EQ(got.size(), expected.size());
    for (size_t j = 0; j < got.size(); ++j) {
      EXPECT_EQ(got[j].label, expected[j].label) << texts[i];
      EXPECT_NEAR(got[j].score, expected[j].score, 1e-5) << texts[i];
    }
  }
  EXPECT_THROW(svc->generate({.prompt = "Hi"}), Unsupported);
}

// ---- errors ------------------------------------------------------------------------------

template <typename F>
Error error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error";
  return Error(ErrorKind::internal, "");
}

TEST(Service, BadInputGetsOneClearError) {
  Error e = error_of([] { Service::open({.model_dir = kModels + "no_such_model"}); });
  EXPECT_EQ(e.kind(), ErrorKind::not_found) << e.what();
  EXPECT_NE(std::string(e.what()).find("no_such_model"), std::string::npos) << e.what();

  auto svc = Service::open({.model_dir = kModels + "gpt2", .max_batch = 1, .max_queue = 1});
  EXPECT_EQ(svc->info().max_positions, 64);
  GenerateRequest too_long;
  too_long.prompt_ids = ids_prompt(60, 1);
  too_long.max_new_tokens = 10;
  e = error_of([&] { svc->generate(too_long); });
  EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
  EXPECT_NE(std::string(e.what()).find("64 positions"), std::string::npos) << e.what();
  e = error_of([&] { svc->generate({.prompt_ids = {5, 999999}}); });
  EXPECT_NE(std::string(e.what()).find("vocabulary"), std::string::npos) << e.what();
  e = error_of([&] { svc->generate({.prompt = "x", .do_sample = true, .temperature = 0}); });
  EXPECT_NE(std::string(e.what()).find("temperature"), std::string::npos) << e.what();
  e = error_of([&] { svc->embed({"x"}); });
  EXPECT_EQ(e.kind(), ErrorKind::unsupported) << e.what();

  // A full queue: one request runs (held at its first token), one waits, the third is refused.
  std::promise<void> first_token, release;
  std::shared_future<void> released = release.get_future().share();
  GenerateRequest held;
  held.prompt = "Hold on";
  held.max_new_tokens = 3;
  held.min_new_tokens = 3;
  bool once = false;
  held.on_token = [&](const TokenEvent&) {
    if (!once) {
      once = true;
      first_token.set_value();
      return released.wait_for(30s) == std::future_status::ready;
    }
    return true;
  };
  auto running = svc->submit(held);
  auto started = first_token.get_future();
  within(started);
  auto waiting = svc->submit({.prompt = "Waiting", .max_new_tokens = 2, .min_new_tokens = 2});
  e = error_of([&] { svc->submit({.prompt = "One too many"}); });
  EXPECT_EQ(e.kind(), ErrorKind::unavailable) << e.what();
  EXPECT_NE(std::string(e.what()).find("max_queue"), std::string::npos) << e.what();
  EXPECT_EQ(svc->metrics().queue_depth, 1);
  release.set_value();
  EXPECT_EQ(within(running).completion_tokens, 3);
  EXPECT_EQ(within(waiting).completion_tokens, 2);
}

// Closing with a request waiting fails it (no hang); the running one ends as cancelled or
// complete after its current step.
TEST(Service, ClosingFailsTheWaitingRequests) {
  auto svc = Service::open({.model_dir = kModels + "gpt2", .max_batch = 1});
  std::promise<void> first_token, release;
  std::shared_future<void> released = release.get_future().share();
  GenerateRequest held;
  held.prompt = "Hold on";
  held.max_new_tokens = 40;
  held.min_new_tokens = 40;
  int tokens = 0;
  held.on_token = [&](const TokenEvent&) {
    if (++tokens == 1) {
      first_token.set_value();
      return released.wait_for(30s) == std::future_status::ready;
    }
    std::this_thread::sleep_for(5ms);  // leaves the closing time to land mid-request
    return true;
  };
  auto running = svc->submit(held);
  auto started = first_token.get_future();
  within(started);
  auto waiting = svc->submit({.prompt = "Waiting", .max_new_tokens = 2});
  auto closed = std::async(std::launch::async, [&svc] { svc.reset(); });
  std::this_thread::sleep_for(20ms);
  release.set_value();
  within(closed);
  ASSERT_TRUE(ready_within(waiting, 1s));
  Error e = error_of([&] { waiting.get(); });
  EXPECT_EQ(e.kind(), ErrorKind::unavailable) << e.what();
  EXPECT_NE(std::string(e.what()).find("closed"), std::string::npos) << e.what();
  ASSERT_TRUE(ready_within(running, 1s));
  EXPECT_EQ(running.get().finish_reason, FinishReason::cancelled);
}

// Seq2seq runs one request at a time through its session: the same ids as alone.
TEST(Service, T5RequestsEqualGenerateAlone) {
  auto t5 = pipelines::TextModel::load(kModels + "t5");
  auto svc = Service::open({.model_dir = kModels + "t5"});
  std::vector<GenerateRequest> requests(3);
  std::vector<std::future<GenerateResult>> futures;
  for (int i = 0; i < 3; ++i) {
    requests[size_t(i)].prompt_ids = ids_prompt(4 + 3 * i, i, 251);
    requests[size_t(i)].max_new_tokens = 5 + i;
    futures.push_back(svc->submit(requests[size_t(i)]));
  }
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(within(futures[size_t(i)]).token_ids, reference_tokens(t5, requests[size_t(i)]));
}

}  // namespace
}  // namespace libai
