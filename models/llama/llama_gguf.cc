// Llama-family GGUF files (general.architecture "llama", which llama.cpp also writes for
// Mistral, and "qwen2"): the config from the metadata and the tensors by llama.cpp's names
// (Note [GGUF models] in models/gguf.cc).
#include "models/gguf.h"
#include "models/hf_config.h"
#include "models/llama/llama.h"
#include "runtime/error.h"

namespace libai::models {

namespace {

using checkpoint::GgufFile;

nlohmann::json llama_gguf_config(const GgufFile& f, const std::string& arch) {
  const bool qwen2 = arch == "qwen2";
  nlohmann::json c;
  c["model_type"] = qwen2 ? "qwen2" : "llama";
  c["architectures"] = {qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"};
  c["hidden_size"] = gguf_int(f, arch, "embedding_length");
  c["num_hidden_layers"] = gguf_int(f, arch, "block_count");
  c["intermediate_size"] = gguf_int(f, arch, "feed_forward_length");
  const int64_t heads = gguf_int(f, arch, "attention.head_count");
  c["num_attention_heads"] = heads;
  c["num_key_value_heads"] = gguf_int(f, arch, "attention.head_count_kv", heads);
  c["max_position_embeddings"] = gguf_int(f, arch, "context_length", 2048);
  c["rms_norm_eps"] = gguf_real(f, arch, "attention.layer_norm_rms_epsilon", 1e-6);
  c["rope_theta"] = gguf_real(f, arch, "rope.freq_base", 10000.0);
  c["hidden_act"] = "silu";
  const std::string where = "GGUF file " + f.path() + ": ";
  LIBAI_CHECK_KIND(Unsupported, gguf_int(f, arch, "expert_count", 0) == 0, where, arch,
                   ".expert_count: mixture-of-experts models are not supported");
  if (f.find(arch + ".attention.key_length")) {
    const int64_t head_dim = gguf_int(f, arch, "attention.key_length");
    LIBAI_CHECK_KIND(Unsupported,
                     gguf_int(f, arch, "attention.value_length", head_dim) == head_dim, where,
                     arch, ".attention.value_length differs from key_length: not supported");
    c["head_dim"] = head_dim;
  }
  const int64_t head_dim = c.contains("head_dim") ? c["head_dim"].get<int64_t>()
                                                  : c["hidden_size"].get<int64_t>() / heads;
  LIBAI_CHECK_KIND(Unsupported, gguf_int(f, arch, "rope.dimension_count", head_dim) == head_dim,
                   where, arch, ".rope.dimension_count ", gguf_int(f, arch, "rope.dimension_count"),
                   " is not the head size ", head_dim, ": partial rotary embeddings are not "
                   "supported");
  const std::string scaling = f.get_string(arch + ".rope.scaling.type", "none");
  if (scaling == "linear") {
    c["rope_scaling"] = {{"rope_type", "linear"},
                         {"factor", gguf_real(f, arch, "rope.scaling.factor", 1.0)}};
  } else {
    LIBAI_CHECK_KIND(Unsupported, scaling == "none", where, arch, ".rope.scaling.type '", scaling,
                     "' is not supported (none, linear)");
  }
  LIBAI_CHECK_KIND(Unsupported, !f.contains("rope_freqs.weight"), where,
                   "tensor 'rope_freqs.weight' (Llama 3.1 rotary frequency factors) is not "
                   "supported yet");
  c["tie_word_embeddings"] = !f.contains("output.weight");
  if (!qwen2) {
    c["attention_bias"] = f.contains("blk.0.attn_q.bias");
    c["mlp_bias"] = f.contains("blk.0.ffn_up.bias");
  }
  gguf_common_config(f, "token_embd.weight", c);
  return c;
}

GgufTensors llama_gguf_tensors(const GgufFile&, const HfConfig& config) {
  const LlamaConfig c(config);
  // llama.cpp interleaves the rotary halves of q and k for its Llama kernel, not for Qwen2's.
  const bool interleaved = c.model_type != "qwen2";
  auto q_or_k = [&](std::string source, int64_t heads) {
    return interleaved ? GgufTensor{std::move(source), GgufTensor::Op::unrope, heads}
                       : GgufTensor{std::move(source)};
  };
  GgufTensors t = {{"model.embed_tokens.weight", {"token_embd.weight"}},
                   {"model.norm.weight", {"output_norm.weight"}},
                   {"lm_head.weight", {"output.weight"}}};
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string blk = "blk." + std::to_string(i) + ".";
    const std::string hf = "model.layers." + std::to_string(i) + ".";
    t.push_back({hf + "input_layernorm.weight", {blk + "attn_norm.weight"}});
    t.push_back({hf + "post_attention_layernorm.weight", {blk + "ffn_norm.weight"}});
    for (const char* kind : {"weight", "bias"}) {
      const std::string k = kind;
      t.push_back({hf + "self_attn.q_proj." + k, q_or_k(blk + "attn_q." + k, c.heads)});
      t.push_back({hf + "self_attn.k_proj." + k, q_or_k(blk + "attn_k." + k, c.kv_heads)});
      t.push_back({hf + "self_attn.v_proj." + k, {blk + "attn_v." + k}});
      t.push_back({hf + "self_attn.o_proj." + k, {blk + "attn_output." + k}});
      for (const char* proj : {"gate", "up", "down"})
        t.push_back({hf + "mlp." + proj + "_proj." + k, {blk + "ffn_" + proj + "." + k}});
    }
  }
  return t;
}

}  // namespace

const GgufArchitecture& llama_gguf() {
  static const GgufArchitecture arch{{"llama", "qwen2"}, llama_gguf_config, llama_gguf_tensors};
  return arch;
}

}  // namespace libai::models
