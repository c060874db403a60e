// `libai-actor serve CONFIG` over two processes on loopback, as users run it on two nodes:
// node 0 serves HTTP over pipeline stages on both nodes, continuously batched in lanes. Its
// answers are those of the whole model in one process; SIGTERM ends both nodes cleanly; a
// killed node ends node 0's server with an error naming it.
#include <gtest/gtest.h>

#include <future>
#include <regex>

#include "service/service.h"
#include "tests/bin/cluster.h"
#include "tests/service/http_client.h"

namespace libai::testing {
namespace {

using namespace std::chrono_literals;

// node 1 then node 0 of a two-stage serve job over the GPT-2 fixture; the HTTP port node 0
// chose (0 when it printed none within a minute).
struct TwoNodes {
  Cluster cluster;
  int http_port = 0;
  TwoNodes() {
    const std::string config = cluster.dir() + "/serve.yaml";
    std::ofstream(config) << "model:\n  weights: " << kModels << "gpt2\n"
                          << "train:\n  dist:\n    pipeline_parallel_size: 2\n"
                          << "  cluster:\n    nodes: 2\n    token: serve-test\n"
                          << "    port: " << free_port() << "\n    heartbeat_timeout: 3\n"
                          << "job:\n  _target_: serve\n  max_batch: 8\n  num_groups: 2\n";
    cluster.launch({"serve", config, "--node-rank", "1"});
    cluster.launch({"serve", config, "--node-rank", "0", "--port", "0"});
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    std::smatch m;
    while (std::chrono::steady_clock::now() < deadline) {
      const std::string out = cluster.out(1);
      if (std::regex_search(out, m, std::regex(R"(serving gpt2 on http://127\.0\.0\.1:(\d+))"))) {
        http_port = std::stoi(m[1]);
        return;
      }
      if (cluster.wait(1, 0ms) >= 0 || cluster.wait(0, 0ms) >= 0) break;
      std::this_thread::sleep_for(50ms);
    }
  }
  std::string logs() { return "node 0:\n" + cluster.err(1) + "\nnode 1:\n" + cluster.err(0); }
};

TEST(ServeCluster, TwoNodesAnswerAsTheWholeModelAndStopCleanlyOnSigterm) {
  TwoNodes nodes;
  ASSERT_GT(nodes.http_port, 0) << "no 'serving' line\n" << nodes.logs();
  auto whole = Service::open({.model_dir = kModels + "gpt2"});

  // Eight clients at once, prompts and lengths of all kinds, greedy: each gets the text of
  // its request made alone to the whole model.
  const std::vector<std::string> prompts = {"Hello", "The quick brown fox", "A", "In a distant galaxy far",
                                            "Once upon", "x y z", "What is the", "One two three four five"};
  std::vector<std::future<Reply>> replies;
  for (size_t i = 0; i < prompts.size(); ++i)
    replies.push_back(std::async(std::launch::async, [&, i] {
      return post_json(nodes.http_port, "/v1/completions",
                       {{"prompt", prompts[i]}, {"max_tokens", 3 + int(i) % 6}, {"temperature", 0}});
    }));
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Reply r = replies[i].get();
    ASSERT_EQ(r.status, 200) << r.text;
    GenerateRequest alone{.prompt = prompts[i], .max_new_tokens = 3 + int(i) % 6};
    const GenerateResult expected = whole->generate(alone);
    EXPECT_EQ(r.body["choices"][0]["text"], expected.text) << "prompt " << i;
    EXPECT_EQ(r.body["usage"]["completion_tokens"], expected.completion_tokens) << "prompt " << i;
  }
  // Streaming through the stages too.
  const Streamed s = post_stream(nodes.http_port, "/v1/completions",
                                 {{"prompt", "Hello"}, {"max_tokens", 5}, {"temperature", 0}, {"stream", true}});
  EXPECT_EQ(s.status, 200);
  EXPECT_EQ(get(nodes.http_port, "/health").status, 200);
  const Reply metrics = get(nodes.http_port, "/metrics");
  EXPECT_GE(metric(metrics.text, "libai_requests_total", "outcome=\"ok\""), 9.0) << metrics.text;

  nodes.cluster.signal(1, SIGTERM);  // node 0
  EXPECT_EQ(nodes.cluster.wait(1, 20s), 0) << nodes.logs();
  EXPECT_EQ(nodes.cluster.wait(0, 20s), 0) << nodes.logs();
  EXPECT_NE(nodes.cluster.out(0).find("node 1: done"), std::string::npos) << nodes.logs();
}

TEST(ServeCluster, AKilledNodeEndsTheServerNamingIt) {
  TwoNodes nodes;
  ASSERT_GT(nodes.http_port, 0) << "no 'serving' line\n" << nodes.logs();
  EXPECT_EQ(post_json(nodes.http_port, "/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 2}}).status, 200);
  nodes.cluster.signal(0, SIGKILL);  // node 1
  const auto killed = std::chrono::steady_clock::now();
  EXPECT_EQ(nodes.cluster.wait(1, 15s), 1) << nodes.logs();
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 10s);
  EXPECT_NE(nodes.cluster.err(1).find("node 1 died"), std::string::npos) << nodes.logs();
}

TEST(ServeCluster, AConfigThatIsNotAServeJobIsRefusedNamingIt) {
  Cluster cluster;
  const std::string config = LIBAI_SOURCE_DIR "/configs/pipeline_generate.yaml";
  cluster.launch({"serve", config, "--node-rank", "0", "--nodes", "1",
                  "train.dist.pipeline_parallel_size=1", "model.weights=" + kModels + "gpt2"});
  EXPECT_EQ(cluster.wait(0, 30s), 1);
  EXPECT_NE(cluster.err(0).find("not serve"), std::string::npos) << cluster.err(0);
  cluster.launch({"serve", config, "--model", kModels + "gpt2"});
  EXPECT_EQ(cluster.wait(1, 30s), 1);
  EXPECT_NE(cluster.err(1).find("not both"), std::string::npos) << cluster.err(1);
}

}  // namespace
}  // namespace libai::testing
