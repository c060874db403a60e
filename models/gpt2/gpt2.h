// GPT-2 (Radford et al. 2019) with its language-model head, from a Hugging Face folder.
//
//   embed:  h = wte[ids] + wpe[positions]                       // [batch, seq, hidden]
//   layers: h = h + attn(ln(h)) (causal); h = h + mlp(ln(h))    // pre-LN, gelu_new
//   head:   logits = ln_f(h) wteᵀ                               // tied to the embedding
#pragma once

#include "models/model.h"

namespace libai::models {

std::unique_ptr<Model> make_gpt2_lm(const HfConfig& config, const LayerContext& ctx);

}  // namespace libai::models
