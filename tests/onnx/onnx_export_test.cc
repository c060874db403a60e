// ONNX export (models/onnx/export.h) of the random-weight fixtures under tests/data/models:
// every written model passes onnx::checker and strict shape inference (export_model checks it),
// and ONNX Runtime running it (tools/run_onnx.py) equals our runtime's forward within 1e-4
// relative. ONNX Runtime comes from PyPI through tools/install_onnxruntime.sh (make test runs
// it); without it the comparisons skip and say why. The error cases need no ONNX Runtime.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "models/model.h"
#include "models/onnx/export.h"
#include "ops/ops.h"
#include "runtime/checkpoint/safetensors.h"

namespace libai::models::onnx {
namespace {

namespace fs = std::filesystem;

fs::path fixture(const std::string& name) {
  return fs::path(LIBAI_SOURCE_DIR) / "tests" / "data" / "models" / name;
}

// A fresh folder per test under the build tree (removed by the next run of the same test).
fs::path scratch() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->test_suite_name()) + "." + info->name();
  for (char& ch : name)
    if (ch == '/') ch = '_';
  const fs::path dir = fs::path(LIBAI_BINARY_DIR) / "tests" / "onnx_scratch" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// ONNX Runtime's Python package, installed by tools/install_onnxruntime.sh (or named by
// LIBAI_PYONNX); empty with the reason in `why` when absent.
fs::path onnxruntime_folder(std::string& why) {
  const char* env = std::getenv("LIBAI_PYONNX");
  const fs::path dir = env ? fs::path(env) : fs::path(LIBAI_BINARY_DIR) / "pyonnx";
  if (!fs::exists(dir / "onnxruntime")) {
    why = "ONNX Runtime is not installed in " + dir.string() +
          " (run tools/install_onnxruntime.sh BUILD, or set LIBAI_PYONNX)";
    return {};
  }
  if (std::system("python3 -c '' > /dev/null 2>&1") != 0) {
    why = "python3 is not available";
    return {};
  }
  return dir;
}

#define SKIP_WITHOUT_ONNXRUNTIME(folder)            \
  std::string why_;                                 \
  const fs::path folder = onnxruntime_folder(why_); \
  if (folder.empty()) GTEST_SKIP() << why_;         \
  if (!writer_available(&why_)) GTEST_SKIP() << "no ONNX writer: " << why_

// Runs `model` in ONNX Runtime on `inputs` and returns every output by name; `run` names the
// files of this run beside the model.
TensorMap run_onnxruntime(const fs::path& pyonnx, const fs::path& model, const TensorMap& inputs,
                          const std::string& run = "run") {
  const std::string base = model.string() + "." + run;
  const fs::path in = base + ".inputs.safetensors", out = base + ".outputs.safetensors",
                 log = base + ".log";
  checkpoint::NamedTensors named;
  for (const auto& [name, t] : inputs) named.emplace_back(name, ops::contiguous(t));
  checkpoint::save_safetensors(in.string(), named);
  const std::string command = "PYTHONPATH='" + pyonnx.string() + "' timeout 300 python3 '" +
                              (fs::path(LIBAI_SOURCE_DIR) / "tools" / "run_onnx.py").string() +
                              "' '" + model.string() + "' '" + in.string() + "' '" + out.string() +
                              "' > '" + log.string() + "' 2>&1";
  const int rc = std::system(command.c_str());
  std::ifstream text(log);
  const std::string output((std::istreambuf_iterator<char>(text)),
                           std::istreambuf_iterator<char>());
  EXPECT_EQ(rc, 0) << "tools/run_onnx.py failed:\n" << output;
  TensorMap results;
  if (rc != 0) return results;
  const auto file = checkpoint::SafetensorsFile::open(out.string());
  for (const auto& name : file.names()) results[name] = file.tensor(name).clone_raw();
  return results;
}

// max |actual - expected| / max |expected|.
double relative_error(const Tensor& actual, const Tensor& expected) {
  EXPECT_EQ(shape_str(actual.shape()), shape_str(expected.shape()));
  if (actual.shape() != expected.shape()) return INFINITY;
  const auto a = actual.to_vector<double>(), e = expected.to_vector<double>();
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - e[i]));
    scale = std::max(scale, std::abs(e[i]));
  }
  return diff / std::max(scale, 1e-30);
}

constexpr double kTolerance = 1e-4;

// Token ids and masks from the fixture's reference inputs, plus a second mask with left
// padding (a causal model's first queries then see no key at all).
TensorMap fixture_inputs(const std::string& name, bool left_padding) {
  const auto ref =
      checkpoint::SafetensorsFile::open((fixture(name) / "reference.safetensors").string());
  TensorMap inputs;
  inputs["input_ids"] = ref.tensor("input_ids").clone_raw();
  const Tensor& ids = inputs["input_ids"];
  if (ref.contains("attention_mask")) {
    inputs["attention_mask"] = ref.tensor("attention_mask").clone_raw();
  } else {
    inputs["attention_mask"] = Tensor::full(ids.shape(), 1, DType::i64);
  }
  if (left_padding) {
    std::vector<int64_t> mask = inputs["attention_mask"].to_vector<int64_t>();
    for (int64_t j = 0; j < 3; ++j) mask[size_t(j)] = 0;  // row 0 starts with three pads
    inputs["attention_mask"] = Tensor::from_vector(mask, ids.shape());
  }
  return inputs;
}

// Exports `folder` to `file`, runs it in ONNX Runtime and compares every graph output with the
// output of the same name of our runtime's forward on the same inputs.
void expect_export_matches(const fs::path& folder, const fs::path& file, TensorMap inputs,
                           const ExportOptions& options = {}) {
  std::string why;
  const fs::path pyonnx = onnxruntime_folder(why);
  ASSERT_FALSE(pyonnx.empty()) << why;
  const ExportSummary s = export_model(folder, file, options);
  EXPECT_TRUE(fs::exists(file));
  auto model = load_model(folder);
  TensorMap ours = model->forward(inputs);
  TensorMap feed;
  for (const auto& name : s.written.inputs) {
    if (!inputs.count(name) && name == "token_type_ids")
      inputs[name] = Tensor::zeros(inputs.at("input_ids").shape(), DType::i64);
    if (!inputs.count(name) && name == "position_ids") continue;  // optional: 0, 1, ...
    ASSERT_TRUE(inputs.count(name)) << folder << ": the graph takes " << name;
    feed[name] = inputs[name];
  }
  const TensorMap theirs = run_onnxruntime(pyonnx, file, feed);
  ASSERT_EQ(theirs.size(), s.written.outputs.size());
  for (const auto& name : s.written.outputs) {
    ASSERT_TRUE(ours.count(name)) << folder << ": our forward has no " << name;
    ASSERT_TRUE(theirs.count(name)) << folder << ": ONNX Runtime returned no " << name;
    EXPECT_LE(relative_error(theirs.at(name), ours.at(name)), kTolerance) << folder << " " << name;
  }
}

TEST(OnnxExport, Gpt2MatchesRuntime) {
  SKIP_WITHOUT_ONNXRUNTIME(pyonnx);
  expect_export_matches(fixture("gpt2"), scratch() / "gpt2.onnx", fixture_inputs("gpt2", false));
}

// bf16 weights on disk, written as f32 (as the runtime loads them), and a sharded checkpoint.
TEST(OnnxExport, Gpt2Bf16AndShardedMatchRuntime) {
  SKIP_WITHOUT_ONNXRUNTIME(pyonnx);
  for (const char* folder : {"gpt2_bf16", "gpt2_sharded"})
    expect_export_matches(fixture(folder), scratch() / (std::string(folder) + ".onnx"),
                          fixture_inputs("gpt2", false));
}

TEST(OnnxExport, Gpt2FullyMaskedQueriesMatchRuntime) {
  SKIP_WITHOUT_ONNXRUNTIME(pyonnx);
  expect_export_matches(fixture("gpt2"), scratch() / "gpt2.onnx", fixture_inputs("gpt2", true));
}

// Opsets before 17 decompose LayerNormalization; weights in an external file.
TEST(OnnxExport, Gpt2Opset14ExternalDataMatchesRuntime) {
  SKIP_WITHOUT_ONNXRUNTIME(pyonnx);
  const fs::path file = scratch() / "gpt2.onnx";
  expect_export_matches(fixture("gpt2"), file, fixture_inputs("gpt2", false),
                        {.opset = 14, .external_data = true});
  const fs::path data = file.string() + ".data";
  ASSERT_TRUE(fs::exists(data));
  EXPECT_GT(fs::file_size(data), fs::file_size(file));
}

// Prefill with an empty past, then one step fed the returned present: the logits of both
// equal our runtime's logits of the whole sequence.
TEST(OnnxExport, Gpt2WithPastMatchesRuntime) {
  SKIP_WITHOUT_ONNXRUNTIME(pyonnx);
  const fs::path file = scratch() / "gpt2_past.onnx";
  export_model(fixture("gpt2"), file, {.with_past = true});
  auto model = load_model(fixture("gpt2"));
  const HfConfig& config = model->config();
  const int64_t layers = config.get_int("n_layer", 12), heads = config.get_int("n_head", 12),
                d = config.get_int("n_embd", 768) / heads;

  TensorMap all = fixture_inputs("gpt2", false);
  all["attention_mask"] = Tensor::full(all["input_ids"].shape(), 1, DType::i64);
  const Tensor ids = all["input_ids"];
  const int64_t batch = ids.size(0), seq = ids.size(1), prefill = seq - 1;
  const Tensor expected = model->forward(all).at("logits");  // [batch, seq, vocab]

  TensorMap step;
  step["input_ids"] = ops::contiguous(ops::narrow(ids, 1, 0, prefill));
  step["attention_mask"] = Tensor::full({batch, prefill}, 1, DType::i64);
  for (int64_t i = 0; i < layers; ++i)
    for (const char* part : {".key", ".value"})
      step["past_key_values." + std::to_string(i) + part] = Tensor::zeros({batch, heads, 0, d});
  const TensorMap first = run_onnxruntime(pyonnx, file, step, "prefill");
  ASSERT_TRUE(first.count("logits"));
  EXPECT_LE(
      relative_error(first.at("logits"), ops::contiguous(ops::narrow(expected, 1, 0, prefill))),
      kTolerance);

  TensorMap next;
  next["input_ids"] = ops::contiguous(ops::narrow(ids, 1, prefill, 1));
  next["attention_mask"] = Tensor::full({batch, seq}, 1, DType::i64);
  for (int64_t i = 0; i < layers; ++i)
    for (const char* part : {".key", ".value"}) {
      const Tensor present = first.at("present." + std::to_string(i) + part);
      EXPECT_EQ(shape_str(present.shape()), shape_str({batch, heads, prefill, d}));
      next["past_key_values." + std::to_string(i) + part] = present;
    }
  const TensorMap second = run_onnxruntime(pyonnx, file, next, "step");
  ASSERT_TRUE(second.count("logits"));
  EXPECT_LE(
      relative_error(second.at("logits"), ops::contiguous(ops::narrow(expected, 1, prefill, 1))),
      kTolerance);
  EXPECT_EQ(shape_str(second.at("present.0.key").shape()), shape_str({batch, heads, seq, d}));
}

class OnnxExportBert : public ::testing::TestWithParam<std::string> {};

TEST_P(OnnxExportBert, MatchesRuntime) {
  SKIP_WITHOUT_ONNXRUNTIME(pyonnx);
  expect_export_matches(fixture(GetParam()), scratch() / "model.onnx",
                        fixture_inputs(GetParam(), false));
}

INSTANTIATE_TEST_SUITE_P(Heads, OnnxExportBert,
                         ::testing::Values("bert", "bert_cls", "bert_pretraining", "roberta",
                                           "roberta_cls"));

// BertModel (last_hidden_state and pooler_output) from the pretraining fixture's weights: the
// fixture folder copied with config.json naming the base model.
TEST(OnnxExport, BertModelMatchesRuntime) {
  SKIP_WITHOUT_ONNXRUNTIME(pyonnx);
  const fs::path dir = scratch();
  fs::copy_file(fixture("bert_pretraining") / "model.safetensors", dir / "model.safetensors");
  std::ifstream in(fixture("bert_pretraining") / "config.json");
  std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string from = "BertForPreTraining";
  config.replace(config.find(from), from.size(), "BertModel");
  std::ofstream(dir / "config.json") << config;
  expect_export_matches(dir, dir / "model.onnx", fixture_inputs("bert_pretraining", true));
}

class OnnxExportVit : public ::testing::TestWithParam<std::string> {};

TEST_P(OnnxExportVit, MatchesRuntime) {
  SKIP_WITHOUT_ONNXRUNTIME(pyonnx);
  const auto ref =
      checkpoint::SafetensorsFile::open((fixture(GetParam()) / "reference.safetensors").string());
  expect_export_matches(fixture(GetParam()), scratch() / "model.onnx",
                        {{"pixel_values", ref.tensor("pixel_values").clone_raw()}});
}

INSTANTIATE_TEST_SUITE_P(Heads, OnnxExportVit, ::testing::Values("vit", "vit_backbone"));

// Past the inline limit (2 GB in use; lowered here) the weights go to `<file>.data` without
// being asked, and the model still runs.
TEST(OnnxExport, LargeWeightsGoExternal) {
  SKIP_WITHOUT_ONNXRUNTIME(pyonnx);
  const fs::path file = scratch() / "big.onnx";
  const Tensor table = Tensor::from_vector(std::vector<float>(64 * 1024, 0.5f), {1024, 64});
  GraphBuilder g("big", kDefaultOpset);
  const Value ids = g.input("input_ids", DType::i64, {"batch"});
  g.output(g.op("Gather", {g.initializer("table", table), ids}), "rows", DType::f32, {"batch", 64});
  const WriteSummary s = g.write(file, {.inline_limit_bytes = 100 * 1024});
  ASSERT_EQ(s.data, fs::path(file.string() + ".data"));
  EXPECT_EQ(fs::file_size(s.data), uint64_t(table.nbytes()));
  EXPECT_LT(fs::file_size(file), 4096u);
  const TensorMap out =
      run_onnxruntime(pyonnx, file, {{"input_ids", Tensor::from_vector<int64_t>({3, 1000})}});
  ASSERT_TRUE(out.count("rows"));
  EXPECT_EQ(relative_error(out.at("rows"), Tensor::full({2, 64}, 0.5)), 0.0);
}

// The Llama family: RMSNorm, rotary embeddings (default, linear, llama3 and dynamic
// frequencies), SwiGLU, grouped-query attention, q/k/v biases (qwen2), tied and untied heads,
// bf16 weights.
class OnnxExportLlama : public ::testing::TestWithParam<std::string> {};

TEST_P(OnnxExportLlama, MatchesRuntime) {
  SKIP_WITHOUT_ONNXRUNTIME(pyonnx);
  expect_export_matches(fixture(GetParam()), scratch() / "model.onnx",
                        fixture_inputs(GetParam(), false));
}

// Left padding with Hugging Face generate's positions (cumsum(mask) - 1, pads at 1) given as
// position_ids: the optional input overrides the graph's own numbering.
TEST_P(OnnxExportLlama, LeftPaddingWithPositionIdsMatchesRuntime) {
  SKIP_WITHOUT_ONNXRUNTIME(pyonnx);
  TensorMap inputs = fixture_inputs(GetParam(), true);
  const Tensor& mask = inputs.at("attention_mask");
  const auto keep = mask.to_vector<int64_t>();
  std::vector<int64_t> positions(keep.size());
  const int64_t seq = mask.size(1);
  for (int64_t b = 0; b < mask.size(0); ++b) {
    int64_t count = 0;
    for (int64_t j = 0; j < seq; ++j) {
      const size_t k = size_t(b * seq + j);
      count += keep[k] != 0;
      positions[k] = keep[k] != 0 ? count - 1 : 1;
    }
  }
  inputs["position_ids"] = Tensor::from_vector(positions, mask.shape());
  expect_export_matches(fixture(GetParam()), scratch() / "model.onnx", inputs);
}

// Prefill of all but the last token from an empty past, then one step fed the returned
// present (cached by key/value head): the prefill's logits equal our forward of the prefix, and
// the step's our runtime's decode step after the same prefill, and (except for dynamic
// rotary frequencies, whose base grows with the sequence: the prefix's keys were rotated with
// the shorter sequence's base) the full sequence's last logits.
TEST_P(OnnxExportLlama, WithPastMatchesRuntime) {
  SKIP_WITHOUT_ONNXRUNTIME(pyonnx);
  const fs::path folder = fixture(GetParam()), file = scratch() / "past.onnx";
  export_model(folder, file, {.with_past = true});
  auto model = load_model(folder);
  const HfConfig& config = model->config();
  const int64_t layers = config.get_int("num_hidden_layers", 0),
                heads = config.get_int("num_attention_heads", 0),
                kv_heads = config.get_int("num_key_value_heads", heads),
                d = config.get_int("head_dim", config.get_int("hidden_size", 0) / heads);
  const bool dynamic = GetParam() == "llama_dynamic";

  const Tensor ids = fixture_inputs(GetParam(), false).at("input_ids");
  const int64_t batch = ids.size(0), seq = ids.size(1), prefill = seq - 1;
  const Tensor prefix = ops::contiguous(ops::narrow(ids, 1, 0, prefill));
  const Tensor last = ops::contiguous(ops::narrow(ids, 1, prefill, 1));
  const Tensor full_logits =
      model->forward({{"input_ids", ids}, {"attention_mask", Tensor::full(ids.shape(), 1, DType::i64)}})
          .at("logits");
  const Tensor prefix_logits =
      model->forward({{"input_ids", prefix},
                      {"attention_mask", Tensor::full(prefix.shape(), 1, DType::i64)}})
          .at("logits");
  auto state = model->new_decode_state();
  model->decode_step({{"input_ids", prefix}}, *state);
  const Tensor step_logits = model->decode_step({{"input_ids", last}}, *state).at("logits");

  TensorMap step{{"input_ids", prefix},
                 {"attention_mask", Tensor::full({batch, prefill}, 1, DType::i64)}};
  for (int64_t i = 0; i < layers; ++i)
    for (const char* part : {".key", ".value"})
      step["past_key_values." + std::to_string(i) + part] = Tensor::zeros({batch, kv_heads, 0, d});
  const TensorMap first = run_onnxruntime(pyonnx, file, step, "prefill");
  ASSERT_TRUE(first.count("logits"));
  EXPECT_LE(relative_error(first.at("logits"), prefix_logits), kTolerance);

  TensorMap next{{"input_ids", last}, {"attention_mask", Tensor::full({batch, seq}, 1, DType::i64)}};
  for (int64_t i = 0; i < layers; ++i)
    for (const char* part : {".key", ".value"}) {
      const Tensor present = first.at("present." + std::to_string(i) + part);
      EXPECT_EQ(shape_str(present.shape()), shape_str({batch, kv_heads, prefill, d}));
      next["past_key_values." + std::to_string(i) + part] = present;
    }
  const TensorMap second = run_onnxruntime(pyonnx, file, next, "step");
  ASSERT_TRUE(second.count("logits"));
  const Tensor onnx_step = ops::contiguous(ops::select(second.at("logits"), 1, 0));  // [b, vocab]
  EXPECT_LE(relative_error(onnx_step, step_logits), kTolerance);
  if (!dynamic)
    EXPECT_LE(relative_error(onnx_step, ops::contiguous(ops::select(full_logits, 1, seq - 1))),
              kTolerance);
  EXPECT_EQ(shape_str(second.at("present.0.key").shape()), shape_str({batch, kv_heads, seq, d}));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, OnnxExportLlama,
                         ::testing::Values("llama3", "llama_linear", "llama_dynamic", "mistral",
                                           "qwen2", "qwen2_bf16"));

// T5 and MT5 (relu and gated-gelu feed-forward, tied and scaled head (t5) or untied and
// unscaled (t5v11, mt5)): the encoder's output, then the decoder fed ONNX Runtime's encoder
// output, each against our runtime's forward of the fixture's inputs (the decoder causal,
// without a decoder mask, as the graphs take it).
struct T5Run {
  TensorMap inputs;      // input_ids, attention_mask, decoder_input_ids
  TensorMap ours;        // our forward: encoder_last_hidden_state, logits
  TensorMap encoded;     // ONNX Runtime's encoder outputs
};

T5Run run_t5_encoder(const fs::path& pyonnx, const std::string& folder, const fs::path& encoder) {
  T5Run r;
  const auto ref =
      checkpoint::SafetensorsFile::open((fixture(folder) / "reference.safetensors").string());
  for (const char* name : {"input_ids", "attention_mask", "decoder_input_ids"})
    r.inputs[name] = ref.tensor(name).clone_raw();
  r.ours = load_model(fixture(folder))->forward(r.inputs);
  r.encoded = run_onnxruntime(pyonnx, encoder, {{"input_ids", r.inputs.at("input_ids")},
                                                {"attention_mask", r.inputs.at("attention_mask")}});
  EXPECT_TRUE(r.encoded.count("last_hidden_state"));
  if (r.encoded.count("last_hidden_state"))
    EXPECT_LE(relative_error(r.encoded.at("last_hidden_state"),
                             r.ours.at("encoder_last_hidden_state")),
              kTolerance)
        << folder << " encoder";
  return r;
}

class OnnxExportT5 : public ::testing::TestWithParam<std::string> {};

TEST_P(OnnxExportT5, EncoderAndDecoderMatchRuntime) {
  SKIP_WITHOUT_ONNXRUNTIME(pyonnx);
  const fs::path dir = scratch();
  const ExportSummary s = export_model(fixture(GetParam()), dir / "t5.onnx");
  ASSERT_EQ(s.files.size(), 2u);
  EXPECT_EQ(s.files[0].model, dir / "t5_encoder.onnx");
  EXPECT_EQ(s.files[1].model, dir / "t5_decoder.onnx");
  EXPECT_EQ(s.files[1].outputs, std::vector<std::string>{"logits"});
  EXPECT_FALSE(fs::exists(dir / "t5.onnx"));
  const T5Run r = run_t5_encoder(pyonnx, GetParam(), dir / "t5_encoder.onnx");
  ASSERT_TRUE(r.encoded.count("last_hidden_state"));
  const TensorMap decoded = run_onnxruntime(
      pyonnx, dir / "t5_decoder.onnx",
      {{"input_ids", r.inputs.at("decoder_input_ids")},
       {"encoder_attention_mask", r.inputs.at("attention_mask")},
       {"encoder_hidden_states", r.encoded.at("last_hidden_state")}});
  ASSERT_TRUE(decoded.count("logits"));
  EXPECT_LE(relative_error(decoded.at("logits"), r.ours.at("logits")), kTolerance);
}

// With past: the decoder over all but the last decoder token returns the caches (self and
// cross); the decoder with past then takes the last token and both caches. Its logits equal
// the last position of our forward's, the prefill's the others.
TEST_P(OnnxExportT5, DecoderWithPastMatchesRuntime) {
  SKIP_WITHOUT_ONNXRUNTIME(pyonnx);
  const fs::path dir = scratch();
  const ExportSummary s = export_model(fixture(GetParam()), dir / "t5.onnx", {.with_past = true});
  ASSERT_EQ(s.files.size(), 3u);
  EXPECT_EQ(s.files[2].model, dir / "t5_decoder_with_past.onnx");
  const T5Run r = run_t5_encoder(pyonnx, GetParam(), dir / "t5_encoder.onnx");
  ASSERT_TRUE(r.encoded.count("last_hidden_state"));
  const auto model = load_model(fixture(GetParam()));
  const HfConfig& config = model->config();
  const int64_t layers = config.get_int("num_decoder_layers", 0), heads = config.get_int("num_heads", 0),
                d = config.get_int("d_kv", 0);
  const Tensor dec = r.inputs.at("decoder_input_ids"), logits = r.ours.at("logits");
  const int64_t batch = dec.size(0), n = dec.size(1), source = r.inputs.at("input_ids").size(1);

  const TensorMap first = run_onnxruntime(
      pyonnx, dir / "t5_decoder.onnx",
      {{"input_ids", ops::contiguous(ops::narrow(dec, 1, 0, n - 1))},
       {"encoder_attention_mask", r.inputs.at("attention_mask")},
       {"encoder_hidden_states", r.encoded.at("last_hidden_state")}},
      "prefill");
  ASSERT_TRUE(first.count("logits"));
  EXPECT_LE(relative_error(first.at("logits"), ops::contiguous(ops::narrow(logits, 1, 0, n - 1))),
            kTolerance);
  TensorMap step{{"input_ids", ops::contiguous(ops::narrow(dec, 1, n - 1, 1))},
                 {"encoder_attention_mask", r.inputs.at("attention_mask")}};
  for (int64_t i = 0; i < layers; ++i)
    for (const char* part : {".decoder.key", ".decoder.value", ".encoder.key", ".encoder.value"}) {
      const std::string name = std::to_string(i) + part;
      ASSERT_TRUE(first.count("present." + name)) << name;
      const Tensor present = first.at("present." + name);
      const bool self = std::string(part).find("decoder") != std::string::npos;
      EXPECT_EQ(shape_str(present.shape()), shape_str({batch, heads, self ? n - 1 : source, d}));
      step["past_key_values." + name] = present;
    }
  const TensorMap second = run_onnxruntime(pyonnx, dir / "t5_decoder_with_past.onnx", step, "step");
  ASSERT_TRUE(second.count("logits"));
  EXPECT_LE(relative_error(second.at("logits"), ops::contiguous(ops::narrow(logits, 1, n - 1, 1))),
            kTolerance);
  EXPECT_EQ(shape_str(second.at("present.0.decoder.key").shape()), shape_str({batch, heads, n, d}));
  EXPECT_FALSE(second.count("present.0.encoder.key"));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, OnnxExportT5, ::testing::Values("t5", "t5v11", "mt5"));

// The errors need no ONNX Runtime: each names what was wrong and where.
template <typename E>
void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const E& e) {
    for (const auto& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(OnnxExportErrors, BadModelFolder) {
  const fs::path out = scratch() / "x.onnx";
  expect_error<NotFound>([&] { export_model(fixture("no_such_model"), out); },
                         {"no_such_model", "no such folder"});
  const fs::path empty = scratch();
  expect_error<NotFound>([&] { export_model(empty, out); }, {empty.string(), "no config.json"});
  std::ofstream(empty / "config.json") << R"({"model_type": "gpt2", "vocab_size": 10})";
  expect_error<NotFound>([&] { export_model(empty, out); }, {empty.string()});  // no weights
  EXPECT_FALSE(fs::exists(out));
}

TEST(OnnxExportErrors, UnknownFamily) {
  const fs::path dir = scratch();
  std::ofstream(dir / "config.json") << R"({"model_type": "xlnet"})";
  expect_error<Unsupported>([&] { export_model(dir, dir / "x.onnx"); }, {"xlnet", "gpt2"});
}

TEST(OnnxExportErrors, WithPastForAnEncoder) {
  const fs::path out = scratch() / "x.onnx";
  expect_error<Unsupported>([&] { export_model(fixture("bert"), out, {.with_past = true}); },
                            {"--with-past", "bert", "BertForMaskedLM"});
  EXPECT_FALSE(fs::exists(out));
}

// Rotary types without an exporter (yarn, longrope, ...) are refused when the model loads,
// naming the type; nothing is written.
TEST(OnnxExportErrors, UnsupportedRopeType) {
  const fs::path dir = scratch();
  fs::copy_file(fixture("llama3") / "model.safetensors", dir / "model.safetensors");
  std::ifstream in(fixture("llama3") / "config.json");
  std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string from = "\"rope_type\": \"llama3\"";
  ASSERT_NE(config.find(from), std::string::npos);
  config.replace(config.find(from), from.size(), "\"rope_type\": \"yarn\"");
  std::ofstream(dir / "config.json") << config;
  expect_error<Unsupported>([&] { export_model(dir, dir / "x.onnx"); }, {"yarn"});
  EXPECT_FALSE(fs::exists(dir / "x.onnx"));
}

TEST(OnnxExportErrors, OpsetOutOfRange) {
  const fs::path out = scratch() / "x.onnx";
  expect_error<Unsupported>([&] { export_model(fixture("gpt2"), out, {.opset = 12}); },
                            {"opset 12", "13"});
  expect_error<Unsupported>([&] { export_model(fixture("gpt2"), out, {.opset = 18}); },
                            {"opset 18", "17"});
}

// The checker and shape inference run on every write: a graph with a type error is refused
// as our bug (InternalError), naming the node.
TEST(OnnxExportErrors, InvalidGraphIsRefused) {
  std::string why;
  if (!writer_available(&why)) GTEST_SKIP() << why;
  GraphBuilder g("broken", kDefaultOpset);
  const Value x = g.input("x", DType::f32, {"batch", 4});
  const Value ids = g.input("ids", DType::i64, {"batch", 4});
  g.output(g.op("Add", {x, ids}), "y", DType::f32, {"batch", 4});  // f32 + i64
  expect_error<InternalError>([&] { g.write(scratch() / "broken.onnx"); }, {"Add"});
}

}  // namespace
}  // namespace libai::models::onnx
