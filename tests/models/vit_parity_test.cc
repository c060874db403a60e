// ViT against Hugging Face transformers: ViTForImageClassification (tests/data/models/vit) and
// ViTModel with its pooler (vit_backbone), made by tools/make_fixtures.py, loaded from
// safetensors (f32 and as bf16); plus the errors for pixel values of the wrong shape,
// a ViTModel checkpoint without a pooler, and an image file run end to end.
#include <gtest/gtest.h>

#include <cmath>

#include "models/layers/patch_embedding.h"
#include "models/vision/image.h"
#include "ops/ops.h"
#include "parity_util.h"
#include "runtime/autograd.h"

namespace libai::models {
namespace {

using testing::model_fixture;
using testing::reference_of;

struct VitCase {
  std::string folder;
  WeightFormat format;
  DType dtype;
  double tolerance;
};

void PrintTo(const VitCase& c, std::ostream* os) { *os << c.folder << " " << dtype_name(c.dtype); }

std::string case_name(const ::testing::TestParamInfo<VitCase>& info) {
  const auto& c = info.param;
  const char* format = c.format == WeightFormat::torch         ? "torch"
                       : c.format == WeightFormat::safetensors ? "safetensors"
                                                               : "any";
  return c.folder + "_" + format + "_" + dtype_name(c.dtype);
}

class VitParity : public ::testing::TestWithParam<VitCase> {};

TEST_P(VitParity, OutputsMatchTransformers) {
  const auto& c = GetParam();
  LoadOptions options;
  options.dtype = c.dtype;
  options.format = c.format;
  auto model = load_model(model_fixture(c.folder), options);
  auto ref = reference_of(c.folder);
  autograd::NoGradGuard no_grad;
  auto out = model->forward({{"pixel_values", ref.tensor("pixel_values")}});
  auto names = testing::output_names(ref);
  // The head's output must be in the reference, so that the comparison cannot pass vacuously.
  const char* head = model->task() == Task::image_classification ? "logits" : "pooler_output";
  ASSERT_TRUE(ref.contains(head)) << c.folder;
  ASSERT_TRUE(ref.contains("hidden_states.2")) << c.folder;
  testing::expect_outputs_match(out, ref, names, c.tolerance);
}

INSTANTIATE_TEST_SUITE_P(
    Vit, VitParity,
    ::testing::Values(VitCase{"vit", WeightFormat::safetensors, DType::f32, 1e-4},
                      VitCase{"vit_backbone", WeightFormat::any, DType::f32, 1e-4},
                      VitCase{"vit", WeightFormat::any, DType::bf16, 5e-2}),
    case_name);

TEST(VitModel, HeadsTasksAndLabels) {
  auto classifier = load_model(model_fixture("vit"));
  EXPECT_EQ(classifier->task(), Task::image_classification);
  EXPECT_EQ(classifier->config().labels(),
            (std::vector<std::string>{"cat", "dog", "bird", "fish", "frog"}));
  auto encoder = load_model(model_fixture("vit_backbone"));
  EXPECT_EQ(encoder->task(), Task::encoder);
  EXPECT_NE(encoder->find_parameter("pooler.weight"), nullptr);
  EXPECT_EQ(classifier->find_parameter("pooler.weight"), nullptr);
}

TEST(VitModel, EachImageOfABatchIsIndependent) {
  auto model = load_model(model_fixture("vit"));
  auto ref = reference_of("vit");
  autograd::NoGradGuard no_grad;
  Tensor second = ops::narrow(ref.tensor("pixel_values"), 0, 1, 1);  // [1, 3, 32, 32]
  auto out = model->forward({{"pixel_values", second}});
  EXPECT_LE(testing::relative_error(out.at("logits"), ops::narrow(ref.tensor("logits"), 0, 1, 1)),
            1e-4);
}

// The unfold + GEMM patch embedding against a direct strided convolution, with patches that
// are not square, two channels and a batch of two.
TEST(PatchEmbedding, MatchesADirectConvolution) {
  const int64_t batch = 2, channels = 2, ph = 2, pw = 3, height = 4, width = 9, hidden = 5;
  PatchEmbedding layer(
      {}, {.channels = channels, .patch_height = ph, .patch_width = pw, .hidden = hidden});
  auto params = layer.named_parameters();
  ASSERT_EQ(params[0].first, "weight");
  ASSERT_EQ(params[0].second->shape(), (Shape{hidden, channels, ph, pw}));
  std::vector<float> w(size_t(params[0].second->numel())), b(hidden),
      x(size_t(batch * channels * height * width));
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.7f * float(i));
  for (size_t i = 0; i < b.size(); ++i) b[i] = 0.1f * float(i);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.3f * float(i));
  params[0].second->copy_from(Tensor::from_vector(w, params[0].second->shape()));
  params[1].second->copy_from(Tensor::from_vector(b, {hidden}));
  Tensor y = layer.forward(Tensor::from_vector(x, {batch, channels, height, width}));
  const int64_t rows = height / ph, cols = width / pw;
  ASSERT_EQ(y.shape(), (Shape{batch, rows * cols, hidden}));
  auto got = y.to_vector<float>();
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        for (int64_t o = 0; o < hidden; ++o) {
          double sum = b[o];
          for (int64_t k = 0; k < channels; ++k)
            for (int64_t i = 0; i < ph; ++i)
              for (int64_t j = 0; j < pw; ++j)
                sum += double(w[((o * channels + k) * ph + i) * pw + j]) *
                       x[((n * channels + k) * height + r * ph + i) * width + c * pw + j];
          EXPECT_NEAR(got[size_t((n * rows * cols + r * cols + c) * hidden + o)], sum, 1e-5);
        }
  EXPECT_THROW(layer.forward(Tensor::zeros({1, channels, 5, 9})), InvalidArgument);  // 5 % 2 != 0
}

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no InvalidArgument)";
}

TEST(VitModel, RejectsPixelValuesOfTheWrongShape) {
  auto model = load_model(model_fixture("vit"));
  autograd::NoGradGuard no_grad;
  const std::string size = error_of([&] {
    model->forward({{"pixel_values", Tensor::zeros({1, 3, 48, 48})}});
  });
  EXPECT_NE(size.find("48x48"), std::string::npos) << size;
  EXPECT_NE(size.find("image_size 32x32"), std::string::npos) << size;
  const std::string channels = error_of([&] {
    model->forward({{"pixel_values", Tensor::zeros({1, 1, 32, 32})}});
  });
  EXPECT_NE(channels.find("[1, 1, 32, 32]"), std::string::npos) << channels;
  const std::string missing = error_of([&] { model->forward({}); });
  EXPECT_NE(missing.find("pixel_values"), std::string::npos) << missing;
}

TEST(VitModel, EncoderWithoutPoolerWeightsHasNoPooler) {
  // A ViTModel whose checkpoint lacks the pooler (DINO and MAE encoders ship that way): here the
  // classifier fixture's weights read as a ViTModel. Hugging Face would add a random pooler.
  auto json = HfConfig::load(model_fixture("vit")).json();
  json["architectures"] = {"ViTModel"};
  auto config = HfConfig::from_json(json, (model_fixture("vit") / "config.json").string());
  auto model = create_model(config, {});
  EXPECT_EQ(model->find_parameter("pooler.weight"), nullptr);
  load_parameters(*model, WeightSource::open(model_fixture("vit")), model->weight_map());
  auto ref = reference_of("vit");
  autograd::NoGradGuard no_grad;
  auto out = model->forward({{"pixel_values", ref.tensor("pixel_values")}});
  EXPECT_EQ(out.count("pooler_output"), 0u);
  EXPECT_LE(testing::relative_error(out.at("last_hidden_state"), ref.tensor("last_hidden_state")),
            1e-4);
  // With no checkpoint to look at, the encoder is built as Hugging Face builds it: with a pooler.
  auto fresh = create_model(HfConfig::from_json(json), {});
  EXPECT_NE(fresh->find_parameter("pooler.weight"), nullptr);
}

TEST(VitModel, ClassifiesAnImageFileEndToEnd) {
  auto model = load_model(model_fixture("vit"));
  auto processor = vision::ImageProcessor::load(model_fixture("vit"));
  Tensor pixels = processor.preprocess(vision::load_image(std::filesystem::path(LIBAI_SOURCE_DIR) /
                                                          "tests/data/images/gradient.png"));
  ASSERT_EQ(pixels.shape(), (Shape{1, 3, 32, 32}));
  autograd::NoGradGuard no_grad;
  Tensor logits = model->forward({{"pixel_values", pixels}}).at("logits");
  ASSERT_EQ(logits.shape(), (Shape{1, 5}));
  for (float v : logits.to_vector<float>()) EXPECT_TRUE(std::isfinite(v));
}

}  // namespace
}  // namespace libai::models
