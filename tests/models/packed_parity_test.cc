// Models with packed weights (LoadOptions::pack_weights, Note [Packed inference weights] in
// models/layers/linear.h) against Hugging Face transformers: every family's forward outputs
// and generation token ids, tensor parallelism against one device, and training untouched by
// packing.
#include <gtest/gtest.h>

#include "models/generation/generate.h"
#include "models/layers/linear.h"
#include "ops/ops.h"
#include "ops/packed_linear.h"
#include "parity_util.h"
#include "random_models.h"
#include "runtime/autograd.h"
#include "runtime/comm/spmd.h"

namespace libai::models {
namespace {

using testing::model_fixture;
using testing::reference_of;

int packed_linears(Module& model) {
  int n = 0;
  for (auto& [name, module] : model.named_modules())
    if (auto* linear = dynamic_cast<Linear*>(module)) n += linear->packed() ? 1 : 0;
  return n;
}

// A batch of 2 for a random family: images for vit, ids (and decoder ids for t5) otherwise.
TensorMap family_inputs(const testing::Family& family) {
  if (family.name == "vit") return {{"pixel_values", testing::normal_tensor({2, 3, 16, 16}, 99)}};
  TensorMap inputs{{"input_ids", testing::ids_tensor({2, 7}, 98, 37)}};
  if (family.name.rfind("t5", 0) == 0)
    inputs["decoder_input_ids"] = testing::ids_tensor({2, 5}, 97, 37);
  return inputs;
}

class PackedForward : public ::testing::TestWithParam<std::string> {};

TEST_P(PackedForward, OutputsMatchTransformers) {
  const std::string folder = GetParam();
  auto model = load_model(model_fixture(folder), {.pack_weights = true});
  EXPECT_GE(packed_linears(*model), 4) << folder;
  auto ref = reference_of(folder);
  TensorMap inputs;
  for (const char* name : {"input_ids", "attention_mask", "token_type_ids", "decoder_input_ids",
                           "decoder_attention_mask", "pixel_values"})
    if (ref.contains(name)) inputs[name] = ref.tensor(name);
  autograd::NoGradGuard no_grad;
  const uint64_t before = ops::packed_products();
  auto out = model->forward(inputs);
  EXPECT_GT(ops::packed_products(), before) << folder << ": no product ran packed";
  auto names = testing::output_names(ref);
  ASSERT_GE(names.size(), 2u);
  testing::expect_outputs_match(out, ref, names, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PackedForward,
                         ::testing::Values("gpt2", "bert", "bert_cls", "roberta", "roberta_cls",
                                           "t5", "t5v11", "mt5", "vit", "vit_backbone", "llama3",
                                           "mistral", "qwen2"));

class PackedGeneration : public ::testing::TestWithParam<std::string> {};

TEST_P(PackedGeneration, TokenIdsMatchTransformers) {
  const std::string folder = GetParam();
  auto model = load_model(model_fixture(folder), {.pack_weights = true});
  auto* lm = model->generative();
  ASSERT_NE(lm, nullptr);
  const auto ref = testing::reference_json(folder);
  const uint64_t before = ops::packed_products();
  const auto ran =
      testing::expect_generation_matches_reference(*lm, ref.at("generation").at("cases"), folder);
  EXPECT_TRUE(ran.greedy && ran.beam) << folder;
  EXPECT_GT(ops::packed_products(), before) << folder;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PackedGeneration, ::testing::Values("gpt2", "t5", "llama3"));

// Each rank's packed column-parallel products (row-parallel ones sum partial products first
// and stay unpacked) give the one-device outputs.
TEST(PackedTensorParallel, OutputsMatchOneDevice) {
  for (const auto& family : testing::families()) {
    SCOPED_TRACE(family.name);
    const auto dir = testing::save_random_model(family);
    const TensorMap inputs = family_inputs(family);
    autograd::NoGradGuard no_grad;
    const Tensor expected = load_model(dir)->forward(inputs).at("logits");
    std::vector<Tensor> got(2);
    comm::run_spmd_threads(2, [&](comm::Communicator& c) {
      std::shared_ptr<comm::Communicator> group(&c, [](comm::Communicator*) {});
      autograd::NoGradGuard rank_no_grad;
      auto model = load_model(dir, {.tp = group, .pack_weights = true});
      got[size_t(c.rank())] = model->forward(inputs).at("logits");
    });
    for (const Tensor& g : got) EXPECT_LE(testing::relative_error(g, expected), 1e-5);
  }
}

// Only tables that serve as output projections are packed: a packed copy of an input-only
// table (positions, token types, an untied model's input embeddings) would be memory for
// nothing.
TEST(PackedWeights, OnlyOutputTablesArePacked) {
  const auto packed_tables = [](Module& model) {
    std::vector<std::string> names;
    for (auto& [name, module] : model.named_modules())
      if (auto* table = dynamic_cast<Embedding*>(module); table && table->packed().defined())
        names.push_back(name);
    return names;
  };
  auto gpt2 = load_model(model_fixture("gpt2"), {.pack_weights = true});
  EXPECT_EQ(packed_tables(*gpt2), std::vector<std::string>{"embed"});  // wte, tied
  auto bert_cls = load_model(model_fixture("bert_cls"), {.pack_weights = true});
  EXPECT_TRUE(packed_tables(*bert_cls).empty());
  auto bert_mlm = load_model(model_fixture("bert"), {.pack_weights = true});
  EXPECT_EQ(packed_tables(*bert_mlm).size(), 1u);
  auto t5v11 = load_model(model_fixture("t5v11"), {.pack_weights = true});  // untied head
  EXPECT_EQ(packed_tables(*t5v11), std::vector<std::string>{"lm_head"});
}

// Loading weights into a packed model drops its packed copies (they would keep the old
// values), so its products take the ordinary path until it is packed again.
TEST(PackedWeights, LoadingNewWeightsDropsThePackedCopies) {
  const auto dir = model_fixture("gpt2");
  auto model = load_model(dir, {.pack_weights = true});
  ASSERT_GT(packed_linears(*model), 0);
  load_parameters(*model, WeightSource::open(dir), model->weight_map());
  EXPECT_EQ(packed_linears(*model), 0);
  EXPECT_GT(pack_for_inference(*model), 0);
  EXPECT_GT(packed_linears(*model), 0);
}

// With gradients wanted, a packed model computes exactly what the unpacked one does.
TEST(PackedTraining, GradientsAreTheUnpackedModelsBitForBit) {
  const auto dir = model_fixture("gpt2");
  auto packed = load_model(dir, {.pack_weights = true});
  auto plain = load_model(dir);
  TensorMap inputs{{"input_ids", testing::ids_tensor({2, 6}, 5, 50)}};
  std::vector<std::vector<float>> grads[2];
  int i = 0;
  for (Model* m : {packed.get(), plain.get()}) {
    m->set_requires_grad(true);
    const uint64_t before = ops::packed_products();
    autograd::backward(ops::sum_all(m->forward(inputs).at("logits")));
    EXPECT_EQ(ops::packed_products(), before);
    for (auto& [name, t] : m->named_parameters())
      if (t->grad().defined()) grads[i].push_back(t->grad().to_vector<float>());
    ++i;
  }
  ASSERT_FALSE(grads[0].empty());
  EXPECT_EQ(grads[0], grads[1]);
}

// bf16 packed copies (LoadOptions::pack_dtype): a checkpoint whose weights are bf16 values
// (the gpt2_bf16 fixture, saved by transformers in bfloat16) loses nothing to the rounding, so
// its forward equals transformers' float32 forward of those weights.
TEST(PackedBf16, Bf16CheckpointMatchesTransformers) {
  auto model = load_model(model_fixture("gpt2_bf16"), {.pack_weights = true, .pack_dtype = DType::bf16});
  auto ref = reference_of("gpt2_bf16");
  TensorMap inputs{{"input_ids", ref.tensor("input_ids")},
                   {"attention_mask", ref.tensor("attention_mask")}};
  autograd::NoGradGuard no_grad;
  const uint64_t before = ops::packed_products();
  auto out = model->forward(inputs);
  EXPECT_GT(ops::packed_products(), before);
  testing::expect_outputs_match(out, ref, testing::output_names(ref), 1e-4);
}

// The f32 values nearest each of the products' weights in bf16, written into `model`'s own
// tensors (the rounding done here, not by the library).
void round_product_weights(Module& model) {
  autograd::NoGradGuard no_grad;
  const auto round = [](Tensor& w) {
    std::vector<float> v = w.to_vector<float>();
    for (float& x : v) x = float(bf16(x));
    w.copy_from(Tensor::from_vector(v, w.shape()));
  };
  for (auto& [name, module] : model.named_modules()) {
    if (auto* linear = dynamic_cast<Linear*>(module)) round(linear->weight());
    if (auto* table = dynamic_cast<Embedding*>(module); table && table->serves_as_output())
      round(table->weight());
  }
}

// Every family packed as bf16 computes what the unpacked model computes with the same
// weights rounded: the rounding is in place, so paths that stay unpacked agree.
TEST(PackedBf16, EveryFamilyEqualsItsRoundedUnpackedModel) {
  for (const auto& family : testing::families()) {
    SCOPED_TRACE(family.name);
    const auto dir = testing::save_random_model(family);
    const TensorMap inputs = family_inputs(family);
    autograd::NoGradGuard no_grad;
    auto plain = load_model(dir);
    const Tensor unrounded = plain->forward(inputs).at("logits");
    round_product_weights(*plain);
    const Tensor expected = plain->forward(inputs).at("logits");
    auto packed = load_model(dir, {.pack_weights = true, .pack_dtype = DType::bf16});
    const Tensor got = packed->forward(inputs).at("logits");
    EXPECT_LE(testing::relative_error(got, expected), 1e-5);
    EXPECT_GT(testing::relative_error(got, unrounded), 1e-4);  // the rounding is really there
  }
}

// Decoding runs single rows through the bf16 panels; greedy tokens and scores equal the
// unpacked model's on the same (bf16-valued) weights.
TEST(PackedBf16, GreedyDecodingEqualsUnpackedModel) {
  const auto dir = model_fixture("gpt2_bf16");
  auto packed = load_model(dir, {.pack_weights = true, .pack_dtype = DType::bf16});
  auto plain = load_model(dir);
  generation::GenerationConfig config;
  config.max_new_tokens = config.min_new_tokens = 12;
  const std::vector<std::vector<int64_t>> prompts = {{5, 17, 300, 42}};
  const uint64_t before = ops::packed_products();
  const auto a = generation::generate(*packed->generative(), prompts, config);
  const uint64_t products = ops::packed_products() - before;
  const auto b = generation::generate(*plain->generative(), prompts, config);
  EXPECT_EQ(ops::packed_products() - before, products);  // none from the unpacked model
  // Every step's products ran packed: prefill and the 11 single-row steps.
  EXPECT_GE(products, 12u * 2u);
  EXPECT_EQ(a.at(0).at(0).tokens, b.at(0).at(0).tokens);
  EXPECT_NEAR(a.at(0).at(0).score, b.at(0).at(0).score, 1e-4);
}

// Note [Released weights]: a bf16-packed load drops the f32 weights its panels replace (half of
// f32's bytes held), but a row-parallel rank's, whose partial product reads them; the outputs
// are those of keeping them, and of one device.
TEST(PackedBf16, ReleasesTheF32WeightsItsPanelsReplace) {
  testing::Family gpt2;
  for (const auto& family : testing::families())
    if (family.name == "gpt2") gpt2 = family;
  const auto dir = testing::save_random_model(gpt2);
  const TensorMap inputs = family_inputs(gpt2);
  autograd::NoGradGuard no_grad;
  auto kept = load_model(dir, {.pack_weights = true, .pack_dtype = DType::bf16,
                               .keep_f32_weights = true});
  auto released = load_model(dir, {.pack_weights = true, .pack_dtype = DType::bf16});
  EXPECT_FALSE(has_released_weights(*kept));
  EXPECT_TRUE(has_released_weights(*released));
  const Tensor expected = kept->forward(inputs).at("logits");
  EXPECT_EQ(released->forward(inputs).at("logits").to_vector<float>(), expected.to_vector<float>());
  std::vector<Tensor> got(2);
  std::vector<int> released_rows(2, 0), released_columns(2, 0);
  comm::run_spmd_threads(2, [&](comm::Communicator& c) {
    std::shared_ptr<comm::Communicator> group(&c, [](comm::Communicator*) {});
    autograd::NoGradGuard rank_no_grad;
    auto model = load_model(dir, {.tp = group, .pack_weights = true, .pack_dtype = DType::bf16});
    for (auto& [name, module] : model->named_modules())
      if (auto* linear = dynamic_cast<Linear*>(module); linear && linear->released())
        ++(linear->parallel() == Parallel::row ? released_rows : released_columns)[size_t(c.rank())];
    got[size_t(c.rank())] = model->forward(inputs).at("logits");
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(released_rows[size_t(r)], 0);
    EXPECT_GT(released_columns[size_t(r)], 0);
    EXPECT_LE(testing::relative_error(got[size_t(r)], expected), 1e-5);
  }
}

TEST(PackedBf16, RefusesOtherDtypes) {
  EXPECT_THROW(load_model(model_fixture("gpt2"), {.pack_weights = true, .pack_dtype = DType::f16}),
               InvalidArgument);
  // bf16 without packing would be silently nothing: refused too, before reading weights.
  EXPECT_THROW(load_model(model_fixture("gpt2"), {.pack_dtype = DType::bf16}), InvalidArgument);
}

}  // namespace
}  // namespace libai::models
