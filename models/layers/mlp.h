// The feed-forward block: down(act(up(x))), or gated: down(act(gate(x)) * up(x)) (T5 v1.1,
// MT5, Llama).
//
//   Mlp mlp(ctx, {.hidden = 768, .intermediate = 3072, .activation = Activation::gelu_tanh});
//   Tensor y = mlp.forward(x);   // [..., 768] -> [..., 768]
#pragma once

#include "models/layers/dropout.h"
#include "models/layers/linear.h"

namespace libai::models {

struct MlpConfig {
  int64_t hidden = 0;
  int64_t intermediate = 0;
  Activation activation = Activation::gelu;
  bool gated = false;
  bool bias = true;
  double dropout = 0.0;  // on the intermediate activation, before down (T5), while training
};

class Mlp : public Module {
 public:
  Mlp(const LayerContext& ctx, const MlpConfig& config);
  // With `residual`: residual + mlp(x), the add fused into the last product when it can be
  // (Note [Packed inference weights] in linear.h).
  Tensor forward(const Tensor& x, const Tensor& residual = Tensor()) const;

 private:
  MlpConfig config_;
  Linear* gate_ = nullptr;  // gated only: [intermediate, hidden], activated
  Linear* up_ = nullptr;    // [intermediate, hidden]
  Linear* down_ = nullptr;  // [hidden, intermediate]
  Dropout* dropout_ = nullptr;
  int64_t first_feature_ = 0;  // this rank's first intermediate feature of the whole
};

}  // namespace libai::models
