// The HTTP server over real loopback sockets, in this process: every endpoint, answers compared
// with models::pipelines run on the same folder (independent of the service and the server),
// streams compared with unstreamed answers, and the clients that misbehave.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "models/convert.h"
#include "models/hf_config.h"
#include "models/init.h"
#include "models/pipelines/pipelines.h"
#include "service/http_server.h"
#include "tests/config/test_files.h"
#include "tests/service/http_client.h"

namespace libai::testing {
namespace {

using namespace std::chrono_literals;
namespace pipelines = models::pipelines;
const std::string kModels = LIBAI_SOURCE_DIR "/tests/data/models/";

struct Served {
  Served(const std::filesystem::path& folder, HttpServerOptions options = {}) {
    service = Service::open({.model_dir = folder, .threads = 2, .max_batch = 8});
    options.model_dir = folder;
    options.port = 0;
    options.read_timeout = 1s;  // the stalled-client test waits this long
    server = std::make_unique<HttpServer>(*service, options);
    server->start();
  }
  int port() const { return server->port(); }
  std::unique_ptr<Service> service;
  std::unique_ptr<HttpServer> server;
};

class HttpServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { gpt2_ = new Served(kModels + "gpt2"); }
  static void TearDownTestSuite() {
    delete gpt2_;
    gpt2_ = nullptr;
  }
  static int port() { return gpt2_->port(); }
  static Served* gpt2_;
};
Served* HttpServerTest::gpt2_ = nullptr;

std::string greedy_reference(const std::string& prompt, int max_new_tokens) {
  auto m = pipelines::TextModel::load(kModels + "gpt2");
  models::generation::GenerationConfig g;
  g.max_new_tokens = max_new_tokens;
  g.do_sample = false;
  return pipelines::generate_text(m, {prompt}, g).at(0).text;
}

std::string joined_text(const std::vector<std::string>& payloads, bool chat,
                        std::string* finish = nullptr) {
  std::string text;
  for (const auto& p : payloads) {
    if (p == "[DONE]") continue;
    const json event = json::parse(p);
    if (event["choices"].empty()) continue;  // the usage chunk
    const json& choice = event["choices"][0];
    if (chat) {
      if (choice["delta"].contains("content")) text += choice["delta"]["content"].get<std::string>();
    } else {
      text += choice["text"].get<std::string>();
    }
    if (finish && !choice["finish_reason"].is_null()) *finish = choice["finish_reason"];
  }
  return text;
}

TEST_F(HttpServerTest, HealthModelsAndMetricsAnswer) {
  const Reply health = get(port(), "/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.body["status"], "ok");
  const Reply models = get(port(), "/v1/models");
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(models.body["object"], "list");
  EXPECT_EQ(models.body["data"][0]["id"], "gpt2");
  EXPECT_EQ(models.body["data"][0]["max_model_len"], 64);
  // A request is counted once its answer is written, which the client may see first: read
  // /metrics until the GET of /v1/models is in it (2 s at most).
  const std::string models_line =
      "libai_http_request_duration_seconds_bucket{endpoint=\"/v1/models\",le=\"+Inf\"}";
  Reply metrics = get(port(), "/metrics");
  for (int i = 0; i < 200 && metrics.text.find(models_line) == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    metrics = get(port(), "/metrics");
  }
  ASSERT_EQ(metrics.status, 200);
  for (const char* name :
       {"libai_http_requests_total", "libai_http_request_duration_seconds_bucket",
        "libai_queue_depth", "libai_running_batch_size", "libai_prompt_tokens_total",
        "libai_completion_tokens_total", "libai_http_client_disconnects_total"})
    EXPECT_NE(metrics.text.find(name), std::string::npos) << name;
  // The two GETs before are counted, by endpoint and status.
  EXPECT_GE(metric(metrics.text, "libai_http_requests_total",
                   "endpoint=\"/health\",status=\"200\""), 1);
  EXPECT_NE(metrics.text.find(models_line), std::string::npos);
  const Reply missing = get(port(), "/v2/nothing");
  EXPECT_EQ(missing.status, 404);
  EXPECT_TRUE(missing.body["error"]["message"].is_string()) << missing.text;
}

TEST_F(HttpServerTest, CompletionEqualsThePipelinesGreedyText) {
  const std::string prompt = "Hello, my name is";
  const Reply r = post_json(port(), "/v1/completions",
                            {{"model", "gpt2"}, {"prompt", prompt}, {"max_tokens", 12},
                             {"temperature", 0}});
  ASSERT_EQ(r.status, 200) << r.text;
  EXPECT_EQ(r.body["object"], "text_completion");
  EXPECT_EQ(r.body["model"], "gpt2");
  EXPECT_TRUE(r.body["id"].is_string());
  const json& choice = r.body["choices"][0];
  EXPECT_EQ(choice["index"], 0);
  EXPECT_EQ(choice["text"], greedy_reference(prompt, 12));
  EXPECT_TRUE(choice["finish_reason"] == "length" || choice["finish_reason"] == "stop");
  const json& usage = r.body["usage"];
  auto m = pipelines::TextModel::load(kModels + "gpt2");
  EXPECT_EQ(usage["prompt_tokens"], m.tokenizer().encode(prompt).ids.size());
  EXPECT_EQ(usage["total_tokens"], usage["prompt_tokens"].get<int>() + usage["completion_tokens"].get<int>());
}

TEST_F(HttpServerTest, PromptTokenIdsEqualThePipelinesIds) {
  const std::vector<int64_t> ids = {5, 17, 42, 8};
  const Reply r = post_json(port(), "/v1/completions",
                            {{"prompt", ids}, {"max_tokens", 10}, {"temperature", 0}});
  ASSERT_EQ(r.status, 200) << r.text;
  auto m = pipelines::TextModel::load(kModels + "gpt2");
  models::generation::GenerationConfig g;
  g.max_new_tokens = 10;
  const auto reference = pipelines::generate_ids(m, {ids}, g).at(0);
  EXPECT_EQ(r.body["choices"][0]["text"], reference.text);
  EXPECT_EQ(r.body["usage"]["prompt_tokens"], 4);
}

TEST_F(HttpServerTest, StreamingReassemblesTheUnstreamedText) {
  for (const bool chat : {false, true}) {
    SCOPED_TRACE(chat ? "chat" : "completions");
    const std::string path = chat ? "/v1/chat/completions" : "/v1/completions";
    json body = {{"max_tokens", 20}, {"temperature", 0}};
    if (chat)
      body["messages"] = {{{"role", "system"}, {"content", "Be brief."}},
                          {{"role", "user"}, {"content", "Hello there"}}};
    else
      body["prompt"] = "Once upon a time";
    const Reply whole = post_json(port(), path, body);
    ASSERT_EQ(whole.status, 200) << whole.text;
    const std::string expected = chat ? whole.body["choices"][0]["message"]["content"].get<std::string>()
                                      : whole.body["choices"][0]["text"].get<std::string>();
    if (chat) {
      EXPECT_EQ(whole.body["object"], "chat.completion");
      EXPECT_EQ(whole.body["choices"][0]["message"]["role"], "assistant");
      // The documented chat format (docs/SERVER.md) is a plain prompt: the same text.
      EXPECT_EQ(expected, greedy_reference("system: Be brief.\nuser: Hello there\nassistant:", 20));
    } else {
      EXPECT_EQ(expected, greedy_reference("Once upon a time", 20));
    }

    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    const Streamed s = post_stream(port(), path, body);
    ASSERT_EQ(s.status, 200);
    EXPECT_EQ(s.content_type, "text/event-stream");
    ASSERT_GE(s.payloads.size(), 3u);
    EXPECT_EQ(s.payloads.back(), "[DONE]");
    std::string finish;
    EXPECT_EQ(joined_text(s.payloads, chat, &finish), expected);
    EXPECT_EQ(finish, whole.body["choices"][0]["finish_reason"]);
    const json usage_chunk = json::parse(s.payloads[s.payloads.size() - 2]);
    EXPECT_EQ(usage_chunk["usage"], whole.body["usage"]);
    const json first = json::parse(s.payloads[0]);
    EXPECT_EQ(first["object"], chat ? "chat.completion.chunk" : "text_completion");
    if (chat) {
      EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
    }
  }
}

TEST_F(HttpServerTest, StopStringsEndTheTextStreamedOrNot) {
  const std::string prompt = "The weather today";
  const std::string full = greedy_reference(prompt, 30);
  ASSERT_GE(full.size(), 8u);
  // A stop string from the middle of the greedy text (whole UTF-8 characters: a random model's
  // text has multi-byte ones): the answer is the text before it.
  const auto starts_char = [&](size_t i) { return i >= full.size() || (full[i] & 0xC0) != 0x80; };
  size_t begin = full.size() / 2, end = begin + 2;
  while (begin > 0 && !starts_char(begin)) --begin;
  while (!starts_char(end)) ++end;
  const std::string stop = full.substr(begin, end - begin);
  const std::string expected = full.substr(0, full.find(stop));
  json body = {{"prompt", prompt}, {"max_tokens", 30}, {"temperature", 0},
               {"stop", {stop, "never appears \x01"}}};
  const Reply whole = post_json(port(), "/v1/completions", body);
  ASSERT_EQ(whole.status, 200) << whole.text;
  EXPECT_EQ(whole.body["choices"][0]["text"], expected);
  EXPECT_EQ(whole.body["choices"][0]["finish_reason"], "stop");
  body["stream"] = true;
  const Streamed s = post_stream(port(), "/v1/completions", body);
  ASSERT_EQ(s.status, 200);
  EXPECT_EQ(joined_text(s.payloads, false), expected);
}

TEST_F(HttpServerTest, BadRequestsGetJsonErrors) {
  struct Case {
    std::string path, body;
    int status;
    std::string param;  // "" : none expected
  };
  const std::string c = "/v1/completions";
  const std::vector<Case> cases = {
      {c, "{\"prompt\": \"hi\", ", 400, ""},                                 // malformed JSON
      {c, "[1, 2]", 400, ""},                                                // not an object
      {c, R"({"max_tokens": 3})", 400, "prompt"},                            // missing field
      {c, R"({"prompt": "hi", "max_tokens": "ten"})", 400, "max_tokens"},    // wrong type
      {c, R"({"prompt": 7})", 400, "prompt"},                                // wrong type
      {c, R"({"prompt": "hi", "temperature": "hot"})", 400, "temperature"},  // wrong type
      {c, R"({"prompt": "hi", "stream": "yes"})", 400, "stream"},            // wrong type
      {c, R"({"prompt": "hi", "stop": [1]})", 400, "stop"},                  // wrong type
      {c, R"({"prompt": "hi", "model": "gpt-4"})", 404, "model"},            // unknown model
      {c, R"({"prompt": "hi", "max_tokens": 100000})", 400, "max_tokens"},   // too many tokens
      {c, R"({"prompt": "hi", "n": 3})", 400, "n"},                          // unsupported
      {"/v1/chat/completions", R"({"messages": "hi"})", 400, "messages"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user"}]})", 400, "messages[0].content"},
      {"/v1/embeddings", R"({"input": [1, "a"]})", 400, "input"},
  };
  for (const auto& k : cases) {
    SCOPED_TRACE(k.path + " " + k.body);
    const Reply r = post_raw(port(), k.path, k.body);
    EXPECT_EQ(r.status, k.status) << r.text;
    ASSERT_TRUE(r.body.is_object()) << r.text;
    EXPECT_TRUE(r.body["error"]["message"].is_string());
    EXPECT_FALSE(r.body["error"]["message"].get<std::string>().empty());
    EXPECT_TRUE(r.body["error"]["type"].is_string());
    if (!k.param.empty()) {
      EXPECT_EQ(r.body["error"]["param"], k.param);
    }
  }
  // A prompt longer than the context: the service refuses it, before any event.
  const std::vector<int64_t> long_prompt(80, 7);
  for (const bool stream : {false, true}) {
    const Reply r = post_json(port(), c, {{"prompt", long_prompt}, {"max_tokens", 4}, {"stream", stream}});
    EXPECT_GE(r.status, 400) << r.text;
    EXPECT_LT(r.status, 500) << r.text;
    EXPECT_TRUE(r.body["error"]["message"].is_string()) << r.text;
  }
  // And the server still answers.
  EXPECT_EQ(post_json(port(), c, {{"prompt", "hi"}, {"max_tokens", 2}}).status, 200);
}

TEST_F(HttpServerTest, OversizedBodyIsRefusedUnread) {
  RawSocket s(port());
  // 100 MB announced, 20 bytes sent: the answer comes without the rest.
  s.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
         "Content-Length: 100000000\r\n\r\n{\"prompt\": \"aaaaaaa");
  const std::string answer = s.read_until("}}", 5s);
  EXPECT_EQ(answer.rfind("HTTP/1.1 413", 0), 0u) << answer;
  EXPECT_NE(answer.find("\"error\""), std::string::npos) << answer;
  s.read_until("never", 5s);
  EXPECT_TRUE(s.closed_by_peer());  // the unread body ends the connection
  EXPECT_EQ(get(port(), "/health").status, 200);
  EXPECT_GE(metric(get(port(), "/metrics").text, "libai_http_oversized_requests_total"), 1);
}

TEST_F(HttpServerTest, StalledClientDoesNotBlockOthers) {
  RawSocket stalled(port());
  stalled.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro");
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(post_json(port(), "/v1/completions", {{"prompt", "hi"}, {"max_tokens", 3}}).status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 900ms);  // before the stalled one times out
  // The stalled request is cut off at the read timeout (1 s here).
  stalled.read_until("never", 10s);
  EXPECT_TRUE(stalled.closed_by_peer());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 8s);
}

TEST(HttpServerEmbeddings, EqualThePipelinesVectors) {
  Served bert(kModels + "bert");
  const std::vector<std::string> texts = {"a cat sits on the mat", "dogs run"};
  const Reply r = post_json(bert.port(), "/v1/embeddings", {{"model", "bert"}, {"input", texts}});
  ASSERT_EQ(r.status, 200) << r.text;
  EXPECT_EQ(r.body["object"], "list");
  auto m = pipelines::TextModel::load(kModels + "bert");
  const auto reference = pipelines::embed(m, texts);
  ASSERT_EQ(r.body["data"].size(), 2u);
  int64_t tokens = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const json& d = r.body["data"][i];
    EXPECT_EQ(d["object"], "embedding");
    EXPECT_EQ(d["index"], i);
    const auto v = d["embedding"].get<std::vector<float>>();
    ASSERT_EQ(v.size(), reference[i].size());
    for (size_t j = 0; j < v.size(); ++j) EXPECT_NEAR(v[j], reference[i][j], 1e-5) << i << "," << j;
    tokens += int64_t(m.tokenizer().encode(texts[i]).ids.size());
  }
  EXPECT_EQ(r.body["usage"]["prompt_tokens"], tokens);
  // One text as a string.
  const Reply one = post_json(bert.port(), "/v1/embeddings", {{"input", texts[1]}});
  ASSERT_EQ(one.status, 200) << one.text;
  EXPECT_EQ(one.body["data"].size(), 1u);
}

// A gpt2 with a context of 1024 and random weights: long enough that a stream is still running
// when its client leaves (the fixture's 64 positions finish in a few milliseconds).
std::filesystem::path long_gpt2(const config::testing::TempDir& dir) {
  const std::filesystem::path folder = dir.path() + "/gpt2_long";
  std::filesystem::create_directories(folder);
  json config = json::parse(std::ifstream(kModels + "gpt2/config.json"));
  config["n_positions"] = 1024;
  std::ofstream(folder / "config.json") << config.dump(2);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"})
    std::filesystem::copy_file(kModels + "gpt2/" + f, folder / f);
  auto model = models::create_model(models::HfConfig::load(folder), models::LayerContext{});
  models::init_parameters(*model, 7);
  models::save_model_weights(*model, folder, models::CheckpointLayout::hf);
  return folder;
}

TEST(HttpServerDisconnect, ClientLeavingMidStreamCancelsItsRequest) {
  config::testing::TempDir dir;
  Served served(long_gpt2(dir));
  const std::string body =
      json{{"prompt", "Hello"}, {"max_tokens", 1000}, {"min_tokens", 1000}, {"temperature", 0},
           {"stream", true}}
          .dump();
  {
    RawSocket s(served.port());
    s.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
    const std::string first = s.read_until("data: ", 30s);
    ASSERT_NE(first.find("data: "), std::string::npos) << first;
  }  // closed after the first event
  // The server notices, cancels the request and counts it.
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  std::string text;
  for (;;) {
    text = get(served.port(), "/metrics").text;
    if (metric(text, "libai_requests_total", "outcome=\"cancelled\"") >= 1 ||
        std::chrono::steady_clock::now() > deadline)
      break;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(metric(text, "libai_http_client_disconnects_total"), 1) << text;
  EXPECT_EQ(metric(text, "libai_requests_total", "outcome=\"cancelled\""), 1) << text;
  // Far fewer than 1000 tokens were made, and the next request is answered.
  EXPECT_LT(metric(text, "libai_completion_tokens_total"), 1000) << text;
  const Reply next = post_json(served.port(), "/v1/completions",
                               {{"prompt", "Hi"}, {"max_tokens", 5}, {"min_tokens", 5}, {"temperature", 0}});
  EXPECT_EQ(next.status, 200) << next.text;
  EXPECT_EQ(next.body["usage"]["completion_tokens"], 5);
}

}  // namespace
}  // namespace libai::testing
