// Pipeline stages (models/stages/) against the whole model that load_model builds: GPT-2,
// BERT and RoBERTa fixtures and random models with more layers, cut at every split, chained
// eagerly, give the whole model's outputs; GPT-2's decoding steps (with beam reorders) are
// checked against the whole model recomputed without caches, and generate() gives the same
// tokens (T5 and MT5: t5_stage_test.cc). A stage holds and reads only its own tensors, tensor parallelism inside a
// stage gives the single-device activations, and the cost estimates add up to the parameters.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "models/convert.h"
#include "models/generation/generate.h"
#include "models/stages/chain.h"
#include "ops/ops.h"
#include "parity_util.h"
#include "random_models.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/comm/spmd.h"

namespace libai::models::stages {
namespace {

namespace fs = std::filesystem;
using testing::model_fixture;
using testing::split_name;
using testing::whole_parameters;
const auto error_of = testing::invalid_argument_of;
using testing::relative_error;
using Tokens = std::vector<int64_t>;


// A random model of the family (4 heads, odd vocabulary) with `layers` layers.
fs::path random_model(const std::string& family, int layers) {
  for (auto f : testing::families()) {
    if (f.name != family) continue;
    f.config[family == "gpt2" ? "n_layer" : "num_hidden_layers"] = layers;
    f.name += "_pipe" + std::to_string(layers);
    return testing::save_random_model(f);
  }
  ADD_FAILURE() << "no random family " << family;
  return {};
}

// Left-padded rows with Hugging Face's mask and positions, built here, independently of
// CausalInputs: the whole history of every row, for a forward without caches.
TensorMap padded_rows(const std::vector<Tokens>& rows, int64_t pad) {
  size_t length = 0;
  for (const auto& r : rows) length = std::max(length, r.size());
  const int64_t b = int64_t(rows.size()), n = int64_t(length);
  std::vector<int64_t> ids(b * n, pad), mask(b * n, 0), positions(b * n, 1);
  for (int64_t i = 0; i < b; ++i) {
    const int64_t offset = n - int64_t(rows[i].size());
    for (size_t j = 0; j < rows[i].size(); ++j) {
      ids[i * n + offset + j] = rows[i][j];
      mask[i * n + offset + j] = 1;
      positions[i * n + offset + j] = int64_t(j);
    }
  }
  return {{"input_ids", Tensor::from_vector(ids, {b, n})},
          {"attention_mask", Tensor::from_vector(mask, {b, n})},
          {"position_ids", Tensor::from_vector(positions, {b, n})}};
}

// The whole model's next-token logits after each row's history: [batch, vocab].
Tensor recomputed_logits(Model& model, const std::vector<Tokens>& rows, int64_t pad) {
  Tensor logits = model.forward(padded_rows(rows, pad)).at("logits");  // [batch, n, vocab]
  return ops::contiguous(ops::select(logits, 1, -1));
}

// ---------------------------------------------------------------------------------------
// CausalInputs, by hand.

TEST(CausalInputs, PrefillStepAndSelectRowsByHand) {
  CausalInputs inputs({{5, 6, 7}, {8}}, /*pad_id=*/0);
  Activations p = inputs.prefill();
  EXPECT_EQ(p.at("input_ids").to_vector<int64_t>(), (Tokens{5, 6, 7, 0, 0, 8}));
  EXPECT_EQ(p.at("position_ids").to_vector<int64_t>(), (Tokens{0, 1, 2, 1, 1, 0}));
  EXPECT_EQ(p.at("attention_mask").dtype(), DType::boolean);
  EXPECT_EQ(p.at("attention_mask").to_vector<int64_t>(), (Tokens{1, 1, 1, 0, 0, 1}));
  EXPECT_EQ(p.count("select_rows"), 0u);

  Activations s = inputs.step({9, 10});
  EXPECT_EQ(shape_str(s.at("input_ids").shape()), "[2, 1]");
  EXPECT_EQ(s.at("input_ids").to_vector<int64_t>(), (Tokens{9, 10}));
  EXPECT_EQ(s.at("position_ids").to_vector<int64_t>(), (Tokens{3, 1}));
  EXPECT_EQ(s.at("attention_mask").to_vector<int64_t>(), (Tokens{1, 1, 1, 1, 0, 0, 1, 1}));
  EXPECT_EQ(s.count("select_rows"), 0u);

  inputs.select_rows({1, 1, 0});
  inputs.select_rows({2, 0});  // composes: old rows 0 and 1
  EXPECT_EQ(inputs.batch_size(), 2);
  s = inputs.step({11, 12});
  EXPECT_EQ(s.at("select_rows").to_vector<int64_t>(), (Tokens{0, 1}));
  EXPECT_EQ(s.at("position_ids").to_vector<int64_t>(), (Tokens{4, 2}));
  EXPECT_EQ(s.at("attention_mask").to_vector<int64_t>(), (Tokens{1, 1, 1, 1, 1, 0, 0, 1, 1, 1}));
  s = inputs.step({13, 14});
  EXPECT_EQ(s.count("select_rows"), 0u);  // once only
  EXPECT_THROW(inputs.select_rows({2}), Error);
  EXPECT_THROW(CausalInputs({{1}, {}}, 0), Error);
}

TEST(StageSpec, ContiguousStagesAndNames) {
  auto specs = contiguous_stages({2, 1, 3});
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_EQ(specs[1], (StageSpec{.first_layer = 2, .last_layer = 3, .num_layers = 6}));
  EXPECT_TRUE(specs[0].is_first() && !specs[0].is_last());
  EXPECT_TRUE(specs[2].is_last() && !specs[2].is_first());
  EXPECT_EQ(to_string(specs[2]), "layers [3, 6) of 6");
  EXPECT_THROW(contiguous_stages({2, 0}), Error);
  EXPECT_THROW(contiguous_stages({}), Error);
}

// ---------------------------------------------------------------------------------------
// GPT-2: logits of the prompts and of decoding steps, generate().

// Prefill, steps and beam reorders through the chain, each against the whole model
// recomputed over every row's history without caches.
void check_decoding(const fs::path& dir, const std::vector<int>& sizes, double tol) {
  SCOPED_TRACE(dir.filename().string() + " split " + split_name(sizes));
  auto whole = load_model(dir);
  StageChain chain = StageChain::load(dir, contiguous_stages(sizes));
  const int64_t pad = causal_lm_info(chain.config()).pad_id;
  std::vector<Tokens> rows = {{5, 6, 7, 8}, {9, 10}, {11}};
  ChainedCausalLm lm(chain);
  auto session = lm.start(rows);
  auto expect_same = [&](const char* when) {
    Tensor want = recomputed_logits(*whole, rows, pad);
    Tensor got = session->logits();
    EXPECT_EQ(got.dtype(), DType::f32) << when;
    EXPECT_LE(relative_error(got, want), tol) << when;
  };
  expect_same("prefill");
  auto append = [&](const Tokens& tokens) {
    session->append(tokens);
    for (size_t i = 0; i < rows.size(); ++i) rows[i].push_back(tokens[i]);
  };
  auto select = [&](const Tokens& picked) {
    session->select_rows(picked);
    std::vector<Tokens> next;
    for (int64_t r : picked) next.push_back(rows[r]);
    rows = next;
  };
  append({1, 2, 3});
  expect_same("step 1");
  select({2, 0, 0, 1});  // repeat and reorder (beam search)
  expect_same("after select_rows");
  append({4, 5, 6, 7});
  expect_same("step 2");
  append({8, 9, 10, 11});
  expect_same("step 3");
  select({3, 1});
  select({1, 0});  // two selections before a step compose
  append({12, 13});
  expect_same("step 4");
}

TEST(Gpt2Stages, FixtureLogitsOfPrefillAndStepsAtEverySplit) {
  for (const auto& sizes : testing::all_splits(2)) check_decoding(model_fixture("gpt2"), sizes, 1e-5);
}

TEST(Gpt2Stages, RandomFourLayersAtEverySplit) {
  const fs::path dir = random_model("gpt2", 4);
  for (const auto& sizes : testing::all_splits(4)) check_decoding(dir, sizes, 1e-5);
}

TEST(Gpt2Stages, PrefillLogitsAreTheWholeModelsLastPosition) {
  auto whole = load_model(model_fixture("gpt2"));
  StageChain chain = StageChain::load(model_fixture("gpt2"), contiguous_stages({1, 1}));
  CausalInputs inputs({{5, 6, 7}, {8, 9}}, 2);
  const Activations in = inputs.prefill();
  auto states = chain.new_states();
  // Stage by stage: the messages are the contract's, and nothing more.
  auto names_of = [](const Activations& a) {
    std::vector<std::string> names;
    for (const auto& [name, t] : a) names.push_back(name);
    return names;
  };
  Activations mid = chain.stage(0).forward(in, *states[0]);
  EXPECT_EQ(names_of(mid),
            (std::vector<std::string>{"attention_mask", "hidden_states", "position_ids"}));
  EXPECT_EQ(shape_str(mid.at("hidden_states").shape()), "[2, 3, 48]");
  Activations out = chain.stage(1).forward(mid, *states[1]);
  ASSERT_EQ(out.size(), 1u);
  Tensor want = ops::select(whole->forward(in).at("logits"), 1, -1);
  EXPECT_LE(relative_error(out.at("logits"), ops::contiguous(want)), 1e-5);
  EXPECT_EQ(shape_str(out.at("logits").shape()), "[2, 503]");
  // A step after a reorder: select_rows travels with the hidden states.
  inputs.select_rows({1, 0, 1});
  mid = chain.stage(0).forward(inputs.step({3, 4, 5}), *states[0]);
  EXPECT_EQ(names_of(mid), (std::vector<std::string>{"attention_mask", "hidden_states",
                                                     "position_ids", "select_rows"}));
  EXPECT_EQ(mid.at("select_rows").to_vector<int64_t>(), (Tokens{1, 0, 1}));
  EXPECT_EQ(names_of(chain.stage(1).forward(mid, *states[1])),
            (std::vector<std::string>{"logits"}));
}

TEST(Gpt2Stages, GenerateGivesTheWholeModelsTokens) {
  auto whole = load_model(model_fixture("gpt2"));
  StageChain chain = StageChain::load(model_fixture("gpt2"), contiguous_stages({1, 1}));
  ChainedCausalLm lm(chain);
  const std::vector<Tokens> prompts = {{5, 6, 7, 8}, {9, 10}, {11}};
  generation::GenerationConfig greedy;
  greedy.max_new_tokens = 10;
  greedy.eos_token_ids = {2};
  generation::GenerationConfig beams = greedy;
  beams.num_beams = 3;
  beams.num_return_sequences = 2;
  for (const auto& config : {greedy, beams}) {
    auto want = generation::generate(*whole->generative(), prompts, config);
    auto got = generation::generate(lm, prompts, config);
    ASSERT_EQ(got.size(), want.size());
    for (size_t p = 0; p < want.size(); ++p) {
      ASSERT_EQ(got[p].size(), want[p].size());
      for (size_t s = 0; s < want[p].size(); ++s) {
        EXPECT_EQ(got[p][s].tokens, want[p][s].tokens) << "prompt " << p << " sequence " << s;
        EXPECT_NEAR(got[p][s].score, want[p][s].score, 1e-4);
      }
    }
    EXPECT_GE(want[0][0].tokens.size(), 3u);  // it generated something worth comparing
  }
}

// The Llama family (llama, mistral, qwen2 fixtures: grouped-query attention, rotary positions
// that every stage applies, tied heads whose table the last stage holds too): prefill, steps
// and reorders through the stages against the whole model recomputed without caches, and
// generate() over the stages against the whole model. llama_dynamic is left out of the
// recomputation: its short sequences never reach the dynamic range, so it checks nothing more.
TEST(LlamaStages, FixtureLogitsOfPrefillAndStepsAtEverySplit) {
  for (const char* name : {"llama3", "llama_linear", "mistral", "qwen2"})
    for (const auto& sizes : testing::all_splits(2))
      check_decoding(model_fixture(name), sizes, 1e-5);
}

TEST(LlamaStages, GenerateGivesTheWholeModelsTokens) {
  for (const char* name : {"llama3", "llama_linear", "llama_dynamic", "mistral", "qwen2"}) {
    SCOPED_TRACE(name);
    auto whole = load_model(model_fixture(name));
    StageChain chain = StageChain::load(model_fixture(name), contiguous_stages({1, 1}));
    ChainedCausalLm lm(chain);
    // long enough for llama_dynamic to pass its 16 positions
    const std::vector<Tokens> prompts = {{5, 6, 7, 8, 9, 10, 11, 12, 13, 14}, {9, 10}, {11}};
    generation::GenerationConfig greedy;
    greedy.max_new_tokens = 10;
    greedy.eos_token_ids = {2};
    generation::GenerationConfig beams = greedy;
    beams.num_beams = 3;
    beams.num_return_sequences = 2;
    for (const auto& config : {greedy, beams}) {
      auto want = generation::generate(*whole->generative(), prompts, config);
      auto got = generation::generate(lm, prompts, config);
      ASSERT_EQ(got.size(), want.size());
      for (size_t p = 0; p < want.size(); ++p) {
        ASSERT_EQ(got[p].size(), want[p].size());
        for (size_t s = 0; s < want[p].size(); ++s) {
          EXPECT_EQ(got[p][s].tokens, want[p][s].tokens) << "prompt " << p << " sequence " << s;
          EXPECT_NEAR(got[p][s].score, want[p][s].score, 1e-4);
        }
      }
      EXPECT_GE(want[0][0].tokens.size(), 3u);
    }
  }
}

TEST(Gpt2Stages, LibaiLayoutLoadsTheSameStages) {
  const fs::path dir =
      fs::temp_directory_path() / ("libai_pipe_gpt2_libai_" + std::to_string(::getpid()));
  convert_model(model_fixture("gpt2"), dir, CheckpointLayout::libai);
  auto hf = load_stage(model_fixture("gpt2"), {.first_layer = 1, .last_layer = 2, .num_layers = 2});
  auto libai = load_stage(dir, {.first_layer = 1, .last_layer = 2, .num_layers = 2});
  auto a = hf->named_parameters(), b = libai->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(relative_error(*b[i].second, *a[i].second), 0.0) << a[i].first;
  }
  fs::remove_all(dir);
}

// ---------------------------------------------------------------------------------------
// BERT and RoBERTa: last_hidden_state.

TensorMap encoder_inputs(int64_t vocab, bool token_types) {
  TensorMap in{{"input_ids", testing::ids_tensor({2, 7}, 5, vocab)}};
  Tensor mask = Tensor::ones({2, 7}, DType::i64);
  for (int64_t j = 4; j < 7; ++j) mask.data<int64_t>()[7 + j] = 0;
  in["attention_mask"] = mask;
  if (token_types) {
    Tensor types = Tensor::zeros({2, 7}, DType::i64);
    for (int64_t j = 3; j < 7; ++j) types.data<int64_t>()[j] = 1;
    in["token_type_ids"] = types;
  }
  return in;
}

void check_encoder(const fs::path& dir, const std::vector<int>& sizes, const TensorMap& in) {
  SCOPED_TRACE(dir.filename().string() + " split " + split_name(sizes));
  auto whole = load_model(dir);
  const Tensor want = whole->forward(in).at("last_hidden_state");
  StageChain chain = StageChain::load(dir, contiguous_stages(sizes));
  auto states = chain.new_states();
  Activations out = chain.forward(in, states);
  ASSERT_EQ(out.count("last_hidden_state"), 1u);
  EXPECT_LE(relative_error(out.at("last_hidden_state"), want), 1e-5);
  EXPECT_EQ(out.at("attention_mask").to_vector<int64_t>(),
            in.at("attention_mask").to_vector<int64_t>());
  EXPECT_EQ(out.size(), 2u);
  if (sizes.size() > 1) {  // a middle message
    Activations mid = chain.stage(0).forward(in, *states[0]);
    EXPECT_EQ(mid.size(), 2u);
    EXPECT_EQ(mid.count("hidden_states"), 1u);
  }
}

TEST(EncoderStages, BertAndRobertaFixturesAtEverySplit) {
  for (const auto& sizes : testing::all_splits(2)) {
    check_encoder(model_fixture("bert"), sizes, encoder_inputs(403, true));
    check_encoder(model_fixture("bert_cls"), sizes, encoder_inputs(403, false));
    check_encoder(model_fixture("roberta"), sizes, encoder_inputs(503, false));
  }
}

TEST(EncoderStages, RandomThreeLayersAtEverySplit) {
  for (const std::string family : {"bert", "roberta"}) {
    const fs::path dir = random_model(family, 3);
    for (const auto& sizes : testing::all_splits(3)) check_encoder(dir, sizes, encoder_inputs(37, false));
  }
}

// ---------------------------------------------------------------------------------------
// What a stage holds and reads.


TEST(StageParameters, EachStageHoldsItsOwnPartUnderTheModelsNames) {
  const fs::path dir = random_model("gpt2", 4);
  auto whole = load_model(dir);
  auto first = load_stage(dir, {.first_layer = 0, .last_layer = 1, .num_layers = 4});
  auto middle = load_stage(dir, {.first_layer = 1, .last_layer = 3, .num_layers = 4});
  auto last = load_stage(dir, {.first_layer = 3, .last_layer = 4, .num_layers = 4});
  EXPECT_EQ(first->parameter_count(),
            whole_parameters(*whole, {"embed.", "positions.", "layers.0."}));
  EXPECT_EQ(middle->parameter_count(), whole_parameters(*whole, {"layers.1.", "layers.2."}));
  EXPECT_EQ(last->parameter_count(),
            whole_parameters(*whole, {"embed.", "layers.3.", "final_norm."}));
  for (auto* stage : {first.get(), middle.get(), last.get()})
    for (auto& [name, t] : stage->named_parameters()) {
      Tensor* same = whole->find_parameter(name);
      ASSERT_NE(same, nullptr) << name;
      EXPECT_EQ(relative_error(*t, *same), 0.0) << name;
    }
  auto bert = load_model(model_fixture("bert"));
  auto bert_last =
      load_stage(model_fixture("bert"), {.first_layer = 1, .last_layer = 2, .num_layers = 2});
  EXPECT_EQ(bert_last->parameter_count(), whole_parameters(*bert, {"layers.1."}));
}

TEST(StageParameters, AMiddleStageLoadsFromACheckpointOfItsLayersOnly) {
  const fs::path dir = random_model("gpt2", 4);
  auto whole = load_model(dir);
  const fs::path part =
      fs::temp_directory_path() / ("libai_pipe_part_" + std::to_string(::getpid()));
  fs::remove_all(part);
  fs::create_directories(part);
  fs::copy_file(dir / "config.json", part / "config.json");
  checkpoint::NamedTensors kept;
  for (auto& [name, t] : export_parameters(*whole, whole->weight_map()))
    if (name.find("h.1.") != std::string::npos || name.find("h.2.") != std::string::npos)
      kept.emplace_back(name, t);
  ASSERT_EQ(kept.size(), 24u);
  checkpoint::save_safetensors((part / "model.safetensors").string(), kept);
  auto middle = load_stage(part, {.first_layer = 1, .last_layer = 3, .num_layers = 4});
  EXPECT_EQ(middle->parameter_count(), whole_parameters(*whole, {"layers.1.", "layers.2."}));
  // The first stage needs the embeddings, which that checkpoint lacks: named in the error.
  try {
    load_stage(part, {.first_layer = 0, .last_layer = 1, .num_layers = 4});
    ADD_FAILURE() << "loaded a first stage without its embedding";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("wte.weight"), std::string::npos) << e.what();
  }
  fs::remove_all(part);
}

// ---------------------------------------------------------------------------------------
// Tensor parallelism inside the stages.

TEST(StageTensorParallel, TwoRanksGiveTheSingleDeviceActivations) {
  const fs::path gpt2 = random_model("gpt2", 4), bert = random_model("bert", 3);
  const auto gpt2_specs = contiguous_stages({1, 2, 1}), bert_specs = contiguous_stages({2, 1});
  const std::vector<Tokens> prompts = {{5, 6, 7}, {9}};
  const TensorMap bert_in = encoder_inputs(37, true);
  // Prefill, a step after a reorder, and the encoder's output.
  auto run = [&](const std::shared_ptr<comm::Communicator>& tp) {
    std::vector<Tensor> out;
    StageChain chain = StageChain::load(gpt2, gpt2_specs, {.tp = tp});
    auto states = chain.new_states();
    CausalInputs inputs(prompts, 0);
    out.push_back(chain.forward(inputs.prefill(), states).at("logits"));
    inputs.select_rows({1, 0, 1});
    out.push_back(chain.forward(inputs.step({3, 4, 5}), states).at("logits"));
    StageChain encoder = StageChain::load(bert, bert_specs, {.tp = tp});
    auto none = encoder.new_states();
    out.push_back(encoder.forward(bert_in, none).at("last_hidden_state"));
    return out;
  };
  const std::vector<Tensor> want = run(nullptr);
  std::vector<std::vector<Tensor>> got(2);
  std::vector<int64_t> middle_parameters(2);
  comm::run_spmd_threads(2, [&](comm::Communicator& c) {
    std::shared_ptr<comm::Communicator> group(&c, [](comm::Communicator*) {});
    got[c.rank()] = run(group);
    middle_parameters[c.rank()] = load_stage(gpt2, gpt2_specs[1], {.tp = group})->parameter_count();
  });
  const int64_t whole_middle = load_stage(gpt2, gpt2_specs[1])->parameter_count();
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_EQ(got[rank].size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_LE(relative_error(got[rank][i], want[i]), 1e-5)
          << "output " << i << " on rank " << rank;
    // Each rank holds its shard: less than the whole stage (norms and biases are whole).
    EXPECT_LT(middle_parameters[rank], whole_middle * 3 / 5) << "rank " << rank;
  }
}

// ---------------------------------------------------------------------------------------
// Errors.

TEST(StageErrors, SpecOutOfRangeNamesTheFolderAndTheSpec) {
  const fs::path dir = model_fixture("gpt2");
  for (StageSpec bad : {StageSpec{.first_layer = 1, .last_layer = 1, .num_layers = 2},
                        StageSpec{.first_layer = 0, .last_layer = 3, .num_layers = 3},
                        StageSpec{.first_layer = 0, .last_layer = 1, .num_layers = 4},
                        StageSpec{.first_layer = -1, .last_layer = 1, .num_layers = 2}}) {
    const std::string message = error_of([&] { load_stage(dir, bad); });
    EXPECT_NE(message.find(dir.string()), std::string::npos) << message;
    EXPECT_NE(message.find(to_string(bad)), std::string::npos) << message;
  }
}

TEST(StageErrors, UnsupportedModelTypesAreNamed) {
  const std::string vit = error_of([] {
    load_stage(model_fixture("vit"), {.first_layer = 0, .last_layer = 2, .num_layers = 2});
  });
  EXPECT_NE(vit.find("pipeline stages are not supported for model_type vit"), std::string::npos)
      << vit;
  EXPECT_NE(vit.find(model_fixture("vit").string()), std::string::npos) << vit;
  EXPECT_EQ(pipeline_num_layers(HfConfig::load(model_fixture("t5"))), 4);
  EXPECT_EQ(pipeline_num_layers(HfConfig::load(model_fixture("bert"))), 2);
  StageChain encoder = StageChain::load(model_fixture("bert"), contiguous_stages({2}));
  EXPECT_THROW({ ChainedCausalLm lm(encoder); }, Error);
  EXPECT_THROW({ ChainedSeq2SeqLm lm(encoder); }, Error);
  StageChain t5 = StageChain::load(model_fixture("t5"), contiguous_stages({4}));
  EXPECT_THROW({ ChainedCausalLm lm(t5); }, Error);
}

TEST(StageErrors, BadMessagesNameTheStageAndTheTensor) {
  auto first =
      load_stage(model_fixture("gpt2"), {.first_layer = 0, .last_layer = 1, .num_layers = 2});
  auto last =
      load_stage(model_fixture("gpt2"), {.first_layer = 1, .last_layer = 2, .num_layers = 2});
  auto state = first->new_state();
  std::string m = error_of([&] { first->forward({}, *state); });
  EXPECT_NE(m.find("\"input_ids\""), std::string::npos) << m;
  EXPECT_NE(m.find("layers [0, 1) of 2"), std::string::npos) << m;
  m = error_of([&] {
    last->forward({{"hidden_states", Tensor::zeros({2, 3, 5})}}, *last->new_state());
  });
  EXPECT_NE(m.find("hidden_states should be [batch, seq, 48]"), std::string::npos) << m;
  // A mask that does not cover the cached tokens.
  CausalInputs inputs({{5, 6}}, 2);
  first->forward(inputs.prefill(), *state);
  Activations step = inputs.step({7});
  step["attention_mask"] = Tensor::ones({1, 2}, DType::i64);
  m = error_of([&] { first->forward(step, *state); });
  EXPECT_NE(m.find("attention_mask should be [1, 3]"), std::string::npos) << m;
  // Another stage's state.
  m = error_of([&] { last->forward({{"hidden_states", Tensor::zeros({1, 1, 48})}}, *state); });
  EXPECT_NE(m.find("state"), std::string::npos) << m;
}

// ---------------------------------------------------------------------------------------
// Costs.

TEST(StageCosts, WeightBytesAddUpToTheModelsParameters) {
  for (const std::string name : {"gpt2", "bert", "t5v11", "mt5", "vit"}) {
    SCOPED_TRACE(name);
    const HfConfig config = HfConfig::load(model_fixture(name));
    auto model = load_model(model_fixture(name));
    const auto layers = layer_costs(config, 8, DType::bf16);
    ASSERT_EQ(int(layers.size()), pipeline_num_layers(config));
    double bytes = embedding_cost(config, 8, DType::bf16).weight_bytes +
                   head_cost(config, 8, DType::bf16).weight_bytes;
    for (const auto& l : layers) bytes += l.weight_bytes;
    double want = 0;
    for (auto& [param, t] : model->named_parameters()) {
      // The heads no stage holds (BERT's masked LM) are not in the costs.
      if (name == "bert" && param.rfind("mlm", 0) == 0) continue;
      want += 2.0 * double(t->numel());
    }
    if (name == "gpt2") want += 2.0 * 503 * 48;  // the tied table, again on the last stage
    EXPECT_DOUBLE_EQ(bytes, want);
  }
}

TEST(StageCosts, Gpt2LayerByHand) {
  const HfConfig config = HfConfig::load(model_fixture("gpt2"));  // hidden 48, 3 heads, inner 100
  const LayerCost c = layer_costs(config, 10, DType::f32, 30)[0];
  const double h = 48, ff = 100;
  EXPECT_DOUBLE_EQ(c.flops, 2 * 10 * (4 * h * h + 2 * h * ff) + 4 * 10 * 30 * h);
  EXPECT_DOUBLE_EQ(c.kv_bytes_per_token, 4 * 2 * h);
  EXPECT_DOUBLE_EQ(c.output_bytes_per_token, 4 * h);
  EXPECT_GT(c.activation_bytes_per_token, c.output_bytes_per_token);
  EXPECT_DOUBLE_EQ(head_cost(config, 3).flops, 2 * 3 * h * 503 + 5 * 3 * h);
  // Encoders keep no cache.
  EXPECT_EQ(layer_costs(HfConfig::load(model_fixture("bert")), 4)[0].kv_bytes_per_token, 0);
}

}  // namespace
}  // namespace libai::models::stages
