#include "models/layer_cost.h"

namespace libai::models {

LayerCost transformer_layer_cost(const LayerShape& s, double tokens, double context, double bytes) {
  const double h = s.hidden, inner = s.inner, ff = s.ff;
  const double kv = s.kv_inner > 0 ? s.kv_inner : inner;  // the width of k and of v
  // q, k, v, out (cross-attention below: as wide as q)
  const double self_params = 2 * h * (inner + kv) + (s.bias ? inner + 2 * kv + h : 0);
  const double cross_params = 4 * h * inner + (s.bias ? 3 * inner + h : 0);
  const double mlp_matrices = (s.gated ? 3 : 2) * h * ff;
  const double mlp_params = mlp_matrices + (s.bias ? ff + h : 0);
  const double norms = (s.cross ? 3 : 2) * h * (s.norm_bias ? 2 : 1);
  LayerCost c;
  c.weight_bytes = bytes * (self_params + (s.cross ? cross_params : 0) + mlp_params + norms);
  // Projections, then q kᵀ and p v over `context` keys.
  c.flops = 2 * tokens * (2 * h * (inner + kv) + mlp_matrices) + 4 * tokens * context * inner;
  // Per token: norm in and out, q/k/v, scores and probabilities, the heads' output; norm in
  // and out, the MLP's hidden values before and after the activation (and the gate).
  double kept = 2 * h + 2 * (inner + kv) + 2 * s.heads * context + 2 * h + (s.gated ? 3 : 2) * ff;
  if (s.cross) {  // q and o per token, k and v over as many memory tokens as `context`
    c.flops +=
        2 * tokens * 2 * h * inner + 2 * context * 2 * h * inner + 4 * tokens * context * inner;
    kept += 2 * h + 2 * inner + 2 * s.heads * context;
  }
  c.kv_bytes_per_token = s.kv_cache ? bytes * 2 * kv : 0;
  c.activation_bytes_per_token = bytes * kept;
  c.output_bytes_per_token = bytes * h;
  return c;
}

}  // namespace libai::models
