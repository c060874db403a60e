// Continuous batching through pipeline stages (actors/jobs/pipeline_service.h): requests from many
// threads at once, through PP = 2 (and TP = 2 x PP = 2) stages in lanes, get exactly the tokens
// of the same requests made one at a time to the whole model in this process
// (libai::Service::open). Lanes step independently (stages by arrival): a lone request
// finishes while the other lanes idle, cancellation frees its row, and destroying the service
// lets every stage finish.
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "tests/actors/test_system.h"
#include "actors/jobs/model_jobs.h"
#include "actors/jobs/pipeline_service.h"
#include "tests/models/random_models.h"

namespace libai::actors {
namespace {

namespace fs = std::filesystem;

using testing::System;

fs::path random_model(const std::string& family, int layers) {
  return testing::random_model(family, layers, "serve");
}

std::vector<int> even_split(int layers, int stages) {
  std::vector<int> stage_of;
  for (int l = 0; l < layers; ++l) stage_of.push_back(l * stages / layers);
  return stage_of;
}

// Requests of all kinds within the random models' 16 positions and 37 tokens: prompt lengths
// 1-5, 2-9 new tokens, greedy and sampled (seeded), penalties and min_new_tokens.
std::vector<GenerateRequest> requests(int n) {
  std::vector<GenerateRequest> out;
  for (int i = 0; i < n; ++i) {
    GenerateRequest r;
    for (int j = 0; j <= i % 5; ++j) r.prompt_ids.push_back(1 + (i * 7 + j * 3) % 30);
    r.max_new_tokens = 2 + (i * 5) % 8;
    if (i % 3 == 1) {
      r.do_sample = true;
      r.seed = uint64_t(100 + i);
      r.top_k = 20;
      r.temperature = 0.8;
    }
    if (i % 4 == 2) r.repetition_penalty = 1.3;
    if (i % 5 == 3) r.min_new_tokens = 2;
    out.push_back(r);
  }
  return out;
}

// The layout of a serving pipeline over `folder`: `groups` lanes, stages by arrival.
struct ServingPipeline {
  System sys;
  PipelineLayout layout;
  std::unique_ptr<LocalPipeline> pipeline;
  ServingPipeline(const fs::path& folder, LayoutSizes sizes, int groups) {
    const int layers = models::stages::pipeline_num_layers(models::HfConfig::load(folder));
    layout = make_layout(sizes, groups);
    layout.by_arrival = true;
    pipeline = std::make_unique<LocalPipeline>(
        *sys.system, layout, model_stage_factory(folder, layout, even_split(layers, sizes.pp)));
  }
};

void expect_concurrent_requests_equal_whole_model(const fs::path& folder, LayoutSizes sizes,
                                                  int groups) {
  const auto reqs = requests(14);
  // The reference: each request alone on the whole model.
  auto whole = Service::open({.model_dir = folder, .max_batch = 1});
  std::vector<GenerateResult> expected;
  for (const auto& r : reqs) expected.push_back(whole->generate(r));

  ServingPipeline p(folder, sizes, groups);
  {
    auto svc = make_pipeline_service(p.pipeline->client(), p.layout, folder, {.max_batch = 6});
    EXPECT_TRUE(svc->info().can_generate);
    std::vector<std::future<GenerateResult>> futures;
    std::vector<std::thread> threads;
    std::vector<GenerateResult> got(reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i)
      threads.emplace_back([&, i] { got[i] = svc->generate(reqs[i]); });
    for (auto& t : threads) t.join();
    for (size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_EQ(got[i].token_ids, expected[i].token_ids) << "request " << i;
      EXPECT_EQ(got[i].finish_reason, expected[i].finish_reason) << "request " << i;
    }
    const ServiceMetrics m = svc->metrics();
    EXPECT_EQ(m.requests, int64_t(reqs.size()));
    EXPECT_GT(m.batched_rows, m.decode_steps) << "rows were batched";
    EXPECT_EQ(svc->failure(), "");
  }
  // Every group's done packet went through: the stages finish.
  const auto reports = p.pipeline->wait(std::chrono::seconds(30));
  EXPECT_EQ(reports.size(), p.layout.slots.size());
}

TEST(PipelineService, ConcurrentRequestsThroughTwoStagesEqualTheWholeModel) {
  const fs::path gpt2 = random_model("gpt2", 4), llama = random_model("llama", 4);
  expect_concurrent_requests_equal_whole_model(gpt2, {.dp = 1, .pp = 2, .tp = 1}, 2);
  expect_concurrent_requests_equal_whole_model(llama, {.dp = 1, .pp = 2, .tp = 1}, 3);
  fs::remove_all(gpt2);
  fs::remove_all(llama);
}

TEST(PipelineService, TensorAndDataParallelStages) {
  const fs::path llama = random_model("llama", 4);
  expect_concurrent_requests_equal_whole_model(llama, {.dp = 1, .pp = 2, .tp = 2}, 2);
  expect_concurrent_requests_equal_whole_model(llama, {.dp = 2, .pp = 2, .tp = 1}, 4);
  fs::remove_all(llama);
}

// One request at a time while the other lanes have nothing: stages that kept the program
// order would wait for the idle lanes' steps forever. Cancellation frees the row at once.
TEST(PipelineService, LanesStepAloneAndCancellationFreesTheRow) {
  const fs::path folder = random_model("gpt2", 4);
  ServingPipeline p(folder, {.dp = 1, .pp = 2, .tp = 1}, 3);
  auto svc = make_pipeline_service(p.pipeline->client(), p.layout, folder, {.max_batch = 3});
  auto whole = Service::open({.model_dir = folder});
  for (const auto& r : requests(4)) {
    auto f = svc->submit(r);
    ASSERT_EQ(f.wait_for(std::chrono::seconds(20)), std::future_status::ready) << "a lone lane stalled";
    EXPECT_EQ(f.get().token_ids, whole->generate(r).token_ids);
  }
  GenerateRequest endless{.prompt_ids = {4, 5}, .max_new_tokens = 14};
  CancelToken token;
  endless.cancel = token;
  int seen = 0;
  endless.on_token = [&](const TokenEvent&) {
    if (++seen == 3) token.cancel();
    return true;
  };
  const GenerateResult cancelled = svc->generate(endless);
  EXPECT_EQ(cancelled.finish_reason, FinishReason::cancelled);
  EXPECT_LE(cancelled.completion_tokens, 4);
  EXPECT_EQ(svc->metrics().running, 0);
  svc.reset();
  EXPECT_EQ(p.pipeline->wait(std::chrono::seconds(30)).size(), p.layout.slots.size());
  fs::remove_all(folder);
}

TEST(PipelineService, AnEncoderDecoderModelIsRefusedNamingIt) {
  fs::path t5;
  for (auto f : testing::families())
    if (f.name == "t5") t5 = testing::save_random_model(f, "serve_t5_" + std::to_string(::getpid()));
  ServingPipeline p(t5, {.dp = 1, .pp = 2, .tp = 1}, 2);
  try {
    make_pipeline_service(p.pipeline->client(), p.layout, t5, {});
    ADD_FAILURE() << "no error";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("encoder-decoder"), std::string::npos) << e.what();
  }
  p.pipeline->client().fail("test over");
  fs::remove_all(t5);
}

}  // namespace
}  // namespace libai::actors
