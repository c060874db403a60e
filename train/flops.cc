#include "train/flops.h"

#include "models/family.h"
#include "runtime/error.h"

namespace libai::train {

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
  const models::Family* family = models::find_family(c.model_type());
  if (!family || !family->flops)
    throw Unsupported(c.path() + ": no training FLOPs count for model_type \"" + c.model_type() +
                      "\" (" +
                      models::family_names([](const models::Family& f) { return f.flops != nullptr; }) +
                      ")");
  const models::FlopsShape shape = family->flops(c);
  return training_flops_per_token(shape.matrix_parameters, shape.attention_blocks,
                                  shape.attention_width, shape.tokens > 0 ? shape.tokens : sequence);
}

}  // namespace libai::train
