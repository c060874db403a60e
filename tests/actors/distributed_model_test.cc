// actors::DistributedModel, the task pipelines' runner over stage actors: a random 4-layer BERT
// through PP = 2 x TP = 2, DP = 2 and PP = 4 gives the last hidden states of the model on one
// device (relative 1e-5) for batches that do and do not divide into its groups, call after
// call; bad layouts and inputs are refused naming what was wrong.
#include <gtest/gtest.h>

#include "actors/jobs/distributed_model.h"
#include "tests/actors/test_system.h"
#include "tests/models/parity_util.h"
#include "runtime/autograd.h"

namespace libai::actors {
namespace {

namespace fs = std::filesystem;

models::TensorMap batch_of(int64_t rows, uint32_t seed) {
  Tensor mask = Tensor::full({rows, 7}, 1.0, DType::i64);
  mask.data<int64_t>()[6] = 0;  // the first row's last position is padding
  return {{"input_ids", testing::ids_tensor({rows, 7}, seed, 37)}, {"attention_mask", mask}};
}

Tensor eager_hidden(const fs::path& folder, const models::TensorMap& batch) {
  autograd::NoGradGuard no_grad;
  return models::load_model(folder)->forward(batch).at("last_hidden_state");
}

struct Case {
  LayoutSizes sizes;
  int groups = 0;
};

class DistributedModelLayouts : public ::testing::TestWithParam<Case> {};

TEST_P(DistributedModelLayouts, EqualsOneDeviceCallAfterCall) {
  const fs::path folder = testing::random_model("bert", 4, "dm");
  DistributedModel model(folder, {.sizes = GetParam().sizes, .groups = GetParam().groups});
  for (const int64_t rows : {5, 1, 4}) {  // 5 rows over 2 or 3 groups: uneven micro-batches
    const models::TensorMap batch = batch_of(rows, uint32_t(rows));
    const models::TensorMap out = model.forward(batch);
    EXPECT_LE(testing::relative_error(out.at("last_hidden_state"), eager_hidden(folder, batch)), 1e-5)
        << rows << " rows";
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, DistributedModelLayouts,
                         ::testing::Values(Case{.sizes = {.dp = 1, .pp = 2, .tp = 2}},
                                           Case{.sizes = {.dp = 2, .pp = 1, .tp = 1}, .groups = 3},
                                           Case{.sizes = {.dp = 1, .pp = 4, .tp = 1}}));

TEST(DistributedModel, EvenStagesGiveEarlierStagesTheRemainder) {
  EXPECT_EQ(even_stage_of(5, 2), (std::vector<int>{0, 0, 0, 1, 1}));
  EXPECT_EQ(even_stage_of(4, 4), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_NE(testing::invalid_argument_of([] { even_stage_of(2, 3); }).find("cannot cut 2 layers into 3"),
            std::string::npos);
}

TEST(DistributedModel, BadLayoutsAndInputsAreRefused) {
  const fs::path folder = testing::random_model("bert", 4, "dm");
  EXPECT_NE(testing::invalid_argument_of([&] { DistributedModel(folder, {.sizes = {.pp = 5}}); })
                .find("cannot cut 4 layers into 5 pipeline stages"),
            std::string::npos);
  EXPECT_NE(testing::invalid_argument_of([&] {
              DistributedModel(folder, {.sizes = {.pp = 2}, .stage_of = {0, 1, 1}});
            }).find("stage_of lists 3 layers, the model has 4"),
            std::string::npos);
  EXPECT_NE(testing::invalid_argument_of([&] { DistributedModel(folder, {.sizes = {.dp = 2}, .groups = 1}); })
                .find("leave some of the 2 replicas without work"),
            std::string::npos);
  DistributedModel model(folder, {.sizes = {.pp = 2}});
  models::TensorMap batch = batch_of(3, 1);
  batch["attention_mask"] = Tensor::full({2, 7}, 1.0, DType::i64);
  EXPECT_NE(testing::invalid_argument_of([&] { model.forward(batch); })
                .find("input input_ids has 3 rows, the others 2"),
            std::string::npos);
  EXPECT_NE(testing::invalid_argument_of([&] { model.forward({}); }).find("no inputs"),
            std::string::npos);
  // The model still answers after refusing.
  const models::TensorMap good = batch_of(2, 9);
  EXPECT_LE(testing::relative_error(model.forward(good).at("last_hidden_state"), eager_hidden(folder, good)),
            1e-5);
}

TEST(DistributedModel, AFamilyWithoutStagesIsRefusedNamingThoseThatHaveThem) {
  const fs::path folder = testing::random_model("vit", 2, "dm");
  EXPECT_NE(testing::invalid_argument_of([&] { DistributedModel(folder, {.sizes = {.pp = 2}}); })
                .find("pipeline stages are not supported for model_type vit"),
            std::string::npos);
}

}  // namespace
}  // namespace libai::actors
