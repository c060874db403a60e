// Swin and SwinV2 (models/swin/swin.h) against transformers' Swin(v2)ForImageClassification on
// the random fixtures tests/data/models/swin and swinv2 (tools/make_fixtures.py): shifted
// windows with their mask, patch merging; from safetensors and from pytorch_model.bin, packed
// too.
#include <gtest/gtest.h>

#include "models/swin/swin.h"
#include "models/vision/image.h"
#include "parity_util.h"
#include "runtime/autograd.h"
#include "runtime/comm/spmd.h"

namespace libai::models {
namespace {

using testing::model_fixture;
using testing::reference_of;

void expect_matches_transformers(const std::string& folder, const LoadOptions& options) {
  SCOPED_TRACE(folder);
  auto model = load_model(model_fixture(folder), options);
  EXPECT_EQ(model->task(), Task::image_classification);
  auto ref = reference_of(folder);
  autograd::NoGradGuard no_grad;
  auto out = model->forward({{"pixel_values", ref.tensor("pixel_values")}});
  const auto names = testing::output_names(ref);
  // logits, last_hidden_state, pooler_output and hidden_states.0 to .<stages>
  ASSERT_EQ(names.size(), folder == "swin" ? 6u : 7u);
  testing::expect_outputs_match(out, ref, names, 1e-4);
}

// swinv2 (tests/data/models/swinv2): three stages, the last smaller than the window, a
// pretrained window in stage 1 and a logit scale above its clamp.
class SwinParity : public ::testing::TestWithParam<std::string> {};

TEST_P(SwinParity, SafetensorsMatchTransformers) {
  expect_matches_transformers(GetParam(), {.format = WeightFormat::safetensors});
}

TEST_P(SwinParity, PytorchBinMatchesTransformers) {
  expect_matches_transformers(GetParam(), {.format = WeightFormat::torch});
}

TEST_P(SwinParity, PackedWeightsMatchTransformers) {
  expect_matches_transformers(GetParam(), {.pack_weights = true});
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SwinParity, ::testing::Values("swin", "swinv2"));

// From an image file through the folder's preprocessor_config.json (bicubic downscaling, as
// transformers' ViTImageProcessor) to the logits: PIL-exact pixels, transformers' logits.
TEST(SwinImage, FileToLogitsMatchesTransformers) {
  const auto processor = vision::ImageProcessor::load(model_fixture("swin"));
  Tensor pixels = processor.preprocess(
      vision::load_image(std::filesystem::path(LIBAI_SOURCE_DIR) / "tests/data/images/gradient.png"));
  auto ref = reference_of("swin");
  EXPECT_LE(testing::relative_error(pixels, ref.tensor("gradient_png.pixel_values")), 1e-5);
  auto model = load_model(model_fixture("swin"));
  autograd::NoGradGuard no_grad;
  Tensor logits = model->forward({{"pixel_values", pixels}}).at("logits");
  EXPECT_LE(testing::relative_error(logits, ref.tensor("gradient_png.scores")), 1e-4);
}

// Tensor parallelism over 2 ranks (heads, the position-bias table's columns and the MLP split):
// every rank's outputs equal transformers'. SwinV2 refuses it for now.
TEST(SwinTensorParallel, TwoRanksMatchTransformers) {
  auto ref = reference_of("swin");
  const auto names = testing::output_names(ref);
  std::vector<TensorMap> got(2);
  comm::run_spmd_threads(2, [&](comm::Communicator& c) {
    std::shared_ptr<comm::Communicator> group(&c, [](comm::Communicator*) {});
    autograd::NoGradGuard no_grad;
    auto model = load_model(model_fixture("swin"), {.tp = group});
    got[size_t(c.rank())] = model->forward({{"pixel_values", ref.tensor("pixel_values")}});
  });
  for (const TensorMap& out : got) testing::expect_outputs_match(out, ref, names, 1e-4);
  comm::run_spmd_threads(2, [&](comm::Communicator& c) {
    std::shared_ptr<comm::Communicator> group(&c, [](comm::Communicator*) {});
    EXPECT_THROW(load_model(model_fixture("swinv2"), {.tp = group}), Unsupported);
  });
}

HfConfig swin_config(nlohmann::json edits) {
  nlohmann::json j = {{"model_type", "swin"},   {"architectures", {"SwinForImageClassification"}},
                      {"image_size", 32},       {"patch_size", 4},
                      {"embed_dim", 16},        {"depths", {2, 2}},
                      {"num_heads", {2, 4}},    {"window_size", 4},
                      {"drop_path_rate", 0.0},  {"num_labels", 3}};
  j.update(edits);
  return HfConfig::from_json(j);
}

TEST(SwinConfigErrors, NameWhatIsWrong) {
  const auto message = [](const nlohmann::json& edits) {
    try {
      SwinConfig c(swin_config(edits));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // Stage 1 is 2 x 2 at image 16: smaller than the window (Note [Swin windows]).
  EXPECT_NE(message({{"image_size", 16}}).find("smaller than window_size 4"), std::string::npos);
  EXPECT_NE(message({{"use_absolute_embeddings", true}}).find("use_absolute_embeddings"),
            std::string::npos);
  EXPECT_NE(message({{"num_heads", {2}}}).find("same nonzero length"), std::string::npos);
  EXPECT_NE(message({{"num_heads", {3, 4}}}).find("heads must divide"), std::string::npos);
  EXPECT_NE(message({{"image_size", 30}}).find("not a multiple of patch_size"), std::string::npos);
  EXPECT_EQ(message(nlohmann::json::object()), "no error");
}

TEST(SwinConfigErrors, WrongImageSizeIsRefused) {
  auto model = load_model(model_fixture("swin"));
  autograd::NoGradGuard no_grad;
  try {
    model->forward({{"pixel_values", Tensor::zeros({1, 3, 64, 64})}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("image_size 32x32"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace libai::models
