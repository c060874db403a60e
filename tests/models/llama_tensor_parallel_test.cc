// The Llama family under tensor parallelism against one device: grouped-query attention with
// 4 query heads over 2 key/value heads, split over 2 ranks (one key/value group each, with
// its two query heads), gives the single-device logits, and each rank's gradient shard the
// matching block of the single-device gradients, for llama (untied, rope scaling) and qwen2
// (q/k/v biases, tied). A tensor-parallel size that does not divide the key/value heads is
// refused with an error naming the family.
#include <gtest/gtest.h>

#include "models/model.h"
#include "ops/ops.h"
#include "parity_util.h"
#include "random_models.h"
#include "runtime/autograd.h"
#include "runtime/comm/spmd.h"
#include "runtime/error.h"
#include "tests/common/shards.h"

namespace libai::models {
namespace {

namespace fs = std::filesystem;
using testing::Family;

Family llama_gqa(const std::string& type) {
  nlohmann::json config = {{"model_type", type},       {"vocab_size", 37},
                           {"hidden_size", 32},        {"num_attention_heads", 4},
                           {"num_key_value_heads", 2}, {"num_hidden_layers", 2},
                           {"intermediate_size", 48},  {"eos_token_id", 0}};
  if (type == "llama") {
    config["rope_scaling"] = {{"rope_type", "llama3"},
                              {"factor", 4.0},
                              {"low_freq_factor", 1.0},
                              {"high_freq_factor", 4.0},
                              {"original_max_position_embeddings", 8}};
    config["tie_word_embeddings"] = false;
    config["attention_bias"] = true;
  } else {
    config["tie_word_embeddings"] = true;
  }
  return {type + "_gqa", config};
}

TensorMap inputs() {
  TensorMap in{{"input_ids", testing::ids_tensor({2, 7}, 98, 37)}};
  Tensor mask = Tensor::ones({2, 7}, DType::i64);
  for (int64_t j = 5; j < 7; ++j) mask.data<int64_t>()[7 + j] = 0;
  in["attention_mask"] = mask;
  return in;
}

struct Result {
  Tensor logits;
  std::map<std::string, Tensor> grads;
  std::map<std::string, ParameterInfo> infos;
};

Result run(Model& model, const TensorMap& in) {
  model.set_requires_grad(true);
  Result r;
  r.logits = model.forward(in).at("logits");
  autograd::backward(ops::sum_all(r.logits * testing::normal_tensor(r.logits.shape(), 7)));
  for (auto& info : model.parameter_infos()) {
    r.grads[info.name] = info.tensor->grad();
    r.infos[info.name] = info;
  }
  r.logits = r.logits.detach();
  return r;
}

class LlamaTensorParallel : public ::testing::TestWithParam<std::string> {};

TEST_P(LlamaTensorParallel, TwoRanksMatchOneDevice) {
  const Family f = llama_gqa(GetParam());
  const fs::path dir = testing::save_random_model(f);
  auto single = load_model(dir);
  const Result expected = run(*single, inputs());
  std::vector<Result> results(2);
  comm::run_spmd_threads(2, [&](comm::Communicator& c) {
    std::shared_ptr<comm::Communicator> group(&c, [](comm::Communicator*) {});
    auto model = load_model(dir, {.tp = group});
    results[c.rank()] = run(*model, inputs());
  });
  for (int rank = 0; rank < 2; ++rank) {
    const Result& r = results[rank];
    EXPECT_LE(testing::relative_error(r.logits, expected.logits), 1e-5) << "rank " << rank;
    ASSERT_EQ(r.grads.size(), expected.grads.size());
    for (const auto& [name, grad] : expected.grads) {
      ASSERT_TRUE(r.grads.count(name) && r.grads.at(name).defined()) << name;
      EXPECT_LE(testing::relative_error(r.grads.at(name),
                                        testing::expected_shard(grad, r.infos.at(name))),
                1e-5)
          << name << " on rank " << rank;
    }
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Families, LlamaTensorParallel, ::testing::Values("llama", "qwen2"));

TEST(LlamaTensorParallelErrors, MoreRanksThanKeyValueHeadsIsUnsupported) {
  const fs::path dir = testing::save_random_model(llama_gqa("llama"));
  std::vector<std::string> messages(4);
  comm::run_spmd_threads(4, [&](comm::Communicator& c) {
    std::shared_ptr<comm::Communicator> group(&c, [](comm::Communicator*) {});
    try {
      load_model(dir, {.tp = group});
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::unsupported) << e.what();
      messages[c.rank()] = e.what();
    }
  });
  for (const auto& m : messages)
    EXPECT_NE(m.find("llama with tensor_parallel_size 4 which does not divide "
                     "num_key_value_heads 2"),
              std::string::npos)
        << m;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace libai::models
