// Small random models of every family (4 heads, an odd vocabulary; the Llama family with 2
// key/value heads), saved in Hugging Face
// layout, for the parallelism tests that compare against one device.
#pragma once

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <unistd.h>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "models/convert.h"
#include "models/model.h"
#include "runtime/error.h"

namespace libai::testing {

namespace fs = std::filesystem;
using models::CheckpointLayout;
using models::HfConfig;
using models::LayerContext;

struct Family {
  std::string name;
  nlohmann::json config;
};

inline std::vector<Family> families() {
  using J = nlohmann::json;
  return {
      {"gpt2", J{{"model_type", "gpt2"}, {"architectures", {"GPT2LMHeadModel"}}, {"vocab_size", 37},
                 {"n_embd", 32}, {"n_head", 4}, {"n_layer", 2}, {"n_positions", 16}, {"eos_token_id", 0}}},
      {"bert", J{{"model_type", "bert"}, {"architectures", {"BertForMaskedLM"}}, {"vocab_size", 37},
                 {"hidden_size", 32}, {"num_attention_heads", 4}, {"num_hidden_layers", 2},
                 {"intermediate_size", 48}, {"max_position_embeddings", 16}}},
      {"bert_cls", J{{"model_type", "bert"}, {"architectures", {"BertForSequenceClassification"}},
                     {"vocab_size", 37}, {"hidden_size", 32}, {"num_attention_heads", 4},
                     {"num_hidden_layers", 2}, {"intermediate_size", 48}, {"max_position_embeddings", 16},
                     {"id2label", {{"0", "no"}, {"1", "yes"}, {"2", "maybe"}}}}},
      {"roberta", J{{"model_type", "roberta"}, {"architectures", {"RobertaForMaskedLM"}},
                    {"vocab_size", 37}, {"hidden_size", 32}, {"num_attention_heads", 4},
                    {"num_hidden_layers", 2}, {"intermediate_size", 48}, {"max_position_embeddings", 18},
                    {"type_vocab_size", 1}, {"pad_token_id", 1}}},
      {"t5", J{{"model_type", "t5"}, {"architectures", {"T5ForConditionalGeneration"}}, {"vocab_size", 37},
               {"d_model", 32}, {"d_kv", 8}, {"num_heads", 4}, {"d_ff", 48}, {"num_layers", 2},
               {"num_decoder_layers", 2}, {"feed_forward_proj", "gated-gelu"},
               {"tie_word_embeddings", false}, {"relative_attention_num_buckets", 8},
               {"relative_attention_max_distance", 20}, {"decoder_start_token_id", 0},
               {"pad_token_id", 0}, {"eos_token_id", 1}}},
      {"t5_tied", J{{"model_type", "t5"}, {"architectures", {"T5ForConditionalGeneration"}},
                    {"vocab_size", 37}, {"d_model", 32}, {"d_kv", 8}, {"num_heads", 4}, {"d_ff", 48},
                    {"num_layers", 1}, {"num_decoder_layers", 2}, {"feed_forward_proj", "relu"},
                    {"relative_attention_num_buckets", 8}, {"decoder_start_token_id", 0},
                    {"pad_token_id", 0}, {"eos_token_id", 1}}},
      {"vit", J{{"model_type", "vit"}, {"architectures", {"ViTForImageClassification"}}, {"image_size", 16},
                {"patch_size", 8}, {"num_channels", 3}, {"hidden_size", 32}, {"num_attention_heads", 4},
                {"num_hidden_layers", 2}, {"intermediate_size", 48},
                {"id2label", {{"0", "a"}, {"1", "b"}, {"2", "c"}}}}},
      // Grouped-query attention (4 query heads over 2 key/value heads), untied head.
      {"llama", J{{"model_type", "llama"}, {"architectures", {"LlamaForCausalLM"}}, {"vocab_size", 37},
                  {"hidden_size", 32}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                  {"num_hidden_layers", 2}, {"intermediate_size", 48},
                  {"max_position_embeddings", 16}, {"tie_word_embeddings", false},
                  {"eos_token_id", 0}}},
      // q/k/v biases, tied head.
      {"qwen2", J{{"model_type", "qwen2"}, {"architectures", {"Qwen2ForCausalLM"}}, {"vocab_size", 37},
                  {"hidden_size", 32}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                  {"num_hidden_layers", 2}, {"intermediate_size", 48},
                  {"max_position_embeddings", 16}, {"tie_word_embeddings", true},
                  {"eos_token_id", 0}}},
  };
}

inline Tensor normal_tensor(const Shape& shape, uint32_t seed, double scale = 1.0) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, float(scale));
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = normal(gen);
  return t;
}

inline Tensor ids_tensor(const Shape& shape, uint32_t seed, int64_t vocab) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int64_t> pick(2, vocab - 1);
  Tensor t = Tensor::empty(shape, DType::i64);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int64_t>()[i] = pick(gen);
  return t;
}

// Every way to cut `layers` layers into contiguous stages (2^(layers-1) splits), as the
// numbers of layers per stage: 3 -> {3}, {1, 2}, {2, 1}, {1, 1, 1}.
inline std::vector<std::vector<int>> all_splits(int layers) {
  std::vector<std::vector<int>> splits;
  for (int mask = 0; mask < (1 << (layers - 1)); ++mask) {
    std::vector<int> sizes{1};
    for (int i = 0; i < layers - 1; ++i) {
      if (mask & (1 << i))
        sizes.push_back(1);
      else
        ++sizes.back();
    }
    splits.push_back(sizes);
  }
  return splits;
}

// "1+2+1": a split's layers per stage, as test traces name it.
inline std::string split_name(const std::vector<int>& sizes) {
  std::string s;
  for (int n : sizes) s += (s.empty() ? "" : "+") + std::to_string(n);
  return s;
}

// The message of the InvalidArgument `f` throws; a test failure if it throws nothing or
// another kind of error.
inline std::string invalid_argument_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

// The whole model's parameters whose names start with one of `prefixes`.
inline int64_t whole_parameters(models::Model& model, const std::vector<std::string>& prefixes) {
  int64_t n = 0;
  for (auto& [name, t] : model.named_parameters())
    for (const auto& p : prefixes)
      if (name.rfind(p, 0) == 0) n += t->numel();
  return n;
}

// A random model of the family saved in Hugging Face layout; returns its folder.
// `tag` names the folder (default: this process, as ctest runs tests in parallel processes).
inline fs::path save_random_model(const Family& f, std::string tag = std::to_string(::getpid())) {
  fs::path dir = fs::temp_directory_path() / ("libai_tp_" + f.name + "_" + tag);
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << f.config.dump(2);
  auto model = models::create_model(HfConfig::load(dir), LayerContext{});
  uint32_t seed = 1;
  for (auto& [name, t] : model->named_parameters()) t->copy_from(normal_tensor(t->shape(), seed++, 0.3));
  models::save_model_weights(*model, dir, CheckpointLayout::hf);
  return dir;
}

}  // namespace libai::testing
