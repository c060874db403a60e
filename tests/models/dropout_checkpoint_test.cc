// Dropout keyed by position and activation checkpointing, on the random models of every
// family with their Hugging Face dropout probabilities set above zero:
//  - checkpointing on vs off gives bitwise the same loss and parameter gradients;
//  - tensor parallelism over 2 ranks gives the single-device outputs and gradient slices
//    (the ranks draw the blocks of one mask), and a head-split tensor's mask is the slice of
//    the whole one bitwise;
//  - a batch of 4 and two batches of 2 (sample_offset 0 and 2) give the same samples;
//  - dropout is applied while training at about rate p, and inference is unchanged.
#include <gtest/gtest.h>

#include <cstring>

#include "models/layers/dropout.h"
#include "models/training_mode.h"
#include "ops/ops.h"
#include "parity_util.h"
#include "random_models.h"
#include "runtime/autograd.h"
#include "runtime/comm/spmd.h"
#include "tests/common/shards.h"

namespace libai::models {
namespace {

namespace fs = std::filesystem;
using testing::Family;
using testing::ids_tensor;
using testing::normal_tensor;
using testing::save_random_model;

constexpr double kP = 0.2;

// The family of that name with every dropout probability of its config at kP.
Family with_dropout(const std::string& name) {
  for (Family f : testing::families()) {
    if (f.name != name) continue;
    const std::string type = f.config["model_type"];
    if (type == "gpt2") {
      f.config["embd_pdrop"] = f.config["attn_pdrop"] = f.config["resid_pdrop"] = kP;
    } else if (type == "t5") {
      f.config["dropout_rate"] = kP;
    } else if (type == "llama" || type == "qwen2") {  // transformers' only dropout there
      f.config["attention_dropout"] = kP;
    } else {  // bert, roberta, vit
      f.config["hidden_dropout_prob"] = f.config["attention_probs_dropout_prob"] = kP;
    }
    f.name += "_dropout";
    return f;
  }
  throw std::runtime_error("no family " + name);
}

TensorMap inputs_for(const Family& f, int64_t batch) {
  if (f.config["model_type"] == "vit")
    return {{"pixel_values", normal_tensor({batch, 3, 16, 16}, 99)}};
  TensorMap in{{"input_ids", ids_tensor({batch, 7}, 98, 37)}};
  Tensor mask = Tensor::ones({batch, 7}, DType::i64);
  for (int64_t j = 5; j < 7; ++j) mask.data<int64_t>()[7 + j] = 0;  // sample 1 is padded
  in["attention_mask"] = mask;
  if (f.config["model_type"] == "t5") in["decoder_input_ids"] = ids_tensor({batch, 5}, 97, 37);
  return in;
}

// Rows [begin, end) of every input.
TensorMap rows(const TensorMap& in, int64_t begin, int64_t end) {
  TensorMap out;
  for (const auto& [name, t] : in) out[name] = ops::contiguous(ops::slice(t, 0, begin, end));
  return out;
}

TrainingMode training(bool checkpoint = false, int64_t sample_offset = 0) {
  return {.training = true,
          .seed = 1234,
          .step = 3,
          .sample_offset = sample_offset,
          .activation_checkpoint = checkpoint};
}

struct Result {
  Tensor logits;
  std::map<std::string, Tensor> grads;
  std::map<std::string, ParameterInfo> infos;
};

// Forward under `mode`, then backward of sum(logits * w) after the mode's scope has ended (a
// checkpoint's recomputation must not depend on the thread's mode at backward time).
Result run(Model& model, const TensorMap& inputs, const TrainingMode& mode) {
  model.set_requires_grad(true);
  Result r;
  {
    TrainingModeGuard guard(mode);
    r.logits = model.forward(inputs).at("logits");
  }
  Tensor w = normal_tensor(r.logits.shape(), 7);
  autograd::backward(ops::sum_all(r.logits * w));
  for (auto& info : model.parameter_infos()) {
    r.grads[info.name] = info.tensor->grad();
    r.infos[info.name] = info;
  }
  r.logits = r.logits.detach();
  return r;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor ca = a.clone_raw(), cb = b.clone_raw();
  return std::memcmp(ca.data<float>(), cb.data<float>(), size_t(ca.numel()) * sizeof(float)) == 0;
}

const std::vector<std::string> kFamilies = {"gpt2", "bert", "bert_cls", "roberta",
                                            "t5",   "vit",  "llama",    "qwen2"};

class DropoutFamilies : public ::testing::TestWithParam<std::string> {};

TEST_P(DropoutFamilies, CheckpointingGivesBitwiseTheSameGradients) {
  const Family f = with_dropout(GetParam());
  const fs::path dir = save_random_model(f);
  const TensorMap inputs = inputs_for(f, 2);
  auto plain_model = load_model(dir);
  auto checkpointed_model = load_model(dir);
  const Result plain = run(*plain_model, inputs, training(false));
  const Result checkpointed = run(*checkpointed_model, inputs, training(true));
  EXPECT_TRUE(bitwise_equal(plain.logits, checkpointed.logits));
  for (const auto& [name, grad] : plain.grads) {
    ASSERT_TRUE(grad.defined()) << name << " has no gradient";
    ASSERT_TRUE(checkpointed.grads.at(name).defined())
        << name << " has no gradient when checkpointed";
    EXPECT_TRUE(bitwise_equal(grad, checkpointed.grads.at(name))) << name;
  }
  // Dropout was on: the eval forward differs.
  autograd::NoGradGuard no_grad;
  Tensor eval = plain_model->forward(inputs).at("logits");
  EXPECT_GT(testing::relative_error(plain.logits, eval), 1e-3);
}

using testing::expected_shard;

TEST_P(DropoutFamilies, TensorParallelRanksDrawTheSingleDeviceMasks) {
  const Family f = with_dropout(GetParam());
  const fs::path dir = save_random_model(f);
  const TensorMap inputs = inputs_for(f, 2);
  auto single = load_model(dir);
  const Result expected = run(*single, inputs, training());
  std::vector<Result> results(2);
  comm::run_spmd_threads(2, [&](comm::Communicator& c) {
    std::shared_ptr<comm::Communicator> group(&c, [](comm::Communicator*) {});
    auto model = load_model(dir, {.tp = group});
    results[c.rank()] = run(*model, inputs, training());  // the mode is per thread
  });
  for (int rank = 0; rank < 2; ++rank) {
    const Result& r = results[rank];
    EXPECT_LE(testing::relative_error(r.logits, expected.logits), 1e-5) << "rank " << rank;
    for (const auto& [name, grad] : expected.grads) {
      ASSERT_TRUE(r.grads.at(name).defined()) << name << " has no gradient on rank " << rank;
      EXPECT_LE(testing::relative_error(r.grads.at(name), expected_shard(grad, r.infos.at(name))),
                1e-5)
          << name << " on rank " << rank;
    }
  }
}

TEST_P(DropoutFamilies, MicroBatchesAtTheirSampleOffsetsMatchTheWholeBatch) {
  const Family f = with_dropout(GetParam());
  const fs::path dir = save_random_model(f);
  const TensorMap inputs = inputs_for(f, 4);
  auto model = load_model(dir);
  autograd::NoGradGuard no_grad;
  Tensor whole, first, second;
  {
    TrainingModeGuard guard(training(false, 0));
    whole = model->forward(inputs).at("logits");
    first = model->forward(rows(inputs, 0, 2)).at("logits");
  }
  {
    TrainingModeGuard guard(training(false, 2));
    second = model->forward(rows(inputs, 2, 4)).at("logits");
  }
  EXPECT_LE(testing::relative_error(first, ops::slice(whole, 0, 0, 2)), 1e-5);
  EXPECT_LE(testing::relative_error(second, ops::slice(whole, 0, 2, 4)), 1e-5);
  // The second half at offset 0 draws the first half's masks: different outputs.
  TrainingModeGuard guard(training(false, 0));
  Tensor misplaced = model->forward(rows(inputs, 2, 4)).at("logits");
  EXPECT_GT(testing::relative_error(misplaced, ops::slice(whole, 0, 2, 4)), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Families, DropoutFamilies, ::testing::ValuesIn(kFamilies),
                         [](const auto& info) { return info.param; });

TEST(DropoutLayer, HeadShardIsTheSliceOfTheWholeMaskBitwise) {
  Dropout drop(0.3);
  Tensor x = normal_tensor({3, 4, 5, 6}, 11);  // [batch, heads, q, k]
  TrainingModeGuard guard(training(false, 5));
  Tensor whole = drop.forward(x);
  for (int64_t rank = 0; rank < 2; ++rank) {
    Tensor shard = drop.forward(ops::contiguous(ops::slice(x, 1, 2 * rank, 2 * rank + 2)),
                                {.dim = 1, .start = 2 * rank, .logical_size = 4});
    EXPECT_TRUE(bitwise_equal(shard, ops::slice(whole, 1, 2 * rank, 2 * rank + 2))) << rank;
  }
}

TEST(DropoutLayer, KeptFractionIsAboutOneMinusPAndOffWhenNotTraining) {
  Dropout drop(0.3);
  Tensor x = Tensor::ones({100, 1000});
  EXPECT_TRUE(drop.forward(x).shares_storage(x));  // the default mode is inference
  TrainingModeGuard guard(training());
  std::vector<float> y = drop.forward(x).to_vector<float>();
  double kept = 0;
  for (float v : y) {
    ASSERT_TRUE(v == 0.0f || v == float(1.0 / 0.7)) << v;
    kept += v != 0.0f;
  }
  EXPECT_NEAR(kept / double(y.size()), 0.7, 0.006);  // 100k draws: 4 sigma is 0.0058
  TrainingModeGuard eval({.training = false, .seed = 1234});
  EXPECT_TRUE(drop.forward(x).shares_storage(x));
}

TEST(DropoutModels, InferenceIsUnchangedByTheDropoutConfig) {
  // Eval mode: a model with dropout probabilities gives the outputs of the same weights
  // without them, bitwise.
  for (const std::string& name : {std::string("gpt2"), std::string("t5")}) {
    Family f = with_dropout(name);
    const fs::path dir = save_random_model(f, "with_" + std::to_string(::getpid()));
    Family g = f;
    for (const char* key : {"embd_pdrop", "attn_pdrop", "resid_pdrop", "dropout_rate"})
      if (g.config.contains(key)) g.config[key] = 0.0;
    std::ofstream(dir / "config.json") << g.config.dump(2);
    auto without = load_model(dir);
    std::ofstream(dir / "config.json") << f.config.dump(2);
    auto with = load_model(dir);
    autograd::NoGradGuard no_grad;
    const TensorMap inputs = inputs_for(f, 2);
    EXPECT_TRUE(
        bitwise_equal(with->forward(inputs).at("logits"), without->forward(inputs).at("logits")))
        << name;
  }
}

// autograd::checkpoint on its own: the gradients of a plain graph, parameters' hooks called.
TEST(Checkpoint, GradientsAndHooksAsWithoutIt) {
  Tensor w = normal_tensor({4, 4}, 21).set_requires_grad(true);
  Tensor w2 = normal_tensor({4, 4}, 21).set_requires_grad(true);
  Tensor x = normal_tensor({3, 4}, 22).set_requires_grad(true);
  Tensor x2 = x.detach().set_requires_grad(true);
  auto block = [](const Tensor& in, const Tensor& weight) {
    return ops::tanh(ops::matmul(in, weight)) * in;
  };
  int hooks = 0;
  w2.add_grad_ready_hook([&](const Tensor&) { ++hooks; });
  autograd::backward(ops::sum_all(block(block(x, w), w)));
  Tensor y = autograd::checkpoint([&](const std::vector<Tensor>& in) { return block(in[0], w2); },
                                  {block(x2, w2)});
  autograd::backward(ops::sum_all(y));
  EXPECT_TRUE(bitwise_equal(w.grad(), w2.grad()));
  EXPECT_TRUE(bitwise_equal(x.grad(), x2.grad()));
  EXPECT_EQ(hooks, 2);  // once inside the checkpoint's backward, once outside
  // A checkpoint whose input needs no gradient still reaches the parameters inside.
  Tensor w3 = normal_tensor({4, 4}, 21).set_requires_grad(true);
  Tensor z = autograd::checkpoint([&](const std::vector<Tensor>& in) { return block(in[0], w3); },
                                  {x.detach()});
  autograd::backward(ops::sum_all(z));
  EXPECT_TRUE(w3.grad().defined());
}

}  // namespace
}  // namespace libai::models
