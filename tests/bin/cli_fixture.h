// Running libai-actor from a test as a user runs it (popen, exit code, stdout, stderr), and the
// helpers the model command tests compare with: reference rows, softmax, relative error.
//
//   TEST_F(ModelCommands, X) {
//     const json out = run_json("generate --model " + kModels + "gpt2 --prompt-ids 1,2");
//     expect_error("forward --model /nope --input-ids 1", {"--model", "/nope"});
//   }
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/checkpoint/safetensors.h"
#include "tests/config/test_files.h"

namespace libai::testing {

using nlohmann::json;
inline const std::string kBinary = LIBAI_BINARY_DIR "/bin/libai-actor";
inline const std::string kModels = LIBAI_SOURCE_DIR "/tests/data/models/";

// Empty when the binary is there; else the failure to report. A missing binary fails the CLI
// tests (the test targets depend on libai-actor, so it can only be missing from a broken build):
// skipping them would pass a build that ships no command line.
inline std::string missing_binary() {
  if (std::filesystem::exists(kBinary)) return "";
  return "libai-actor is not built (" + kBinary + "): build the libai-actor target";
}

struct Result {
  int exit_code = -1;
  std::string out, err;
};

inline std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

inline std::string id_list(const std::vector<int64_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(ids[i]);
  }
  return out;
}

inline json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

inline std::vector<double> softmax(const std::vector<float>& logits) {
  const double top = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p;
  double total = 0;
  for (float x : logits) total += p.emplace_back(std::exp(double(x) - top));
  for (double& x : p) x /= total;
  return p;
}

// max |a - b| / max |b|.
inline double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - b[i]));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return a.size() == b.size() ? diff / std::max(scale, 1e-30) : INFINITY;
}

// Elements [begin, end) of row `row` of a [batch, ...] tensor, flattened.
inline std::vector<float> row_of(const Tensor& t, int64_t row, int64_t begin = 0,
                                 int64_t end = -1) {
  const std::vector<float> all = t.to_vector<float>();
  const int64_t per_row = t.numel() / t.size(0);
  if (end < 0) end = per_row;
  return {all.begin() + row * per_row + begin, all.begin() + row * per_row + end};
}

// The HF token ids of `text` from a folder's tokenizer_reference.json.
inline std::vector<int64_t> hf_ids(const std::string& model, const std::string& text) {
  const json reference = read_json(kModels + model + "/tokenizer_reference.json");
  for (const auto& c : reference["cases"])
    if (c["text"] == text) return c["input_ids"].get<std::vector<int64_t>>();
  ADD_FAILURE() << "no tokenizer case for " << text;
  return {};
}

// The ids of row `row` of a reference batch without its padding (attention_mask 0).
inline std::vector<int64_t> unpadded_row(const checkpoint::SafetensorsFile& reference,
                                         int64_t row) {
  const auto mask = row_of(reference.tensor("attention_mask"), row);
  const auto ids = row_of(reference.tensor("input_ids"), row);
  std::vector<int64_t> out;
  for (size_t i = 0; i < ids.size(); ++i)
    if (mask[i] != 0) out.push_back(int64_t(ids[i]));
  return out;
}

class ModelCommands : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(missing_binary(), ""); }

  Result run(const std::string& arguments) { return run_program(kBinary, arguments); }

  // `program arguments` (from folder `cwd` when given): exit code, stdout, stderr.
  Result run_program(const std::string& program, const std::string& arguments,
                     const std::string& cwd = "") {
    const std::string err_path = scratch_.file("stderr.txt");
    const std::string command = (cwd.empty() ? "" : "cd " + shell_quote(cwd) + " && ") +
                                shell_quote(program) + " " + arguments + " 2>" +
                                shell_quote(err_path);
    Result result;
    FILE* pipe = popen(command.c_str(), "r");
    if (pipe == nullptr) return result;
    char buffer[4096];
    size_t n;
    while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.out.append(buffer, n);
    const int status = pclose(pipe);
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::stringstream text;
    text << std::ifstream(err_path).rdbuf();
    result.err = text.str();
    return result;
  }

  json run_json(const std::string& arguments) {
    const Result r = run(arguments + " --json");
    EXPECT_EQ(r.exit_code, 0) << arguments << "\n" << r.err;
    return r.exit_code == 0 ? json::parse(r.out) : json();
  }

  // Runs `forward` and returns the file it saved.
  checkpoint::SafetensorsFile forward_saved(const std::string& arguments, const std::string& name) {
    const std::string path = scratch_.file(name);
    const Result r = run("forward " + arguments + " --save " + shell_quote(path));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return checkpoint::SafetensorsFile::open(path);
  }

  // An error: exit 1 and one line on stderr, containing every piece of `expected`.
  void expect_error(const std::string& arguments, const std::vector<std::string>& expected) {
    const Result r = run(arguments);
    EXPECT_EQ(r.exit_code, 1) << arguments;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.rfind("libai-actor: error: ", 0), 0u) << r.err;
    for (const auto& piece : expected) EXPECT_NE(r.err.find(piece), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  }

  config::testing::TempDir scratch_;
};

}  // namespace libai::testing
