#include "train/flops.h"

#include "runtime/error.h"

namespace libai::train {
namespace {

// image_size / patch_size: an int or [height, width].
std::pair<int64_t, int64_t> size_pair(const models::HfConfig& c, const std::string& key,
                                      int64_t fallback) {
  const auto& json = c.json();
  if (json.contains(key) && json.at(key).is_array() && json.at(key).size() == 2)
    return {json.at(key)[0].get<int64_t>(), json.at(key)[1].get<int64_t>()};
  const int64_t n = c.get_int(key, fallback);
  return {n, n};
}

}  // namespace

double training_flops_per_token(double matrix_parameters, int64_t attention_blocks,
                                int64_t attention_width, int64_t sequence) {
  LIBAI_CHECK(
      matrix_parameters >= 0 && attention_blocks >= 0 && attention_width >= 0 && sequence >= 0,
      "training_flops_per_token: expected non-negative sizes, got parameters ", matrix_parameters,
      ", attention blocks ", attention_blocks, ", width ", attention_width, ", sequence ",
      sequence);
  return 6 * matrix_parameters +
         12 * double(attention_blocks) * double(attention_width) * double(sequence);
}

double training_flops_per_token(const models::HfConfig& c, int64_t sequence) {
  const std::string type = c.model_type();
  if (type == "gpt2") {
    const double h = double(c.get_int("n_embd", 768)), l = double(c.get_int("n_layer", 12));
    const double ff = double(c.has("n_inner") ? c.get_int("n_inner", 0) : 4 * int64_t(h));
    const double vocab = double(c.require_int("vocab_size"));
    return training_flops_per_token(l * (4 * h * h + 2 * h * ff) + vocab * h, int64_t(l),
                                    int64_t(h), sequence);
  }
  if (type == "bert" || type == "roberta") {
    const double h = double(c.get_int("hidden_size", 768));
    const int64_t l = c.get_int("num_hidden_layers", 12);
    const double ff = double(c.get_int("intermediate_size", 3072));
    const double vocab = double(c.require_int("vocab_size"));
    return training_flops_per_token(double(l) * (4 * h * h + 2 * h * ff) + h * h + vocab * h, l,
                                    int64_t(h), sequence);
  }
  if (type == "t5" || type == "mt5") {
    // Defaults of models/t5 (Hugging Face's T5Config / MT5Config).
    const bool mt5 = type == "mt5";
    const double h = double(c.get_int("d_model", 512));
    const int64_t heads = c.get_int("num_heads", mt5 ? 6 : 8);
    const int64_t width = heads * c.get_int("d_kv", 64);
    const double ff = double(c.get_int("d_ff", mt5 ? 1024 : 2048));
    const int64_t encoder = c.get_int("num_layers", mt5 ? 8 : 6);
    const int64_t decoder = c.get_int("num_decoder_layers", encoder);
    const bool gated =
        c.get_string("feed_forward_proj", mt5 ? "gated-gelu" : "relu").rfind("gated-", 0) == 0;
    const double mlp = (gated ? 3 : 2) * h * ff, w = double(width);
    const double vocab = double(c.require_int("vocab_size"));
    const double parameters =
        double(encoder) * (4 * h * w + mlp) + double(decoder) * (8 * h * w + mlp) + vocab * h;
    return training_flops_per_token(parameters, encoder + 2 * decoder, width, sequence);
  }
  if (type == "vit") {
    const double h = double(c.get_int("hidden_size", 768));
    const int64_t l = c.get_int("num_hidden_layers", 12);
    const double ff = double(c.get_int("intermediate_size", 3072));
    const double channels = double(c.get_int("num_channels", 3));
    const auto [image_height, image_width] = size_pair(c, "image_size", 224);
    const auto [patch_height, patch_width] = size_pair(c, "patch_size", 16);
    LIBAI_CHECK(patch_height > 0 && patch_width > 0, c.path(), ": patch_size must be positive");
    const int64_t tokens = (image_height / patch_height) * (image_width / patch_width) + 1;
    const double patch = channels * double(patch_height * patch_width) * h;
    return training_flops_per_token(double(l) * (4 * h * h + 2 * h * ff) + patch, l, int64_t(h),
                                    tokens);
  }
  throw Unsupported(c.path() + ": no training FLOPs count for model_type \"" + type +
                    "\" (gpt2, bert, roberta, t5, mt5, vit)");
}

}  // namespace libai::train
