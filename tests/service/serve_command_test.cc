// `libai-actor serve` as a user runs it: a process on a free port, queried over HTTP, then
// stopped with SIGTERM, which must end it cleanly (exit 0) and promptly.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <thread>

#include "tests/service/http_client.h"

namespace libai::testing {
namespace {

using namespace std::chrono_literals;
const std::string kBinary = LIBAI_BINARY_DIR "/bin/libai-actor";
const std::string kModels = LIBAI_SOURCE_DIR "/tests/data/models/";

// Waits for the child to exit, at most `timeout`; -1 if it did not.
int wait_exit(pid_t pid, std::chrono::milliseconds timeout, int& status) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) return 0;
    std::this_thread::sleep_for(10ms);
  }
  return -1;
}

TEST(ServeCommand, AnswersAndStopsCleanlyOnSigterm) {
  ASSERT_TRUE(std::filesystem::exists(kBinary)) << "build the libai-actor target: " << kBinary;
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  const std::string model = kModels + "gpt2";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    ::close(out[0]);
    ::close(out[1]);
    ::execl(kBinary.c_str(), kBinary.c_str(), "serve", "--model", model.c_str(), "--port", "0",
            "--threads", "2", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out[1]);
  // "serving gpt2 on http://127.0.0.1:PORT", within a deadline.
  std::string line;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (line.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    pollfd p{out[0], POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char c[256];
    const ssize_t n = ::read(out[0], c, sizeof c);
    if (n <= 0) break;
    line.append(c, size_t(n));
  }
  ::close(out[0]);
  std::smatch m;
  const bool started = std::regex_search(line, m, std::regex(R"(serving gpt2 on http://127\.0\.0\.1:(\d+))"));
  if (!started) {
    ::kill(pid, SIGKILL);
    int ignored;
    ::waitpid(pid, &ignored, 0);
    FAIL() << "no 'serving' line: " << line;
  }
  const int port = std::stoi(m[1]);

  EXPECT_EQ(get(port, "/health").status, 200);
  const Reply r = post_json(port, "/v1/completions",
                            {{"prompt", "Hello"}, {"max_tokens", 4}, {"min_tokens", 4}, {"temperature", 0}});
  EXPECT_EQ(r.status, 200) << r.text;
  EXPECT_EQ(r.body["usage"]["completion_tokens"], 4) << r.text;

  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  int status = 0;
  if (wait_exit(pid, 20s, status) != 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    FAIL() << "serve did not exit within 20 s of SIGTERM";
  }
  ASSERT_TRUE(WIFEXITED(status)) << "ended by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(ServeCommand, AMissingConfigIsOneClearError) {
  const std::string command = kBinary + " serve no_such_cluster.yaml 2>&1";
  FILE* p = ::popen(command.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string text;
  char buffer[512];
  while (std::fgets(buffer, sizeof buffer, p)) text += buffer;
  const int status = ::pclose(p);
  EXPECT_EQ(WEXITSTATUS(status), 1) << text;
  EXPECT_NE(text.find("no_such_cluster.yaml"), std::string::npos) << text;
}

}  // namespace
}  // namespace libai::testing
