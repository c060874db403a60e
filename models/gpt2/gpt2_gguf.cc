// GPT-2 GGUF files (general.architecture "gpt2"): the config from the metadata and the tensors
// by llama.cpp's names (Note [GGUF models] in models/gguf.cc).
#include <cmath>
#include <cstring>

#include "models/gguf.h"
#include "models/gpt2/gpt2.h"
#include "models/hf_config.h"
#include "runtime/error.h"
#include "runtime/logging.h"

namespace libai::models {

namespace {

using checkpoint::GgufFile;

// GPT-2's head is tied to its token embedding (models/gpt2/gpt2.cc). llama.cpp's converter
// stores a copy as output.weight, perhaps quantized to another type: accepted when it holds
// the embedding's values up to that quantization, refused otherwise.
void check_tied_output(const GgufFile& f) {
  if (!f.contains("output.weight")) return;
  const auto out = f.raw("output.weight"), embd = f.raw("token_embd.weight");
  if (f.info("output.weight").type == f.info("token_embd.weight").type && out.size() == embd.size() &&
      std::memcmp(out.data(), embd.data(), out.size()) == 0)
    return;
  const Tensor a = f.tensor_f32("output.weight"), b = f.tensor_f32("token_embd.weight");
  LIBAI_CHECK_KIND(Unsupported, a.shape() == b.shape(), "GGUF file ", f.path(),
                   ": output.weight has shape ", shape_str(a.shape()), ", token_embd.weight ",
                   shape_str(b.shape()), ": an untied GPT-2 head is not supported");
  const float* x = a.data<float>();
  const float* y = b.data<float>();
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    diff = std::max(diff, double(std::fabs(x[i] - y[i])));
    scale = std::max(scale, double(std::fabs(y[i])));
  }
  LIBAI_CHECK_KIND(Unsupported, diff <= 0.1 * scale, "GGUF file ", f.path(),
                   ": output.weight differs from token_embd.weight (max difference ", diff,
                   "): an untied GPT-2 head is not supported");
  logger("models")->info("{}: output.weight is token_embd.weight in {} (max difference {}); GPT-2 "
                         "ties its head to token_embd.weight",
                         f.path(), ggml_type_name(f.info("output.weight").type), diff);
}

nlohmann::json gpt2_gguf_config(const GgufFile& f, const std::string& arch) {
  nlohmann::json c;
  c["model_type"] = "gpt2";
  c["architectures"] = {"GPT2LMHeadModel"};
  c["n_embd"] = gguf_int(f, arch, "embedding_length");
  c["n_layer"] = gguf_int(f, arch, "block_count");
  c["n_head"] = gguf_int(f, arch, "attention.head_count");
  c["n_inner"] = gguf_int(f, arch, "feed_forward_length");
  c["n_positions"] = gguf_int(f, arch, "context_length", 1024);
  c["layer_norm_epsilon"] = gguf_real(f, arch, "attention.layer_norm_epsilon", 1e-5);
  c["activation_function"] = "gelu_new";
  c["tie_word_embeddings"] = true;
  gguf_common_config(f, "token_embd.weight", c);
  return c;
}

// Once per load (not per config read: the check may dequantise both tables).
GgufTensors gpt2_gguf_tensors(const GgufFile& f, const HfConfig& config) {
  check_tied_output(f);
  const Gpt2Config c(config);
  using Op = GgufTensor::Op;
  GgufTensors t = {{"wte.weight", {"token_embd.weight"}},
                   {"wpe.weight", {"position_embd.weight"}},
                   {"ln_f.weight", {"output_norm.weight"}},
                   {"ln_f.bias", {"output_norm.bias"}},
                   {"lm_head.weight", {"output.weight"}}};  // ignored by the map: tied
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string blk = "blk." + std::to_string(i) + ".";
    const std::string hf = "h." + std::to_string(i) + ".";
    const std::pair<const char*, const char*> parts[] = {{"ln_1", "attn_norm"},
                                                         {"attn.c_attn", "attn_qkv"},
                                                         {"attn.c_proj", "attn_output"},
                                                         {"ln_2", "ffn_norm"},
                                                         {"mlp.c_fc", "ffn_up"},
                                                         {"mlp.c_proj", "ffn_down"}};
    for (const auto& [ours, theirs] : parts) {
      const bool conv1d = std::strncmp(ours, "ln_", 3) != 0;
      t.push_back({hf + ours + ".weight",
                   {blk + theirs + ".weight", conv1d ? Op::transpose : Op::copy}});
      t.push_back({hf + ours + ".bias", {blk + theirs + ".bias"}});
    }
  }
  return t;
}

}  // namespace

const GgufArchitecture& gpt2_gguf() {
  static const GgufArchitecture arch{{"gpt2"}, gpt2_gguf_config, gpt2_gguf_tensors};
  return arch;
}

}  // namespace libai::models
