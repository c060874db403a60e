// The model subcommands of libai-actor (generate, forward, convert, export, fill-mask, classify,
// embed), run as a user runs them and compared with the Hugging Face references of the fixture
// models (tests/data/models/*/reference.{json,safetensors}, tokenizer_reference.json).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "models/onnx/graph.h"
#include "tests/bin/cli_fixture.h"
#include "tests/models/random_models.h"
#include "train/checkpoint/gathered.h"

namespace libai::testing {
namespace {

// Every deterministic generation case of the reference, through the command's flags.
void check_generation_cases(const std::string& model, bool decoder_only,
                            std::function<json(const std::string&)> run_json) {
  const json reference = read_json(kModels + model + "/reference.json");
  int checked = 0;
  for (const auto& c : reference["generation"]["cases"]) {
    const json& kw = c["kwargs"];
    if (kw["do_sample"].get<bool>()) continue;
    std::string args = "generate --model " + kModels + model;
    for (const auto& prompt : c["prompts"])
      args += " --prompt-ids " + id_list(prompt.get<std::vector<int64_t>>());
    for (const char* key :
         {"max_new_tokens", "min_new_tokens", "num_beams", "length_penalty", "num_return_sequences",
          "repetition_penalty", "no_repeat_ngram_size", "eos_token_id", "pad_token_id"}) {
      std::string flag = std::string("--") + key;
      std::replace(flag.begin(), flag.end(), '_', '-');
      args += " " + flag + " " + kw[key].dump();
    }
    if (kw["early_stopping"].get<bool>()) args += " --early-stopping";
    const json out = run_json(args);
    const json& sequences = out["sequences"];
    size_t i = 0;
    for (size_t p = 0; p < c["prompts"].size(); ++p)
      for (const auto& expected_new : c["output"][p]) {
        ASSERT_LT(i, sequences.size()) << c["name"];
        std::vector<int64_t> expected;
        if (decoder_only) expected = c["prompts"][p].get<std::vector<int64_t>>();
        for (int64_t id : expected_new) expected.push_back(id);
        EXPECT_EQ(sequences[i]["token_ids"].get<std::vector<int64_t>>(), expected)
            << c["name"] << " prompt " << p;
        EXPECT_EQ(sequences[i]["prompt"], c["prompts"][p]);
        EXPECT_TRUE(sequences[i]["text"].is_string());
        ++i;
      }
    EXPECT_EQ(i, sequences.size()) << c["name"];
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

TEST_F(ModelCommands, GenerateGreedyMatchesReference) {
  const json greedy = read_json(kModels + "gpt2/reference.json")["generation"]["cases"][0];
  ASSERT_EQ(greedy["name"], "greedy");
  const auto prompt = greedy["prompts"][0].get<std::vector<int64_t>>();
  const json out = run_json("generate --model " + kModels + "gpt2 --prompt-ids " + id_list(prompt) +
                            " --max-new-tokens 12");
  ASSERT_EQ(out.size(), 1u);  // exactly {"sequences": [...]}
  ASSERT_EQ(out["sequences"].size(), 1u);
  const json& sequence = out["sequences"][0];
  std::vector<int64_t> expected = prompt;
  for (int64_t id : greedy["output"][0][0]) expected.push_back(id);
  EXPECT_EQ(sequence["token_ids"].get<std::vector<int64_t>>(), expected);
  const Result raw =
      run("generate --model " + kModels + "gpt2 --prompt-ids 1 --max-new-tokens 1 --json");
  std::vector<std::string> keys;
  const auto ordered = nlohmann::ordered_json::parse(raw.out);
  for (const auto& item : ordered["sequences"][0].items()) keys.push_back(item.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"prompt", "token_ids", "text"}));
}

// --packed-dtype bf16 on a checkpoint of bf16 values: the same tokens as the unpacked model.
TEST_F(ModelCommands, Bf16PackedWeightsGenerateTheUnpackedTokens) {
  const std::string args = " --prompt-ids 5,17,300,42 --max-new-tokens 10";
  const json packed = run_json("generate --model " + kModels + "gpt2_bf16 --packed-dtype bf16" + args);
  const json plain = run_json("generate --model " + kModels + "gpt2_bf16 --no-pack-weights" + args);
  EXPECT_EQ(packed["sequences"][0]["token_ids"], plain["sequences"][0]["token_ids"]);
  EXPECT_EQ(packed["sequences"][0]["token_ids"].size(), 14u);
}

TEST_F(ModelCommands, GenerateEveryReferenceCase) {
  const auto json_of = [this](const std::string& args) { return run_json(args); };
  check_generation_cases("gpt2", true, json_of);
  check_generation_cases("t5", false, json_of);
}

TEST_F(ModelCommands, GenerateHumanOutputAndTextPrompts) {
  const Result r = run("generate --model " + kModels +
                       "gpt2 --prompt 'Hello, world!' --prompt ok --max-new-tokens 3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("prompt 0: \"Hello, world!\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("prompt 1: \"ok\""), std::string::npos) << r.out;
  const json sampled =
      run_json("generate --model " + kModels +
               "gpt2 --prompt ok --do-sample --seed 7 --top-k 5 --max-new-tokens 4");
  EXPECT_EQ(sampled,
            run_json("generate --model " + kModels +
                     "gpt2 --prompt ok --do-sample --seed 7 --top-k 5 --max-new-tokens 4"));
  EXPECT_EQ(sampled["sequences"][0]["prompt"], "ok");
}

// A copy of a fixture model folder without its tokenizer files, under `scratch`.
std::string folder_without_tokenizer(const config::testing::TempDir& scratch,
                                     const std::string& model) {
  namespace fs = std::filesystem;
  const fs::path target = scratch.file(model + "_no_tokenizer");
  fs::create_directories(target);
  for (const auto& entry : fs::directory_iterator(kModels + model)) {
    const std::string name = entry.path().filename().string();
    const bool tokenizer_file = name.rfind("tokenizer", 0) == 0 || name.rfind("vocab", 0) == 0 ||
                                name == "merges.txt" || name == "spiece.model" ||
                                name == "special_tokens_map.json";
    if (!tokenizer_file && entry.is_regular_file()) fs::copy_file(entry.path(), target / name);
  }
  return target.string();
}

// transformers generates from ids alone; so do we, leaving the text out.
TEST_F(ModelCommands, GenerateFromIdsWithoutATokenizer) {
  for (const std::string model : {"gpt2", "t5"}) {
    const std::string bare = folder_without_tokenizer(scratch_, model);
    const std::string args =
        " --prompt-ids 3,1,4,1 --prompt-ids 5,9 --max-new-tokens 5 --num-beams 2";
    const json with = run_json("generate --model " + kModels + model + args);
    const json without = run_json("generate --model " + bare + args);
    ASSERT_EQ(with["sequences"].size(), 2u) << model;
    ASSERT_EQ(without["sequences"].size(), 2u) << model;
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(without["sequences"][i]["token_ids"], with["sequences"][i]["token_ids"]) << model;
      EXPECT_EQ(without["sequences"][i]["prompt"], with["sequences"][i]["prompt"]) << model;
      EXPECT_TRUE(with["sequences"][i].contains("text")) << model;
      EXPECT_FALSE(without["sequences"][i].contains("text")) << model;
    }
    const Result human = run("generate --model " + bare + args);
    ASSERT_EQ(human.exit_code, 0) << human.err;
    EXPECT_NE(human.out.find("-> new token ids ["), std::string::npos) << human.out;
    expect_error("generate --model " + bare + " --prompt hello",
                 {"--prompt needs a tokenizer", bare, "--prompt-ids"});
  }
}

TEST_F(ModelCommands, ForwardSavesReferenceLogits) {
  const auto reference = checkpoint::SafetensorsFile::open(kModels + "gpt2/reference.safetensors");
  const std::vector<int64_t> row0_ids = unpadded_row(reference, 0);  // 24 ids, no padding
  const auto saved = forward_saved("--model " + kModels + "gpt2 --input-ids " + id_list(row0_ids),
                                   "gpt2.safetensors");
  const Tensor logits = saved.tensor("logits");
  EXPECT_EQ(logits.shape(), (Shape{1, 24, 503}));
  EXPECT_LE(relative_error(logits.to_vector<float>(), row_of(reference.tensor("logits"), 0)), 1e-4);
  EXPECT_TRUE(saved.contains("hidden_states.1"));

  // Row 1 is right-padded in the reference; given unpadded next to row 0, the command pads it.
  const std::vector<int64_t> row1 = unpadded_row(reference, 1);
  const int64_t real = int64_t(row1.size());
  const auto batch = forward_saved("--model " + kModels + "gpt2 --input-ids " + id_list(row0_ids) +
                                       " --input-ids " + id_list(row1),
                                   "batch.safetensors");
  const Tensor both = batch.tensor("logits");
  EXPECT_LE(relative_error(row_of(both, 1, 0, real * 503),
                           row_of(reference.tensor("logits"), 1, 0, real * 503)),
            1e-4);

  const json described =
      run_json("forward --model " + kModels + "gpt2 --input-ids " + id_list(row0_ids));
  EXPECT_EQ(described["outputs"]["logits"]["shape"], json::array({1, 24, 503}));
  EXPECT_EQ(described["outputs"]["logits"]["dtype"], "f32");
}

TEST_F(ModelCommands, ConvertRoundTripKeepsLogits) {
  const auto reference = checkpoint::SafetensorsFile::open(kModels + "gpt2/reference.safetensors");
  const std::string ids = id_list(unpadded_row(reference, 0));
  const std::string libai = scratch_.file("gpt2-libai"), hf = scratch_.file("gpt2-hf");
  const Result to_libai = run("convert --from " + kModels + "gpt2 --to " + libai);
  ASSERT_EQ(to_libai.exit_code, 0) << to_libai.err;
  EXPECT_NE(to_libai.out.find("(libai layout): "), std::string::npos) << to_libai.out;
  EXPECT_NE(to_libai.out.find(" tensors, "), std::string::npos) << to_libai.out;
  EXPECT_EQ(checkpoint::SafetensorsFile::open(libai + "/model.safetensors").metadata().at("format"),
            "libai");
  const Result to_hf = run("convert --from " + libai + " --to " + hf + " --format hf");
  ASSERT_EQ(to_hf.exit_code, 0) << to_hf.err;
  for (const std::string& folder : {libai, hf}) {
    const auto saved = forward_saved("--model " + folder + " --input-ids " + ids, "rt.safetensors");
    EXPECT_LE(relative_error(saved.tensor("logits").to_vector<float>(),
                             row_of(reference.tensor("logits"), 0)),
              1e-4)
        << folder;
  }
  EXPECT_EQ(run("convert --from " + kModels + "gpt2 --to " + hf + " --format onnx").exit_code, 2);
}

// `export onnx` writes a checked model and names its interface; the caller's mistakes are one
// line each (tests/onnx/ compares the exported models with ONNX Runtime).
TEST_F(ModelCommands, ExportOnnx) {
  std::string why;
  if (!models::onnx::writer_available(&why)) GTEST_SKIP() << why;
  const std::string out = scratch_.file("gpt2.onnx");
  const Result r = run("export onnx --model " + kModels + "gpt2 --out " + out + " --with-past");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("opset 17"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("inputs:  input_ids, attention_mask, past_key_values.0.key"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("outputs: logits, present.0.key"), std::string::npos) << r.out;
  EXPECT_TRUE(std::filesystem::exists(out));
  expect_error(
      "export onnx --model " + kModels + "bert --out " + scratch_.file("b.onnx") + " --with-past",
      {"--with-past", "bert"});
  expect_error("export onnx --model /no/such/model --out " + scratch_.file("x.onnx"),
               {"/no/such/model"});
  expect_error(
      "export onnx --model " + kModels + "gpt2 --out " + scratch_.file("x.onnx") + " --opset 11",
      {"opset 11"});
  EXPECT_EQ(run("export onnx --model " + kModels + "gpt2").exit_code, 2);  // no --out
  EXPECT_EQ(run("export tflite --model " + kModels + "gpt2").exit_code, 2);
}

// A training run's output folder: convert reads the checkpoint last_checkpoint names.
TEST_F(ModelCommands, ConvertExportsTheLastTrainingCheckpoint) {
  const std::string out = scratch_.file("run"), hf = scratch_.file("run-hf");
  auto model = models::load_model(kModels + "gpt2");
  model->set_requires_grad(true);
  auto optimizer = train::make_optimizer(train::default_param_groups(*model, {}), {});
  train::save_checkpoint(out, "model_0000007", *model, *optimizer, nullptr, {.iteration = 7}, 0);
  const Result to_hf = run("convert --from " + out + " --to " + hf + " --format hf");
  ASSERT_EQ(to_hf.exit_code, 0) << to_hf.err;
  EXPECT_NE(to_hf.out.find("model_0000007"), std::string::npos) << to_hf.out;
  const auto reference = checkpoint::SafetensorsFile::open(kModels + "gpt2/reference.safetensors");
  const auto saved = forward_saved(
      "--model " + hf + " --input-ids " + id_list(unpadded_row(reference, 0)), "ckpt.safetensors");
  EXPECT_LE(relative_error(saved.tensor("logits").to_vector<float>(),
                           row_of(reference.tensor("logits"), 0)),
            1e-4);
  std::filesystem::remove_all(out + "/model_0000007");
  expect_error("convert --from " + out + " --to " + hf, {"no complete checkpoint"});
}

TEST_F(ModelCommands, FillMaskAgreesWithForward) {
  // Forward first agrees with the reference: row 1 of the bert batch, unpadded (its
  // token_type_ids are all 0, the command's default).
  const auto reference = checkpoint::SafetensorsFile::open(kModels + "bert/reference.safetensors");
  const std::vector<int64_t> row1 = unpadded_row(reference, 1);
  const int64_t real = int64_t(row1.size());
  const auto parity = forward_saved("--model " + kModels + "bert --input-ids " + id_list(row1),
                                    "bert_row1.safetensors");
  EXPECT_LE(relative_error(parity.tensor("logits").to_vector<float>(),
                           row_of(reference.tensor("logits"), 1, 0, real * 403)),
            1e-4);

  // Then fill-mask on a text equals the forward pass on Hugging Face's ids of that text.
  const std::string text = "The capital of France is [MASK].";
  const std::vector<int64_t> ids = hf_ids("bert", text);
  const int64_t position = std::find(ids.begin(), ids.end(), 4) - ids.begin();  // [MASK] is 4
  ASSERT_LT(position, int64_t(ids.size()));
  const auto saved =
      forward_saved("--model " + kModels + "bert --input-ids " + id_list(ids), "bert.safetensors");
  const Tensor logits = saved.tensor("logits");  // [1, len, 403]
  const auto p = softmax(row_of(logits, 0, position * 403, (position + 1) * 403));
  std::vector<int64_t> order(p.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = int64_t(i);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });

  const json out =
      run_json("fill-mask --model " + kModels + "bert --text " + shell_quote(text) + " --top-k 4");
  ASSERT_EQ(out["masks"].size(), 1u);
  const json& guesses = out["masks"][0];
  ASSERT_EQ(guesses.size(), 4u);
  double total = 0;
  for (size_t i = 0; i < guesses.size(); ++i) {
    EXPECT_EQ(guesses[i]["token_id"].get<int64_t>(), order[i]) << i;
    EXPECT_NEAR(guesses[i]["score"].get<double>(), p[size_t(order[i])], 1e-6);
    if (i > 0) {
      EXPECT_LE(guesses[i]["score"].get<double>(), guesses[i - 1]["score"].get<double>());
    }
    total += guesses[i]["score"].get<double>();
  }
  EXPECT_LE(total, 1.0 + 1e-9);
  const Result human = run("fill-mask --model " + kModels + "bert --text " + shell_quote(text));
  EXPECT_EQ(human.exit_code, 0);
  EXPECT_EQ(std::count(human.out.begin(), human.out.end(), '\n'), 6) << human.out;  // text + 5
}

TEST_F(ModelCommands, ClassifyTextIsSoftmaxOfLogits) {
  // Forward agrees with the reference logits (row 1, unpadded) ...
  const auto reference =
      checkpoint::SafetensorsFile::open(kModels + "bert_cls/reference.safetensors");
  const auto parity = forward_saved(
      "--model " + kModels + "bert_cls --input-ids " + id_list(unpadded_row(reference, 1)),
      "row1.safetensors");
  EXPECT_LE(relative_error(parity.tensor("logits").to_vector<float>(),
                           row_of(reference.tensor("logits"), 1)),
            1e-4);

  // ... and classify --text gives softmax(logits) of Hugging Face's ids of the text.
  const std::string text = "Hello, world!";
  const auto saved = forward_saved(
      "--model " + kModels + "bert_cls --input-ids " + id_list(hf_ids("bert_cls", text)),
      "cls.safetensors");
  const auto p = softmax(saved.tensor("logits").to_vector<float>());
  const json id2label = read_json(kModels + "bert_cls/config.json")["id2label"];
  const json out = run_json("classify --model " + kModels + "bert_cls --text " + shell_quote(text));
  ASSERT_EQ(out["labels"].size(), p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    const std::string label = out["labels"][i]["label"];
    size_t id = p.size();
    for (const auto& [key, name] : id2label.items())
      if (name == label) id = std::stoul(key);
    ASSERT_LT(id, p.size()) << label << " is not in id2label";
    EXPECT_NEAR(out["labels"][i]["score"].get<double>(), p[id], 1e-6) << label;
    if (i > 0) {
      EXPECT_LE(out["labels"][i]["score"], out["labels"][i - 1]["score"]);
    }
  }
  EXPECT_EQ(
      run_json("classify --model " + kModels + "bert_cls --text ok --top-k 1")["labels"].size(),
      1u);
}

TEST_F(ModelCommands, ClassifyImageIsSoftmaxOfForward) {
  const std::string image = LIBAI_SOURCE_DIR "/tests/data/images/gradient.png";
  const auto saved =
      forward_saved("--model " + kModels + "vit --image " + image, "vit.safetensors");
  const auto p = softmax(saved.tensor("logits").to_vector<float>());
  const json out = run_json("classify --model " + kModels + "vit --image " + image);
  ASSERT_EQ(out["labels"].size(), std::min<size_t>(5, p.size()));
  const double best = *std::max_element(p.begin(), p.end());
  EXPECT_NEAR(out["labels"][0]["score"].get<double>(), best, 1e-6);
  expect_error("classify --model " + kModels + "vit --image /nonexistent.png",
               {"/nonexistent.png"});
  expect_error("classify --model " + kModels + "bert_cls --image " + image,
               {"image-classification", "sequence-classification"});
}

TEST_F(ModelCommands, EmbedIsMeanPooledForward) {
  const std::vector<std::string> texts = {"Hello, world!",
                                          "The quick brown fox jumps over the lazy dog."};
  std::vector<std::vector<double>> expected;
  for (const auto& text : texts) {
    const auto ids = hf_ids("bert", text);
    const auto saved = forward_saved("--model " + kModels + "bert --input-ids " + id_list(ids),
                                     "embed.safetensors");
    const Tensor h = saved.tensor("last_hidden_state");  // [1, len, hidden]
    const auto values = h.to_vector<float>();
    const int64_t len = h.size(1), hidden = h.size(2);
    std::vector<double> mean(size_t(hidden), 0.0);
    for (int64_t t = 0; t < len; ++t)
      for (int64_t d = 0; d < hidden; ++d)
        mean[size_t(d)] += values[size_t(t * hidden + d)] / double(len);
    double norm = 0;
    for (double x : mean) norm += x * x;
    for (double& x : mean) x /= std::sqrt(norm);
    expected.push_back(mean);
  }
  const json out = run_json("embed --model " + kModels + "bert --text " + shell_quote(texts[0]) +
                            " --text " + shell_quote(texts[1]));
  ASSERT_EQ(out["embeddings"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const auto e = out["embeddings"][i].get<std::vector<double>>();
    ASSERT_EQ(e.size(), expected[i].size());
    for (size_t d = 0; d < e.size(); ++d) EXPECT_NEAR(e[d], expected[i][d], 1e-5) << i << "," << d;
  }
  double dot = 0;
  for (size_t d = 0; d < expected[0].size(); ++d) dot += expected[0][d] * expected[1][d];
  EXPECT_NEAR(out["similarity"][0][1].get<double>(), dot, 1e-5);
  EXPECT_NEAR(out["similarity"][1][1].get<double>(), 1.0, 1e-6);
  const Result human = run("embed --model " + kModels + "bert --text a --text b");
  EXPECT_EQ(human.exit_code, 0);
  EXPECT_NE(human.out.find("cosine similarity"), std::string::npos) << human.out;
}

TEST_F(ModelCommands, ErrorsAreOneLineAndExitOne) {
  expect_error("generate --model /no/such/model --prompt hi", {"--model", "/no/such/model"});
  expect_error("forward --model " + kModels + "gpt2 --input-ids 1,x,3",
               {"--input-ids", "'x'", "item 2"});
  expect_error("generate --model " + kModels + "gpt2 --prompt-ids 1,,3",
               {"--prompt-ids", "item 2"});
  expect_error("generate --model " + kModels + "bert --prompt hi",
               {"generate needs a model of kind causal-lm or seq2seq-lm", "masked-lm"});
  expect_error("forward --model " + kModels + "gpt2 --input-ids 1,99999", {"99999", "vocab"});
  expect_error("fill-mask --model " + kModels + "bert --text 'no mask here'", {"[MASK]"});
  expect_error("fill-mask --model " + kModels + "gpt2 --text '[MASK]'", {"fill-mask needs"});
  expect_error("classify --model " + kModels + "vit --text hi",
               {"sequence-classification", "image-classification"});
  expect_error("embed --model " + kModels + "gpt2 --text a --dtype f8", {"--dtype", "f8"});
  expect_error("embed --model " + kModels + "gpt2 --text a --packed-dtype f16",
               {"--packed-dtype", "f16"});
  expect_error("embed --model " + kModels + "gpt2 --text a --packed-dtype bf16 --no-pack-weights",
               {"--packed-dtype", "--no-pack-weights"});
  expect_error("convert --from /no/such/model --to " + scratch_.file("x"), {"--from"});
  // Usage mistakes stay exit 2.
  EXPECT_EQ(run("generate --prompt hi").exit_code, 2);
  EXPECT_EQ(run("generate --model x --prompt a --prompt-ids 1").exit_code, 2);
  EXPECT_EQ(run("generate --model x --prompt a --num-beams 0").exit_code, 2);
}

}  // namespace
}  // namespace libai::testing

namespace libai::testing {
namespace {

// --tensor-parallel-size splits the model over ranks (threads) and gives the one-device
// outputs: forward on a random GPT-2 and T5 with 4 heads, at 2 and 4 ranks.
TEST_F(ModelCommands, TensorParallelFlagGivesTheOneDeviceOutputs) {
  for (int index : {0, 4}) {  // gpt2, t5 in random_models.h
    const auto family = families()[index];
    const auto dir = save_random_model(family, "cli_" + std::to_string(::getpid())).string();
    const std::string args =
        "--model " + dir + " --input-ids 3,4,5,6 --input-ids 7,8" +
        (family.name == "t5" ? " --decoder-input-ids 0,9,10 --decoder-input-ids 0,11" : "");
    const auto one = forward_saved(args, family.name + "_tp1.safetensors");
    for (int tp : {2, 4}) {
      const auto split = forward_saved(args + " --tensor-parallel-size " + std::to_string(tp),
                                       family.name + "_tp" + std::to_string(tp) + ".safetensors");
      EXPECT_LE(relative_error(split.tensor("logits").to_vector<float>(),
                               one.tensor("logits").to_vector<float>()),
                1e-5)
          << family.name << " at " << tp << " ranks";
    }
    std::filesystem::remove_all(dir);
  }
  expect_error("forward --model " + kModels + "gpt2 --input-ids 1,2 --tensor-parallel-size 2",
               {"tensor_parallel_size 2 does not divide the number of heads 3"});
}


// --quantize changes the logits; keeping every layer and the head f32 gives f32's logits back
// exactly (the keep names reach every layer); bad kinds, names and combinations are one error.
TEST_F(ModelCommands, QuantizeFlagsQuantizeKeepAndRefuse) {
  const std::string model = "--model " + kModels + "gpt2 --input-ids 5,17,42,7";
  const Tensor f32 = forward_saved(model, "f32.safetensors").tensor("logits");
  const Tensor int8 = forward_saved(model + " --quantize int8", "int8.safetensors").tensor("logits");
  const double moved = relative_error(int8.to_vector<float>(), f32.to_vector<float>());
  EXPECT_GT(moved, 1e-6);
  EXPECT_LT(moved, 0.2);  // a tiny random model (width 32): int8 moves it by 6.6% here
  const Tensor kept = forward_saved(model + " --quantize q4 --quantize-keep layers --quantize-keep output",
                                    "kept.safetensors")
                          .tensor("logits");
  EXPECT_EQ(kept.to_vector<float>(), f32.to_vector<float>());
  expect_error("forward " + model + " --quantize int4", {"--quantize", "int4"});
  expect_error("forward " + model + " --quantize int8 --quantize-keep layers.9",
               {"layers.9", "names no layer", "layers.0.attention.qkv"});
  expect_error("forward " + model + " --quantize int8 --no-pack-weights", {"--quantize", "packed"});
  expect_error("forward " + model + " --quantize-keep output", {"--quantize-keep", "--quantize"});
}

}  // namespace
}  // namespace libai::testing
