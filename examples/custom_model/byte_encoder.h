// A model family the library does not ship, declared by this program (docs/BRING_YOUR_OWN_MODEL.md):
// a byte-level text classifier built from the library's layers, with the loader that maps its
// own config.json keys and checkpoint names, registered at run time. From then on the library's
// loaders, pipelines and trainers find it by config.json's model_type, as they find GPT-2.
//
//   embed:   h = tokens(ids) + positions[:n]                 ids: UTF-8 bytes + 1, 0 pads
//   blocks:  h = h + attention(norm(h)); h = h + ffn_out(gelu(ffn_in(norm(h))))
//   head:    logits = classifier(mean over real tokens of final_norm(h))
//
//   examples::register_byte_encoder();          // once, before loading
//   auto model = models::load_model("data/byte_encoder");
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/family.h"

namespace examples {

// config.json of a byte encoder, under its own keys (the "config mapping").
struct ByteEncoderConfig {
  int64_t vocab = 0, width = 0, heads = 0, blocks = 0, ffn_width = 0, max_len = 0;
  double eps = 1e-5;
  std::vector<std::string> classes;

  explicit ByteEncoderConfig(const libai::models::HfConfig& config);
};

// The family's declaration: model_type "byte_encoder", one head (ByteEncoderClassifier), its
// blocks as the layers a pipeline cuts, inference stages that run each part forward.
const libai::models::Family& byte_encoder_family();

// Registers the family unless it is already registered.
void register_byte_encoder();

}  // namespace examples
