// Training FLOPs per token (train/flops.h) against Megatron-LM's closed form for GPT-2 and BERT
// written out here, against three times the forward estimates of models/stages/cost.cc (a
// separate count of the same products, made for pipeline planning) for GPT-2 and T5, and
// against a hand count for ViT-B/16, and for Llama 3 8B against its published parameter count.
#include <gtest/gtest.h>

#include "models/stages/stage.h"
#include "train/flops.h"

namespace libai::train {
namespace {

models::HfConfig config(const char* text) {
  return models::HfConfig::from_json(nlohmann::json::parse(text));
}

// 3 x (layers + head) forward FLOPs per token, as pipeline planning counts them.
double three_forwards(const models::HfConfig& c, int64_t sequence) {
  double forward = 0;
  for (const auto& layer : models::stages::layer_costs(c, sequence)) forward += layer.flops;
  forward += models::stages::head_cost(c, sequence).flops;
  return 3 * forward / double(sequence);
}

TEST(TrainingFlops, Gpt2SmallIsMegatronsFormula) {
  const auto c = config(R"({"model_type": "gpt2", "vocab_size": 50257, "n_embd": 768,
                            "n_layer": 12, "n_head": 12, "n_positions": 1024})");
  const double l = 12, h = 768, s = 1024, vocab = 50257;
  // Narayanan et al. 2021: 72 B s l h^2 (1 + s / 6h + V / 12 l h) per iteration of B sequences.
  const double megatron = 72 * l * h * h * (1 + s / (6 * h) + vocab / (12 * l * h));
  EXPECT_NEAR(training_flops_per_token(c, 1024), megatron, megatron * 1e-12);
  // The planning count adds the head's norm and bias work (a few x h per token).
  EXPECT_NEAR(training_flops_per_token(c, 1024), three_forwards(c, 1024), megatron * 1e-4);
}

TEST(TrainingFlops, BertBaseCountsTheMaskedLmHead) {
  const auto c = config(R"({"model_type": "bert", "vocab_size": 30522, "hidden_size": 768,
                            "num_hidden_layers": 12, "num_attention_heads": 12,
                            "intermediate_size": 3072})");
  const double l = 12, h = 768, s = 512, vocab = 30522;
  const double expected = 72 * l * h * h * (1 + s / (6 * h)) + 6 * (h * h + vocab * h);
  EXPECT_NEAR(training_flops_per_token(c, 512), expected, expected * 1e-12);
  // The planning count stops at the encoder (no head).
  EXPECT_NEAR(training_flops_per_token(c, 512) - 6 * (h * h + vocab * h), three_forwards(c, 512),
              expected * 1e-12);
}

TEST(TrainingFlops, T5MatchesThePlanningCount) {
  for (const char* text :
       {R"({"model_type": "t5", "vocab_size": 32128, "d_model": 512, "d_kv": 64, "d_ff": 2048,
            "num_heads": 8, "num_layers": 6})",
        R"({"model_type": "mt5", "vocab_size": 250112, "d_model": 512, "d_kv": 64,
            "d_ff": 1024, "num_heads": 6, "num_layers": 8, "num_decoder_layers": 4,
            "feed_forward_proj": "gated-gelu"})"}) {
    const auto c = config(text);
    const double ours = training_flops_per_token(c, 256);
    EXPECT_NEAR(ours, three_forwards(c, 256), ours * 1e-4) << text;
  }
}

TEST(TrainingFlops, VitBase16ByHand) {
  const auto c = config(R"({"model_type": "vit", "hidden_size": 768, "num_hidden_layers": 12,
                            "num_attention_heads": 12, "intermediate_size": 3072,
                            "image_size": 224, "patch_size": 16, "num_channels": 3})");
  // 196 patches + the class token; per layer 12 h^2 matrix parameters; patch projection
  // 3 x 16 x 16 -> 768.
  const double tokens = 197, layers_params = 12.0 * 12 * 768 * 768, patch = 3.0 * 256 * 768;
  const double expected = 6 * (layers_params + patch) + 12 * 12 * 768 * tokens;
  EXPECT_NEAR(training_flops_per_token(c, 0), expected, expected * 1e-12);
}

// Llama 3 8B (grouped-query attention, 8 key/value heads, untied head): its matrices plus the
// embedding table and the RMSNorm weights are the published 8,030,261,248 parameters.
TEST(TrainingFlops, Llama3EightBillionByItsParameterCount) {
  const auto c = config(R"({"model_type": "llama", "vocab_size": 128256, "hidden_size": 4096,
                            "num_hidden_layers": 32, "num_attention_heads": 32,
                            "num_key_value_heads": 8, "intermediate_size": 14336,
                            "rope_theta": 500000.0})");
  const double h = 4096, l = 32, s = 2048, vocab = 128256;
  const double attention = 12 * l * h * s;  // 12 l W s with W = heads x head_dim = h
  const double matrices = (training_flops_per_token(c, 2048) - attention) / 6;
  EXPECT_NEAR(matrices + vocab * h + (2 * l + 1) * h, 8030261248.0, 1.0);
  EXPECT_NEAR(training_flops_per_token(c, 2048), three_forwards(c, 2048),
              training_flops_per_token(c, 2048) * 1e-4);
}

TEST(TrainingFlops, RejectsUnknownModelsAndNegativeSizes) {
  EXPECT_THROW(training_flops_per_token(config(R"({"model_type": "mamba"})"), 128), Unsupported);
  EXPECT_THROW(training_flops_per_token(1e6, -1, 64, 128), InvalidArgument);
}

}  // namespace
}  // namespace libai::train
