// compute_loss at tensor parallel sizes 2 and 4 (ranks on threads) against one device, for a
// small random model of every task (tests/models/random_models.h: 4 heads, vocabulary 37, so
// the LM heads' shards are uneven and padded): the loss within 1e-5 and each rank's block of
// every parameter's gradient within 1e-5. The LM heads go through the vocab-parallel loss.
#include <gtest/gtest.h>

#include <algorithm>

#include "../models/parity_util.h"
#include "../models/random_models.h"
#include "ops/ops.h"
#include "runtime/autograd.h"
#include "runtime/comm/spmd.h"
#include "tests/common/shards.h"
#include "train/loss.h"

namespace libai::train {
namespace {

namespace fs = std::filesystem;
using models::TensorMap;
using testing::Family;
using testing::ids_tensor;
using testing::normal_tensor;
using testing::relative_error;

std::vector<Family> loss_families() {
  std::vector<Family> out = testing::families();
  Family pretraining = out[1];  // bert
  pretraining.name = "bert_pretraining";
  pretraining.config["architectures"] = {"BertForPreTraining"};
  Family regression = out[2];  // bert_cls
  regression.name = "bert_regression";
  regression.config.erase("id2label");
  regression.config["num_labels"] = 1;
  out.push_back(pretraining);
  out.push_back(regression);
  return out;
}

TensorMap batch_for(const Family& f) {
  if (f.name == "vit")
    return {{"pixel_values", normal_tensor({2, 3, 16, 16}, 99)},
            {"labels", Tensor::from_vector<int64_t>({1, 2})}};
  TensorMap batch{{"input_ids", ids_tensor({2, 7}, 98, 37)}};
  Tensor mask = Tensor::ones({2, 7}, DType::i64);
  for (int64_t j = 5; j < 7; ++j) mask.data<int64_t>()[7 + j] = 0;
  batch["attention_mask"] = mask;
  if (f.name == "bert_cls") {
    batch["labels"] = Tensor::from_vector<int64_t>({2, 0});
  } else if (f.name == "bert_regression") {
    batch["labels"] = Tensor::from_vector<float>({0.5f, -1.25f});
  } else if (f.name.rfind("t5", 0) == 0) {
    Tensor labels = ids_tensor({2, 5}, 97, 37);
    labels.data<int64_t>()[1] = labels.data<int64_t>()[8] = labels.data<int64_t>()[9] = -100;
    batch["labels"] = labels;     // decoder_input_ids: labels shifted right
  } else if (f.name != "gpt2" && f.name != "llama" && f.name != "qwen2") {  // masked LM: a target at every third position
    Tensor labels = ids_tensor({2, 7}, 96, 37);
    for (int64_t i = 0; i < 14; ++i)
      if (i % 3 != 0) labels.data<int64_t>()[i] = -100;
    batch["labels"] = labels;
    if (f.name == "bert_pretraining")
      batch["next_sentence_label"] = Tensor::from_vector<int64_t>({1, 0});
  }  // causal LMs (gpt2, llama, qwen2): labels default to input_ids with padding ignored
  return batch;
}

struct Result {
  double loss = 0;
  int64_t targets = 0;
  int64_t shard_vocab = 0;  // the logits shard's vocabulary when the vocab-parallel loss ran
  std::map<std::string, Tensor> grads;
  std::map<std::string, models::ParameterInfo> infos;
};

Result run(const fs::path& dir, const TensorMap& batch,
           const std::shared_ptr<comm::Communicator>& tp) {
  auto model = models::load_model(dir, {.tp = tp});
  model->set_requires_grad(true);
  LossOutput out = compute_loss(*model, batch);
  autograd::backward(out.loss);
  Result r{out.loss.item<double>(), out.targets, model->logits_shard_layout().vocab, {}, {}};
  EXPECT_FALSE(model->logits_shard()) << "compute_loss left the model in shard mode";
  for (auto& info : model->parameter_infos()) {
    r.grads[info.name] = info.tensor->grad();
    r.infos[info.name] = info;
  }
  return r;
}

using testing::expected_shard;

class LossTensorParallel : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(LossTensorParallel, LossAndGradientsMatchOneDevice) {
  const auto [index, tp] = GetParam();
  const Family f = loss_families()[index];
  const fs::path dir = testing::save_random_model(f, "loss_" + std::to_string(::getpid()));
  const TensorMap batch = batch_for(f);
  const Result one = run(dir, batch, nullptr);
  EXPECT_EQ(one.shard_vocab, 0);
  std::vector<Result> results(tp);
  comm::run_spmd_threads(tp, [&](comm::Communicator& c) {
    std::shared_ptr<comm::Communicator> group(&c, [](comm::Communicator*) {});
    results[c.rank()] = run(dir, batch, group);
  });
  const bool lm = f.name != "bert_cls" && f.name != "bert_regression" && f.name != "vit";
  for (int rank = 0; rank < tp; ++rank) {
    const Result& r = results[rank];
    EXPECT_LE(std::abs(r.loss - one.loss), 1e-5 * std::abs(one.loss)) << "rank " << rank;
    EXPECT_EQ(r.targets, one.targets);
    EXPECT_EQ(r.shard_vocab, lm ? 37 : 0) << "the LM head's loss should take the logits shard";
    for (const auto& [name, grad] : one.grads) {
      if (!grad.defined()) continue;
      ASSERT_TRUE(r.grads.at(name).defined()) << name << " has no gradient on rank " << rank;
      EXPECT_LE(relative_error(r.grads.at(name), expected_shard(grad, r.infos.at(name))), 1e-5)
          << name << " on rank " << rank;
    }
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Families, LossTensorParallel,
                         ::testing::Combine(::testing::Range(0, int(loss_families().size())),
                                            ::testing::Values(2, 4)),
                         [](const auto& info) {
                           return loss_families()[std::get<0>(info.param)].name + "_tp" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace libai::train
