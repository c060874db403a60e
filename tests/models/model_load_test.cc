// Loading models from bad folders gives one clear error naming the file and what is wrong;
// converting to the libai layout and back keeps the outputs.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "models/convert.h"
#include "parity_util.h"
#include "runtime/autograd.h"

namespace libai::models {
namespace {

namespace fs = std::filesystem;

// A copy of a fixture folder that a test may break.
fs::path scratch_copy(const std::string& fixture, const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("libai_model_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& entry : fs::directory_iterator(testing::model_fixture(fixture)))
    fs::copy_file(entry.path(), dir / entry.path().filename());
  return dir;
}

void edit_config(const fs::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j;
  {
    std::ifstream in(dir / "config.json");
    j = nlohmann::json::parse(in);
  }
  edit(j);
  std::ofstream(dir / "config.json") << j.dump(2);
}

std::string load_error(const fs::path& dir, ErrorKind expected_kind, const LoadOptions& options = {}) {
  try {
    load_model(dir, options);
  } catch (const Error& e) {
    EXPECT_EQ(error_kind_name(e.kind()), std::string(error_kind_name(expected_kind))) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "loading " << dir << " did not fail";
  return "";
}

TEST(ModelLoad, ConfigThatIsNotJson) {
  auto dir = scratch_copy("gpt2", "badjson");
  std::ofstream(dir / "config.json") << "{\"model_type\": \"gpt2\",";
  auto msg = load_error(dir, ErrorKind::corrupt_input);
  EXPECT_NE(msg.find("config.json is not valid JSON"), std::string::npos) << msg;
}

TEST(ModelLoad, UnknownModelTypeAndArchitecture) {
  auto dir = scratch_copy("gpt2", "unknown_type");
  edit_config(dir, [](auto& j) { j["model_type"] = "mamba"; });
  auto msg = load_error(dir, ErrorKind::unsupported);
  EXPECT_NE(msg.find("model_type \"mamba\" is not supported"), std::string::npos) << msg;
  edit_config(dir, [](auto& j) {
    j["model_type"] = "bert";
    j["architectures"] = {"BertForQuestionAnswering"};
  });
  // A known family with an unknown head falls back to the base model only when one exists:
  // bert does, so this loads the encoder and reports the checkpoint's names as missing.
  msg = load_error(dir, ErrorKind::corrupt_input);
  EXPECT_NE(msg.find("missing embeddings.word_embeddings.weight"), std::string::npos) << msg;
}

TEST(ModelLoad, ShapeMismatchNamesTensorsAndShapes) {
  auto dir = scratch_copy("gpt2", "shapes");
  edit_config(dir, [](auto& j) { j["n_positions"] = 80; });
  auto msg = load_error(dir, ErrorKind::corrupt_input);
  EXPECT_NE(msg.find("shape mismatch for positions.weight: expected [80, 48], checkpoint has wpe.weight [64, 48]"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
}

TEST(ModelLoad, BadValuesInConfigNameTheKey) {
  auto dir = scratch_copy("gpt2", "badvalues");
  edit_config(dir, [](auto& j) { j["activation_function"] = "swiglu9"; });
  auto msg = load_error(dir, ErrorKind::invalid_argument);
  EXPECT_NE(msg.find("activation_function"), std::string::npos) << msg;
  EXPECT_NE(msg.find("swiglu9"), std::string::npos) << msg;
  edit_config(dir, [](auto& j) {
    j["activation_function"] = "gelu_new";
    j["n_head"] = "three";
  });
  msg = load_error(dir, ErrorKind::corrupt_input);
  EXPECT_NE(msg.find("\"n_head\" should be an integer, got \"three\""), std::string::npos) << msg;
  edit_config(dir, [](auto& j) { j["n_head"] = 5; });
  msg = load_error(dir, ErrorKind::corrupt_input);
  EXPECT_NE(msg.find("n_embd 48 is not divisible by n_head 5"), std::string::npos) << msg;
}

TEST(ModelLoad, IntegerTensorForAFloatWeightIsRejected) {
  auto dir = scratch_copy("gpt2", "dtype");
  fs::remove(dir / "pytorch_model.bin");
  auto file = checkpoint::SafetensorsFile::open((testing::model_fixture("gpt2") / "model.safetensors").string());
  checkpoint::NamedTensors tensors;
  for (const auto& name : file.names()) {
    Tensor t = file.tensor(name);
    if (name == "transformer.ln_f.weight") {
      Tensor i = Tensor::empty(t.shape(), DType::i64);
      i.copy_from(t);
      t = i;
    }
    tensors.emplace_back(name, t);
  }
  checkpoint::save_safetensors((dir / "model.safetensors").string(), tensors);
  auto msg = load_error(dir, ErrorKind::corrupt_input);
  EXPECT_NE(msg.find("dtype mismatch for final_norm.weight: expected f32, ln_f.weight is i64"),
            std::string::npos)
      << msg;
}

TEST(ModelLoad, MissingWeightsAndMissingFolder) {
  auto dir = scratch_copy("gpt2", "noweights");
  fs::remove(dir / "model.safetensors");
  fs::remove(dir / "pytorch_model.bin");
  auto msg = load_error(dir, ErrorKind::not_found);
  EXPECT_NE(msg.find("has no model.safetensors"), std::string::npos) << msg;
  msg = load_error(dir / "nowhere", ErrorKind::not_found);
  EXPECT_NE(msg.find("nowhere does not exist (expected a model folder with config.json)"), std::string::npos) << msg;
  fs::remove(dir / "config.json");
  msg = load_error(dir, ErrorKind::not_found);
  EXPECT_NE(msg.find("config.json does not exist"), std::string::npos) << msg;
}

TEST(ModelConvert, LibaiLayoutAndBackKeepTheOutputs) {
  const auto tmp = fs::temp_directory_path();
  const fs::path libai = tmp / "libai_convert_libai", hf = tmp / "libai_convert_hf";
  fs::remove_all(libai);
  fs::remove_all(hf);
  convert_model(testing::model_fixture("gpt2"), libai, CheckpointLayout::libai);
  convert_model(libai, hf, CheckpointLayout::hf);
  auto libai_file = checkpoint::SafetensorsFile::open((libai / "model.safetensors").string());
  EXPECT_EQ(libai_file.metadata().at("format"), "libai");
  EXPECT_TRUE(libai_file.contains("layers.0.attention.qkv.weight"));
  auto hf_file = checkpoint::SafetensorsFile::open((hf / "model.safetensors").string());
  EXPECT_TRUE(hf_file.contains("transformer.h.0.attn.c_attn.weight"));
  // The HF layout holds the original tensors bit for bit.
  auto original = checkpoint::SafetensorsFile::open((testing::model_fixture("gpt2") / "model.safetensors").string());
  for (const auto& name : hf_file.names()) {
    ASSERT_TRUE(original.contains(name)) << name;
    EXPECT_EQ(hf_file.tensor(name).to_vector<float>(), original.tensor(name).to_vector<float>()) << name;
  }
  auto ref = testing::reference_of("gpt2");
  autograd::NoGradGuard no_grad;
  for (const auto& dir : {libai, hf}) {
    auto model = load_model(dir);
    auto out = model->forward({{"input_ids", ref.tensor("input_ids")}, {"attention_mask", ref.tensor("attention_mask")}});
    EXPECT_LE(testing::relative_error(out.at("logits"), ref.tensor("logits")), 1e-4) << dir;
  }
}

}  // namespace
}  // namespace libai::models
