// Quantized checkpoints (`convert --quantize`; Note [Quantized checkpoints] in
// ops/packed_linear.h and models/model.cc): the folder holds each quantized layer's values,
// not its f32 weight, and loads into the very same quantized model, bit for bit, without
// quantizing again; GGUF files convert into folders with their config and tokenizer.
#include <gtest/gtest.h>

#include <fstream>

#include "models/convert.h"
#include "models/layers/linear.h"
#include "models/model.h"
#include "models/tokenizers/tokenizer.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/comm/spmd.h"
#include "tests/models/parity_util.h"

namespace libai {
namespace {

namespace fs = std::filesystem;

fs::path gguf(const std::string& name) {
  return fs::path(LIBAI_SOURCE_DIR) / "tests" / "data" / "gguf" / name;
}

fs::path scratch(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("libai_qckpt_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

Tensor ids() { return Tensor::from_vector(std::vector<int64_t>{5, 9, 31, 7, 101, 40, 12, 3}, {1, 8}); }

std::vector<float> logits(models::Model& m) {
  return m.forward({{"input_ids", ids()}}).at("logits").to_vector<float>();
}

models::LoadOptions quantized(ops::QuantSpec q, std::vector<std::string> keep = {}) {
  return {.pack_weights = true, .quantize = q, .quantize_keep = std::move(keep)};
}

struct Case {
  const char* name;
  fs::path from;
  ops::QuantSpec spec;
  std::vector<std::string> keep;
};

class QuantizedCheckpoint : public ::testing::TestWithParam<Case> {};

TEST_P(QuantizedCheckpoint, LoadsTheSameQuantizedModelWithoutQuantizingAgain) {
  const Case c = GetParam();
  const fs::path out = scratch(c.name);
  models::convert_model(c.from, out, models::CheckpointLayout::libai, c.spec, c.keep);
  auto direct = models::load_model(c.from, quantized(c.spec, c.keep));
  auto stored = models::load_model(out, {.pack_weights = true});
  EXPECT_EQ(logits(*stored), logits(*direct));  // bit for bit
  // Asking for the same kind is fine; another one would quantize the stored values again.
  auto same = models::load_model(out, quantized(c.spec));
  EXPECT_EQ(logits(*same), logits(*direct));
  const ops::QuantSpec other{c.spec.kind == ops::Quantization::int8 ? ops::Quantization::q4
                                                                    : ops::Quantization::int8};
  EXPECT_THROW(models::load_model(out, quantized(other)), InvalidArgument);
  // The file: values and scales, no f32 weight for a quantized Linear.
  const auto file = checkpoint::SafetensorsFile::open((out / "model.safetensors").string());
  EXPECT_EQ(file.metadata().at("quantization"), ops::quantization_name(c.spec));
  EXPECT_TRUE(file.contains("layers.0.mlp.down.weight.q"));
  EXPECT_TRUE(file.contains("layers.0.mlp.down.weight.scale"));
  EXPECT_FALSE(file.contains("layers.0.mlp.down.weight"));
  EXPECT_EQ(file.contains("layers.0.mlp.down.weight.min"), c.spec.with_min);
  for (const auto& keep : c.keep)
    if (keep != "output") EXPECT_FALSE(file.contains(keep + ".weight.q")) << keep;
  // Unquantized, the folder is the f32 model of the stored values.
  auto plain = models::load_model(out);
  auto plain_direct = models::load_model(c.from, {.pack_weights = true, .quantize = c.spec,
                                                  .quantize_keep = c.keep, .keep_f32_weights = true});
  models::unpack_weights(*plain_direct);
  EXPECT_LE(testing::relative_error(plain->forward({{"input_ids", ids()}}).at("logits"),
                                    plain_direct->forward({{"input_ids", ids()}}).at("logits")),
            1e-6);
  fs::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(
    Models, QuantizedCheckpoint,
    ::testing::Values(
        Case{"gpt2_int8", testing::model_fixture("gpt2"), {ops::Quantization::int8}, {}},
        Case{"gpt2_q4_min", testing::model_fixture("gpt2"), {ops::Quantization::q4, 4, true},
             {"layers.1.mlp", "output"}},
        Case{"llama_q4_gguf", gguf("llama_q4_0.gguf"), {ops::Quantization::q4}, {}},
        Case{"qwen2_int8_dynamic", gguf("qwen2_f32.gguf"), {ops::Quantization::int8_dynamic}, {}}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(QuantizedCheckpointGguf, ConfigAndTokenizerComeAlong) {
  const fs::path out = scratch("gguf_files");
  models::convert_model(gguf("llama_mixed.gguf"), out, models::CheckpointLayout::hf);
  ASSERT_TRUE(fs::exists(out / "config.json"));
  ASSERT_TRUE(fs::exists(out / "tokenizer.json"));
  auto from_file = tokenizers::load_tokenizer(gguf("llama_mixed.gguf"));
  auto from_folder = tokenizers::load_tokenizer(out);
  for (const char* text : {"Hello world", "naïve café, 12345", "  two  spaces"})
    EXPECT_EQ(from_folder->encode(text).ids, from_file->encode(text).ids) << text;
  auto a = models::load_model(out);
  auto b = models::load_model(gguf("llama_mixed.gguf"));
  EXPECT_EQ(logits(*a), logits(*b));
  fs::remove_all(out);
}

TEST(QuantizedCheckpointErrors, NamedAndRefused) {
  const fs::path out = scratch("errors");
  EXPECT_THROW(models::convert_model(testing::model_fixture("gpt2"), out, models::CheckpointLayout::hf,
                                     {ops::Quantization::int8}),
               InvalidArgument);
  // A stored scale of the wrong dtype names the tensor.
  models::convert_model(testing::model_fixture("gpt2"), out, models::CheckpointLayout::libai,
                        {ops::Quantization::int8});
  const fs::path st = out / "model.safetensors";
  const auto file = checkpoint::SafetensorsFile::open(st.string());
  checkpoint::NamedTensors tensors;
  for (const auto& n : file.names()) {
    Tensor t = file.tensor(n);
    if (n == "layers.0.mlp.up.weight.scale") t = Tensor::zeros(t.shape(), DType::f16);
    tensors.emplace_back(n, t.clone_raw());
  }
  checkpoint::save_safetensors((out / "bad.safetensors").string(), tensors, file.metadata());
  fs::rename(out / "bad.safetensors", st);
  try {
    models::load_model(out, {.pack_weights = true});
    ADD_FAILURE() << "a scale of the wrong dtype loaded";
  } catch (const CorruptInput& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0.mlp.up.weight.scale: expected f32"), std::string::npos)
        << e.what();
  }
  fs::remove_all(out);
}

// Under tensor parallelism each rank quantizes its block of the stored values again: exact for
// q4 without a minimum, so TP 2 runs the stored model.
TEST(QuantizedCheckpointTensorParallel, RanksRunTheStoredQ4Model) {
  const fs::path out = scratch("tp");
  models::convert_model(gguf("llama_q4_0.gguf"), out, models::CheckpointLayout::libai,
                        {ops::Quantization::q4});
  auto one = models::load_model(out, {.pack_weights = true});
  const Tensor expected = one->forward({{"input_ids", ids()}}).at("logits");
  std::vector<Tensor> got(2);
  comm::run_spmd_threads(2, [&](comm::Communicator& c) {
    std::shared_ptr<comm::Communicator> group(&c, [](comm::Communicator*) {});
    auto m = models::load_model(out, {.tp = group, .pack_weights = true});
    got[size_t(c.rank())] = m->forward({{"input_ids", ids()}}).at("logits");
  });
  for (const auto& g : got) EXPECT_LE(testing::relative_error(g, expected), 1e-5);
  fs::remove_all(out);
}

}  // namespace
}  // namespace libai
