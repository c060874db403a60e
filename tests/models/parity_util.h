// Helpers shared by the model parity tests: fixture folders, reference tensors, and the
// relative comparison every parity test uses.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <fstream>

#include <nlohmann/json.hpp>

#include "models/generation/generate.h"
#include "models/model.h"
#include "runtime/checkpoint/safetensors.h"

namespace libai::testing {

inline std::filesystem::path model_fixture(const std::string& name) {
  return std::filesystem::path(LIBAI_SOURCE_DIR) / "tests" / "data" / "models" / name;
}

inline checkpoint::SafetensorsFile reference_of(const std::string& name) {
  return checkpoint::SafetensorsFile::open((model_fixture(name) / "reference.safetensors").string());
}

// max |actual - expected| / max |expected| (shapes must match).
inline double relative_error(const Tensor& actual, const Tensor& expected) {
  EXPECT_EQ(shape_str(actual.shape()), shape_str(expected.shape()));
  if (actual.shape() != expected.shape()) return INFINITY;
  auto a = actual.to_vector<double>(), e = expected.to_vector<double>();
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - e[i]));
    scale = std::max(scale, std::abs(e[i]));
  }
  return diff / std::max(scale, 1e-30);
}

// Every reference output of `names` that the model produced agrees within `tol`.
inline void expect_outputs_match(const models::TensorMap& out, const checkpoint::SafetensorsFile& ref,
                                 const std::vector<std::string>& names, double tol) {
  for (const auto& name : names) {
    if (!ref.contains(name)) continue;
    auto it = out.find(name);
    ASSERT_NE(it, out.end()) << "model did not return " << name;
    const double err = relative_error(it->second, ref.tensor(name));
    EXPECT_LE(err, tol) << name;
    if (std::getenv("LIBAI_PARITY_VERBOSE")) std::printf("  %-28s rel. error %.3g\n", name.c_str(), err);
  }
}

// The reference's output names: logits, last_hidden_state, pooler_output, hidden_states.*.
inline std::vector<std::string> output_names(const checkpoint::SafetensorsFile& ref) {
  std::vector<std::string> out;
  for (const auto& n : ref.names())
    if (n == "logits" || n == "last_hidden_state" || n == "pooler_output" ||
        n.rfind("hidden_states.", 0) == 0 || n.find("_hidden_state") != std::string::npos ||
        n.find("hidden_states.") != std::string::npos)
      out.push_back(n);
  return out;
}

// A fixture's reference.json.
inline nlohmann::json reference_json(const std::string& folder) {
  std::ifstream in(model_fixture(folder) / "reference.json");
  return nlohmann::json::parse(in);
}

// The generate kwargs of a reference.json case as our GenerationConfig.
inline models::generation::GenerationConfig config_from(const nlohmann::json& kwargs) {
  models::generation::GenerationConfig g;
  g.max_new_tokens = kwargs.value("max_new_tokens", int64_t(20));
  g.min_new_tokens = kwargs.value("min_new_tokens", int64_t(0));
  g.num_beams = kwargs.value("num_beams", int64_t(1));
  g.length_penalty = kwargs.value("length_penalty", 1.0);
  g.early_stopping = kwargs.value("early_stopping", false);
  g.num_return_sequences = kwargs.value("num_return_sequences", int64_t(1));
  g.repetition_penalty = kwargs.value("repetition_penalty", 1.0);
  g.no_repeat_ngram_size = kwargs.value("no_repeat_ngram_size", int64_t(0));
  g.do_sample = kwargs.value("do_sample", false);
  if (kwargs.contains("eos_token_id")) {
    const auto& e = kwargs["eos_token_id"];
    if (e.is_array())
      for (const auto& x : e) g.eos_token_ids.push_back(x.get<int64_t>());
    else
      g.eos_token_ids.push_back(e.get<int64_t>());
  }
  if (kwargs.contains("pad_token_id")) g.pad_token_id = kwargs["pad_token_id"].get<int64_t>();
  return g;
}

// Every generation case of a fixture's reference.json that is not sampled (sampled ids depend
// on the RNG): each return sequence's token ids, and for beam cases transformers'
// sequences_scores (flat over prompts x return sequences, printed to 6 decimals; checked to
// 2e-5). Returns whether greedy and beam cases ran.
struct GenerationCasesRun {
  bool greedy = false, beam = false;
};
inline GenerationCasesRun expect_generation_matches_reference(
    models::generation::GenerativeModel& lm, const nlohmann::json& cases,
    const std::string& folder) {
  GenerationCasesRun ran;
  for (const auto& c : cases) {
    const auto& kwargs = c.at("kwargs");
    if (kwargs.value("do_sample", false)) continue;
    const bool beam = kwargs.value("num_beams", int64_t(1)) > 1;
    (beam ? ran.beam : ran.greedy) = true;
    const auto prompts = c.at("prompts").get<std::vector<std::vector<int64_t>>>();
    const auto expected = c.at("output").get<std::vector<std::vector<std::vector<int64_t>>>>();
    const auto results = models::generation::generate(lm, prompts, config_from(kwargs));
    EXPECT_EQ(results.size(), expected.size()) << folder << " case " << c["name"];
    if (results.size() != expected.size()) continue;
    const std::vector<double> scores =
        c.contains("sequences_scores") ? c["sequences_scores"].get<std::vector<double>>()
                                       : std::vector<double>{};
    EXPECT_EQ(scores.empty(), !beam) << folder << " case " << c["name"]
                                     << ": beam cases record sequences_scores";
    size_t k = 0;
    for (size_t p = 0; p < expected.size(); ++p) {
      EXPECT_EQ(results[p].size(), expected[p].size()) << folder << " case " << c["name"];
      for (size_t r = 0; r < std::min(results[p].size(), expected[p].size()); ++r, ++k) {
        EXPECT_EQ(results[p][r].tokens, expected[p][r])
            << folder << " case " << c["name"] << " prompt " << p << " sequence " << r;
        if (k < scores.size()) {
          EXPECT_NEAR(results[p][r].score, scores[k], 2e-5)
              << folder << " case " << c["name"] << " prompt " << p << " sequence " << r
              << ": sequences_scores";
        }
      }
    }
    if (!scores.empty()) {
      EXPECT_EQ(k, scores.size()) << folder << " case " << c["name"];
    }
  }
  return ran;
}

}  // namespace libai::testing
