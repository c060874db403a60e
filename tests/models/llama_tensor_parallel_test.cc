// The Llama family under tensor parallelism against one device, for llama (untied, rope
// scaling, biases) and qwen2 (q/k/v biases, tied): grouped-query attention with 4 query heads
// over 2 key/value heads on 2 ranks (one key/value group each), and 8 query heads over 2
// key/value heads on 2, 4 and 8 ranks (at 4 and 8 each key/value head is copied on 2 or 4
// ranks that split its query heads: Note [Partly replicated parameters]). Each gives the
// single-device logits and greedy generation, each rank's gradient block the matching rows
// of the single-device gradients (every copy of a key/value head the whole gradient), and
// the blocks gathered the single-device gradients. A size that neither divides nor is a
// multiple of the key/value heads, or that does not divide the query heads, is refused with
// an error naming the family.
#include <gtest/gtest.h>

#include "models/generation/generate.h"
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

Family llama_gqa(const std::string& type, int64_t heads = 4) {
  nlohmann::json config = {{"model_type", type},       {"vocab_size", 37},
                           {"hidden_size", 32},        {"num_attention_heads", heads},
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
  return {type + "_gqa" + std::to_string(heads), config};
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

// The rows of the single-device `full` that rank `rank` of `tp` holds, written out from the
// layout (Note [Fused q/k/v by head]) rather than from the library's description: the fused
// q/k/v rows are [kv head][q_0 .. q_{g-1} | k | v][head_dim]; with more ranks than key/value
// heads rank t holds its share of head t / copies's query rows, then that head's k and v.
Tensor expected_block(const Tensor& full, const std::string& name, const ParameterInfo& info,
                      int64_t heads, int64_t kv_heads, int64_t head_dim) {
  const int tp = info.tp_size, t = info.tp_rank;
  if (!name.ends_with("attention.qkv.weight") && !name.ends_with("attention.qkv.bias"))
    return testing::expected_shard(full, info);
  if (kv_heads % tp == 0) return testing::expected_shard(full, info);
  const int64_t copies = tp / kv_heads, g = heads / kv_heads, local = heads / tp;
  const int64_t group = (t / copies) * (g + 2) * head_dim;
  return ops::contiguous(
      ops::cat({ops::narrow(full, 0, group + (t % copies) * local * head_dim, local * head_dim),
                ops::narrow(full, 0, group + g * head_dim, 2 * head_dim)},
               0));
}

std::vector<int64_t> greedy(Model& model) {
  generation::GenerationConfig config;
  config.max_new_tokens = 6;
  auto out = generation::generate(*model.generative(), {{5, 9, 3}, {7, 2}}, config);
  std::vector<int64_t> ids;
  for (const auto& prompt : out) ids.insert(ids.end(), prompt[0].tokens.begin(), prompt[0].tokens.end());
  return ids;
}

struct Case {
  std::string type;
  int64_t heads;
  int tp;
};

class LlamaTensorParallel : public ::testing::TestWithParam<Case> {};

TEST_P(LlamaTensorParallel, MatchesOneDevice) {
  const Case c = GetParam();
  const Family f = llama_gqa(c.type, c.heads);
  const int64_t kv_heads = 2, head_dim = 32 / c.heads;
  const fs::path dir = testing::save_random_model(f);
  auto single = load_model(dir);
  const std::vector<int64_t> expected_ids = greedy(*single);
  const Result expected = run(*single, inputs());
  std::vector<Result> results(size_t(c.tp));
  std::vector<std::vector<int64_t>> ids(size_t(c.tp));
  comm::run_spmd_threads(c.tp, [&](comm::Communicator& comm) {
    std::shared_ptr<comm::Communicator> group(&comm, [](comm::Communicator*) {});
    auto model = load_model(dir, {.tp = group});
    ids[size_t(comm.rank())] = greedy(*model);
    results[size_t(comm.rank())] = run(*model, inputs());
  });
  for (int rank = 0; rank < c.tp; ++rank) {
    const Result& r = results[size_t(rank)];
    EXPECT_EQ(ids[size_t(rank)], expected_ids) << "rank " << rank;
    EXPECT_LE(testing::relative_error(r.logits, expected.logits), 1e-5) << "rank " << rank;
    ASSERT_EQ(r.grads.size(), expected.grads.size());
    for (const auto& [name, grad] : expected.grads) {
      ASSERT_TRUE(r.grads.count(name) && r.grads.at(name).defined()) << name;
      const Tensor block =
          expected_block(grad, name, r.infos.at(name), c.heads, kv_heads, head_dim);
      ASSERT_EQ(r.grads.at(name).shape(), block.shape()) << name;
      EXPECT_LE(testing::relative_error(r.grads.at(name), block), 1e-5)
          << name << " on rank " << rank;
    }
  }
  // The library's assembly of the blocks (what a checkpoint writes) is the one-device tensor.
  for (const auto& [name, grad] : expected.grads) {
    std::vector<Tensor> blocks;
    for (const Result& r : results) blocks.push_back(r.grads.at(name));
    EXPECT_LE(testing::relative_error(whole_of_blocks(blocks, results[0].infos.at(name)), grad),
              1e-5)
        << name;
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    Families, LlamaTensorParallel,
    ::testing::Values(Case{"llama", 4, 2}, Case{"qwen2", 4, 2}, Case{"llama", 8, 2},
                      Case{"llama", 8, 4}, Case{"llama", 8, 8}, Case{"qwen2", 8, 4},
                      Case{"qwen2", 8, 8}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return str_cat(info.param.type, "_", info.param.heads, "heads_tp", info.param.tp);
    });

// 3 ranks: neither a divisor nor a multiple of 2 key/value heads; 8 ranks: a multiple, but 4
// query heads do not split over them.
TEST(LlamaTensorParallelErrors, SizesThatDoNotSplitTheHeadsAreUnsupported) {
  const fs::path dir = testing::save_random_model(llama_gqa("llama"));
  for (int tp : {3, 8}) {
    std::vector<std::string> messages(static_cast<size_t>(tp));
    comm::run_spmd_threads(tp, [&](comm::Communicator& c) {
      std::shared_ptr<comm::Communicator> group(&c, [](comm::Communicator*) {});
      try {
        load_model(dir, {.tp = group});
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::unsupported) << e.what();
        messages[size_t(c.rank())] = e.what();
      }
    });
    for (const auto& m : messages)
      EXPECT_NE(m.find(str_cat("llama with tensor_parallel_size ", tp,
                               ": the size must divide num_attention_heads (4) and divide or be "
                               "a multiple of num_key_value_heads (2)")),
                std::string::npos)
          << m;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace libai::models
