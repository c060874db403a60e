// Tensor parallelism against one device: every model family, split over 2 and 4 ranks
// (threads with the local communicator), gives the single-device outputs and, for each rank's
// shard, the matching slice of the single-device parameter gradients. The models are random
// (4 heads, an odd vocabulary so the vocab-parallel tables are padded), saved once in Hugging
// Face layout, and loaded shard by shard by each rank.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "models/convert.h"
#include "ops/ops.h"
#include "parity_util.h"
#include "runtime/autograd.h"
#include "runtime/comm/spmd.h"

namespace libai::models {
namespace {

namespace fs = std::filesystem;

struct Family {
  std::string name;
  nlohmann::json config;
};

std::vector<Family> families() {
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
  };
}

Tensor normal_tensor(const Shape& shape, uint32_t seed, double scale = 1.0) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, float(scale));
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = normal(gen);
  return t;
}

Tensor ids_tensor(const Shape& shape, uint32_t seed, int64_t vocab) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int64_t> pick(2, vocab - 1);
  Tensor t = Tensor::empty(shape, DType::i64);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int64_t>()[i] = pick(gen);
  return t;
}

// A random model of the family saved in Hugging Face layout; returns its folder.
fs::path save_random_model(const Family& f) {
  fs::path dir = fs::temp_directory_path() / ("libai_tp_" + f.name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << f.config.dump(2);
  auto model = create_model(HfConfig::load(dir), LayerContext{});
  uint32_t seed = 1;
  for (auto& [name, t] : model->named_parameters()) t->copy_from(normal_tensor(t->shape(), seed++, 0.3));
  save_model_weights(*model, dir, CheckpointLayout::hf);
  return dir;
}

TensorMap inputs_for(const Family& f) {
  if (f.name == "vit") return {{"pixel_values", normal_tensor({2, 3, 16, 16}, 99)}};
  TensorMap in{{"input_ids", ids_tensor({2, 7}, 98, 37)}};
  Tensor mask = Tensor::ones({2, 7}, DType::i64);
  for (int64_t j = 5; j < 7; ++j) mask.data<int64_t>()[7 + j] = 0;
  in["attention_mask"] = mask;
  if (f.name.rfind("t5", 0) == 0) in["decoder_input_ids"] = ids_tensor({2, 5}, 97, 37);
  return in;
}

struct Result {
  Tensor logits;
  std::map<std::string, Tensor> grads;  // this rank's shard of each parameter's gradient
  std::map<std::string, ParameterInfo> infos;
};

// Forward, then backward of sum(logits * weights) with fixed weights.
Result run(Model& model, const TensorMap& inputs) {
  model.set_requires_grad(true);
  Result r;
  r.logits = model.forward(inputs).at("logits");
  Tensor w = normal_tensor(r.logits.shape(), 7);
  autograd::backward(ops::sum_all(r.logits * w));
  for (auto& info : model.parameter_infos()) {
    r.grads[info.name] = info.tensor->grad();
    r.infos[info.name] = info;
  }
  r.logits = r.logits.detach();
  return r;
}

// The single-device gradient's block that `info` describes (padding rows are zero).
Tensor expected_shard(const Tensor& full, const ParameterInfo& info) {
  if (info.split_dim < 0 || info.tp_size == 1) return full;
  const int d = info.split_dim;
  const int64_t part = (info.logical_shape[d] + info.tp_size - 1) / info.tp_size;
  const int64_t start = info.tp_rank * part;
  const int64_t length = std::clamp<int64_t>(info.logical_shape[d] - start, 0, part);
  Shape shape = full.shape();
  shape[d] = part;
  Tensor out = Tensor::zeros(shape);
  if (length > 0) ops::narrow(out, d, 0, length).copy_from(ops::narrow(full, d, start, length));
  return out;
}

class TensorParallel : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(TensorParallel, OutputsAndGradientsMatchOneDevice) {
  const auto [family_index, tp] = GetParam();
  const Family f = families()[family_index];
  SCOPED_TRACE(f.name + " at tensor_parallel_size " + std::to_string(tp));
  const fs::path dir = save_random_model(f);
  const TensorMap inputs = inputs_for(f);
  auto single = load_model(dir);
  const Result expected = run(*single, inputs);

  std::vector<Result> results(tp);
  comm::run_spmd_threads(tp, [&](comm::Communicator& c) {
    std::shared_ptr<comm::Communicator> group(&c, [](comm::Communicator*) {});
    auto model = load_model(dir, {.tp = group});
    results[c.rank()] = run(*model, inputs);
  });
  for (int rank = 0; rank < tp; ++rank) {
    const Result& r = results[rank];
    EXPECT_LE(testing::relative_error(r.logits, expected.logits), 1e-5) << "rank " << rank;
    for (const auto& [name, grad] : expected.grads) {
      ASSERT_TRUE(r.grads.count(name)) << name;
      ASSERT_TRUE(r.grads.at(name).defined()) << name << " has no gradient on rank " << rank;
      Tensor want = expected_shard(grad, r.infos.at(name));
      EXPECT_LE(testing::relative_error(r.grads.at(name), want), 1e-5) << name << " on rank " << rank;
    }
  }
}

std::string tp_case_name(const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
  return families()[std::get<0>(info.param)].name + "_tp" + std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Families, TensorParallel,
                         ::testing::Combine(::testing::Range(0, 7), ::testing::Values(2, 4)), tp_case_name);

TEST(TensorParallelErrors, SizeThatDoesNotDivideHeadsNamesTheDimension) {
  const Family f = families()[0];
  const fs::path dir = save_random_model(f);
  EXPECT_THROW(
      {
        try {
          comm::run_spmd_threads(3, [&](comm::Communicator& c) {
            std::shared_ptr<comm::Communicator> group(&c, [](comm::Communicator*) {});
            load_model(dir, {.tp = group});
          });
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("tensor_parallel_size 3 does not divide the number of heads 4"),
                    std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
}

TEST(TensorParallelComm, TwoAllReducesOfActivationsPerLayer) {
  const Family f = families()[0];  // gpt2: 2 layers, hidden 32
  const fs::path dir = save_random_model(f);
  const TensorMap inputs = inputs_for(f);
  std::vector<comm::CommStats> stats(2);
  comm::run_spmd_threads(2, [&](comm::Communicator& c) {
    std::shared_ptr<comm::Communicator> group(&c, [](comm::Communicator*) {});
    auto model = load_model(dir, {.tp = group});
    autograd::NoGradGuard no_grad;
    const comm::CommStats before = c.stats();
    model->forward(inputs);
    comm::CommStats after = c.stats();
    after.all_reduce_calls -= before.all_reduce_calls;
    after.all_reduce_elements -= before.all_reduce_elements;
    stats[c.rank()] = after;
  });
  const int64_t b = 2, s = 7, h = 32, layers = 2;
  for (const auto& st : stats) {
    // Per layer: attention out (row) and MLP down (row); plus one for the vocab-parallel
    // embedding lookup.
    EXPECT_EQ(st.all_reduce_calls, 2 * layers + 1);
    EXPECT_EQ(st.all_reduce_elements, (2 * layers + 1) * b * s * h);
  }
}

}  // namespace
}  // namespace libai::models
