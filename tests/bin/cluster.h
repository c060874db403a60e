// Several libai-actor processes on loopback, as users run them on several nodes: launch each
// node with its own arguments and environment, read its output, kill it, reap it with a
// deadline. Every child is killed and reaped when the test ends (never an orphan).
//
//   Cluster cluster;
//   int port = free_port();
//   cluster.launch({"run", config, "--node-rank", "1", "--port", std::to_string(port)});
//   auto code = cluster.wait(0, std::chrono::seconds(60));   // exit code, -1 on timeout
//
// Under a sanitizer every wait is kTimeScale times as long (tests/common/time_scale.h); the
// nodes' own timeouts (the config's) are not: a test of one still sees it expire.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/bin/cli_fixture.h"
#include "tests/common/time_scale.h"

namespace libai::testing {

// A port that was free a moment ago (the kernel picks it).
inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class Cluster {
 public:
  Cluster() {
    std::string pattern = (std::filesystem::temp_directory_path() / "libai_cluster_XXXXXX").string();
    dir_ = ::mkdtemp(pattern.data()) != nullptr ? pattern : std::string("/tmp");
  }
  ~Cluster() {
    for (auto& node : nodes_)
      if (node.pid > 0 && !node.reaped) {
        ::kill(node.pid, SIGKILL);
        ::waitpid(node.pid, nullptr, 0);
      }
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  const std::string& dir() const { return dir_; }

  // Starts `libai-actor args...`; returns its index.
  int launch(const std::vector<std::string>& args, const std::map<std::string, std::string>& env = {}) {
    if (const std::string missing = missing_binary(); !missing.empty()) ADD_FAILURE() << missing;
    Node node;
    const int index = int(nodes_.size());
    node.out = dir_ + "/node" + std::to_string(index) + ".out";
    node.err = dir_ + "/node" + std::to_string(index) + ".err";
    node.pid = ::fork();
    if (node.pid == 0) {
      for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
      int out = ::open(node.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int err = ::open(node.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(out, 1);
      ::dup2(err, 2);
      std::vector<char*> argv{const_cast<char*>(kBinary.c_str())};
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(kBinary.c_str(), argv.data());
      ::_exit(127);
    }
    nodes_.push_back(node);
    return index;
  }

  // The exit code (128 + signal when killed), or -1 when it still runs after `timeout`.
  int wait(int index, std::chrono::milliseconds timeout) {
    Node& node = nodes_[size_t(index)];
    if (node.reaped) return node.code;
    const auto deadline = std::chrono::steady_clock::now() + timeout * kTimeScale;
    for (;;) {
      int status = 0;
      const pid_t done = ::waitpid(node.pid, &status, WNOHANG);
      if (done == node.pid) {
        node.reaped = true;
        node.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return node.code;
      }
      if (std::chrono::steady_clock::now() > deadline) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  void signal(int index, int sig) { ::kill(nodes_[size_t(index)].pid, sig); }
  std::string out(int index) const { return read_file(nodes_[size_t(index)].out); }
  std::string err(int index) const { return read_file(nodes_[size_t(index)].err); }
  // Waits until `text` appears in the node's stderr (its log); false after `timeout`.
  bool wait_for_log(int index, const std::string& text, std::chrono::milliseconds timeout) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout * kTimeScale;
    while (std::chrono::steady_clock::now() < deadline) {
      if (err(index).find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

 private:
  struct Node {
    pid_t pid = -1;
    std::string out, err;
    bool reaped = false;
    int code = -1;
  };
  std::string dir_;
  std::vector<Node> nodes_;
};

}  // namespace libai::testing
