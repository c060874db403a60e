// Layers against references written here with plain ops in f64, the KV cache against the
// uncached forward, and weight maps (fused q/k/v by head, errors, round trip).
#include <gtest/gtest.h>

#include <random>

#include "models/layers/transformer_layer.h"
#include "models/weights.h"
#include "ops/ops.h"
#include "parity_util.h"
#include "runtime/autograd.h"

namespace libai::models {
namespace {

void randomize(Module& m, uint32_t seed, double scale = 0.3) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal(0.0, scale);
  for (auto& [name, t] : m.named_parameters()) {
    auto* p = t->data<double>();
    for (int64_t i = 0; i < t->numel(); ++i) p[i] = normal(gen);
  }
}

Tensor random_tensor(const Shape& shape, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  Tensor t = Tensor::empty(shape, DType::f64);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = normal(gen);
  return t;
}

const LayerContext kF64{.dtype = DType::f64};

// softmax(q kᵀ * scale + causal) v per head, with q/k/v taken from the fused weight by the
// documented row order [head][q|k|v][d].
Tensor reference_attention(Attention& attn, const Tensor& x, bool causal) {
  const auto& c = attn.config();
  Tensor w = *attn.find_parameter("qkv.weight"), b = *attn.find_parameter("qkv.bias");
  Tensor wo = *attn.find_parameter("out.weight"), bo = *attn.find_parameter("out.bias");
  const int64_t s = x.size(1), d = c.head_dim;
  std::vector<Tensor> heads;
  for (int64_t h = 0; h < c.heads; ++h) {
    auto rows = [&](int64_t part) {
      const int64_t start = (h * 3 + part) * d;
      return ops::matmul(x, ops::transpose(ops::narrow(w, 0, start, d), 0, 1)) +
             ops::narrow(b, 0, start, d);
    };
    Tensor q = rows(0), k = rows(1), v = rows(2);  // [batch, seq, d]
    Tensor scores = ops::matmul(q, ops::transpose(k, 1, 2)) * (1.0 / std::sqrt(double(d)));
    if (causal) {
      Tensor mask = Tensor::zeros({s, s}, DType::boolean);
      for (int64_t i = 0; i < s; ++i)
        for (int64_t j = i + 1; j < s; ++j) mask.data<bool>()[i * s + j] = true;
      scores = ops::masked_fill(scores, mask, -1e300);
    }
    heads.push_back(ops::matmul(ops::softmax(scores), v));
  }
  return ops::linear(ops::cat(heads, -1), wo, bo);
}

TEST(Attention, MatchesPerHeadReference) {
  Attention attn(kF64, {.hidden = 12, .heads = 3});
  randomize(attn, 1);
  Tensor x = random_tensor({2, 5, 12}, 2);
  for (bool causal : {false, true}) {
    Tensor y = attn.forward(x, {.causal = causal});
    EXPECT_LE(testing::relative_error(y, reference_attention(attn, x, causal)), 1e-12) << causal;
  }
}

TEST(Attention, RejectsHeadsThatDoNotDivideHidden) {
  EXPECT_THROW(Attention(kF64, {.hidden = 10, .heads = 3}), Error);
}

TEST(TransformerLayer, CachedDecodingMatchesFullForward) {
  TransformerLayerConfig cfg;
  cfg.attention = {.hidden = 12, .heads = 3};
  cfg.mlp = {.hidden = 12, .intermediate = 20, .activation = Activation::gelu_tanh};
  TransformerLayer layer(kF64, cfg);
  randomize(layer, 3);
  Tensor x = random_tensor({2, 7, 12}, 4);
  autograd::NoGradGuard no_grad;
  Tensor full = layer.forward(x, {.self = {.causal = true}});
  LayerCache cache;
  std::vector<Tensor> steps{layer.forward(ops::narrow(x, 1, 0, 3), {.self = {.causal = true}}, &cache)};
  for (int64_t t = 3; t < 7; ++t)
    steps.push_back(layer.forward(ops::narrow(x, 1, t, 1), {.self = {.causal = true}}, &cache));
  EXPECT_EQ(cache.self.length(), 7);
  EXPECT_LE(testing::relative_error(ops::cat(steps, 1), full), 1e-12);
}

TEST(TransformerLayer, CacheSelectRowsReordersTheBatch) {
  TransformerLayerConfig cfg;
  cfg.attention = {.hidden = 12, .heads = 2};
  cfg.mlp = {.hidden = 12, .intermediate = 16};
  TransformerLayer layer(kF64, cfg);
  randomize(layer, 5);
  Tensor x = random_tensor({2, 4, 12}, 6);
  autograd::NoGradGuard no_grad;
  Tensor swapped = ops::index_select(x, 0, Tensor::from_vector<int64_t>({1, 0, 1}));
  Tensor full = layer.forward(swapped, {.self = {.causal = true}});
  LayerCache cache;
  layer.forward(ops::narrow(x, 1, 0, 3), {.self = {.causal = true}}, &cache);
  cache.select_rows(Tensor::from_vector<int64_t>({1, 0, 1}));
  Tensor last = layer.forward(ops::narrow(swapped, 1, 3, 1), {.self = {.causal = true}}, &cache);
  EXPECT_LE(testing::relative_error(last, ops::narrow(full, 1, 3, 1)), 1e-12);
}

TEST(Mlp, GatedMatchesReference) {
  Mlp mlp(kF64, {.hidden = 6, .intermediate = 10, .activation = Activation::gelu_tanh, .gated = true,
                 .bias = false});
  randomize(mlp, 7);
  Tensor x = random_tensor({3, 6}, 8);
  auto w = [&](const char* n) { return *mlp.find_parameter(n); };
  Tensor expected =
      ops::linear(ops::gelu(ops::linear(x, w("gate.weight")), ops::GeluApprox::tanh) *
                      ops::linear(x, w("up.weight")),
                  w("down.weight"));
  EXPECT_LE(testing::relative_error(mlp.forward(x), expected), 1e-14);
}

// A module with one fused projection, loaded from separate q/k/v tensors.
class Fused : public Module {
 public:
  explicit Fused(const LayerContext& ctx) : attn(add_module("attn", std::make_unique<Attention>(
                                                                   ctx, AttentionConfig{.hidden = 4, .heads = 2}))) {}
  Attention& attn;
};

WeightMap fused_map() {
  WeightMap map;
  map.source_prefixes = {"model.", ""};
  for (const char* p : {"weight", "bias"}) {
    const std::string s = p;
    map.add_heads("attn.qkv." + s, {"q." + s, "k." + s, "v." + s}, 3, 2);
    map.add("attn.out." + s, "o." + s);
  }
  map.ignore("rotary.inv_freq");
  return map;
}

checkpoint::NamedTensors fused_checkpoint(int64_t q_rows = 4) {
  auto arange = [](const Shape& shape, double start) {
    Tensor t = Tensor::empty(shape, DType::f32);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = float(start + i);
    return t;
  };
  return {{"q.weight", arange({q_rows, 4}, 0)}, {"k.weight", arange({4, 4}, 100)},
          {"v.weight", arange({4, 4}, 200)},   {"q.bias", arange({4}, 0)},
          {"k.bias", arange({4}, 10)},          {"v.bias", arange({4}, 20)},
          {"o.weight", arange({4, 4}, 300)},   {"o.bias", arange({4}, 30)},
          {"rotary.inv_freq", arange({2}, 0)}, {"extra.weight", arange({1}, 0)}};
}

std::filesystem::path write_checkpoint(const checkpoint::NamedTensors& tensors, const std::string& name) {
  auto path = std::filesystem::temp_directory_path() / name;
  checkpoint::save_safetensors(path.string(), tensors);
  return path;
}

TEST(WeightMap, FusesQkvByHeadAndReportsUnexpected) {
  auto path = write_checkpoint(fused_checkpoint(), "libai_fused.safetensors");
  Fused m(LayerContext{});
  auto report = load_parameters(m, WeightSource::open(path), fused_map());
  EXPECT_EQ(report.loaded, 4);
  ASSERT_EQ(report.unexpected.size(), 1u);
  EXPECT_EQ(report.unexpected[0], "extra.weight");
  // Rows [head][q|k|v][d] with d = 2: head 0 takes q rows 0-1, k rows 0-1, v rows 0-1.
  auto w = m.find_parameter("attn.qkv.weight")->to_vector<float>();
  const std::vector<float> head0_first_col = {0, 4, 100, 104, 200, 204};
  const std::vector<float> head1_first_col = {8, 12, 108, 112, 208, 212};
  for (int r = 0; r < 6; ++r) {
    EXPECT_EQ(w[r * 4], head0_first_col[r]) << r;
    EXPECT_EQ(w[(6 + r) * 4], head1_first_col[r]) << r;
  }
  auto b = m.find_parameter("attn.qkv.bias")->to_vector<float>();
  EXPECT_EQ(b, (std::vector<float>{0, 1, 10, 11, 20, 21, 2, 3, 12, 13, 22, 23}));
  // The inverse gives back the checkpoint's tensors.
  for (const auto& [name, t] : export_parameters(m, fused_map())) {
    for (const auto& [orig_name, orig] : fused_checkpoint())
      if ("model." + orig_name == name) {
        EXPECT_EQ(t.to_vector<float>(), orig.to_vector<float>()) << name;
      }
  }
}

TEST(WeightMap, MissingAndMismatchedTensorsAreNamedTogether) {
  auto tensors = fused_checkpoint(/*q_rows=*/6);
  tensors.erase(std::remove_if(tensors.begin(), tensors.end(),
                               [](const auto& p) { return p.first == "o.bias"; }),
                tensors.end());
  auto path = write_checkpoint(tensors, "libai_fused_bad.safetensors");
  Fused m(LayerContext{});
  try {
    load_parameters(m, WeightSource::open(path), fused_map());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::corrupt_input);
    EXPECT_NE(msg.find("libai_fused_bad.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("missing o.bias"), std::string::npos) << msg;
    EXPECT_NE(msg.find("shape mismatch for attn.qkv.weight: expected [12, 4]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("q.weight [6, 4]"), std::string::npos) << msg;
  }
}

TEST(WeightSource, FolderWithoutWeightsNamesWhatWasLookedFor) {
  auto dir = std::filesystem::temp_directory_path() / "libai_empty_model";
  std::filesystem::create_directories(dir);
  try {
    WeightSource::open(dir);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::not_found);
    EXPECT_NE(std::string(e.what()).find("pytorch_model.bin"), std::string::npos);
  }
}

}  // namespace
}  // namespace libai::models
