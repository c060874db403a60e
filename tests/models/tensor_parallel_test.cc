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
#include "random_models.h"
#include "runtime/autograd.h"
#include "runtime/comm/spmd.h"
#include "tests/common/shards.h"

namespace libai::models {
namespace {

namespace fs = std::filesystem;
using testing::families;
using testing::Family;
using testing::ids_tensor;
using testing::normal_tensor;
using testing::save_random_model;

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

using testing::expected_shard;

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
      EXPECT_LE(testing::relative_error(r.grads.at(name), want), 1e-5)
          << name << " on rank " << rank;
    }
  }
}

std::string tp_case_name(const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
  return families()[std::get<0>(info.param)].name + "_tp" + std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Families, TensorParallel,
                         ::testing::Combine(::testing::Range(0, int(families().size())),
                                            ::testing::Values(2, 4)),
                         tp_case_name);

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
          EXPECT_NE(std::string(e.what()).find(
                        "tensor_parallel_size 3 does not divide the number of heads 4"),
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
