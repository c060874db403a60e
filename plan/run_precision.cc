// train.dist.stage_precision of a run job: the precisions it prices and each pipeline slot's.
// Split from run_job.cc.
#include <algorithm>

#include "plan/run_job.h"
#include "runtime/error.h"

namespace libai::plan {

// train.dist.stage_precision (Note [Precision per pipeline stage] in schedule/precision.h):
// entry k is pipeline slot k's precision (device (replica x pp + k) x tp + rank: with one
// device a node and no data or tensor parallelism, node k's), or `auto`, chosen on node 0 from
// stage_precision_choices. It replaces model.quantize, which must then be none.
void RunJob::read_stage_precision(const config::Config& cfg) {
  precisions_.clear();
  slot_precision_.clear();
  const config::Node* given = cfg.root().find_path("train.dist.stage_precision");
  const config::Node* choices = cfg.root().find_path("train.dist.stage_precision_choices");
  const bool set = given != nullptr && !given->is_null();
  const bool automatic = set && given->kind() == config::Node::Kind::string;
  LIBAI_CHECK(automatic || choices == nullptr || choices->is_null(), choices->describe(),
              ": stage_precision_choices is read with train.dist.stage_precision: auto only");
  if (!set) return;
  LIBAI_CHECK(kind_ != JobKind::synthetic, given->describe(),
              ": synthetic stages hold no weights; train.dist.stage_precision is for generate, "
              "encode and serve jobs of a model");
  const std::string quantize = cfg.get_or<std::string>("model.quantize", "none");
  LIBAI_CHECK(ops::parse_quantization(quantize, "model.quantize").kind == ops::Quantization::none,
              given->describe(),
              ": set model.quantize or train.dist.stage_precision, not both (model.quantize is ",
              quantize, ")");
  LIBAI_CHECK(!searching_, given->describe(),
              ": graph.auto_parallel with precisions per stage is not implemented (the search "
              "prices one precision); set the layout, or leave stage_precision null");
  auto index_of = [&](const ops::WeightPrecision& p) {
    const auto at = std::find(precisions_.begin(), precisions_.end(), p);
    if (at != precisions_.end()) return int(at - precisions_.begin());
    precisions_.push_back(p);
    return int(precisions_.size()) - 1;
  };
  if (!automatic) {
    LIBAI_CHECK(int(given->items().size()) == pp_, given->describe(), ": ", given->items().size(),
                " precisions for train.dist.pipeline_parallel_size ", pp_,
                " (one per pipeline slot)");
    for (const config::Node& item : given->items())
      slot_precision_.push_back(
          index_of(ops::parse_weight_precision(item.as_string(), item.describe())));
    return;
  }
  std::vector<std::string> names = {"f32", "bf16", "int8", "q4"};
  if (choices != nullptr && !choices->is_null()) {
    names.clear();
    for (const config::Node& item : choices->items()) names.push_back(item.as_string());
    LIBAI_CHECK(!names.empty(), choices->describe(), ": no precisions to choose from");
  }
  for (size_t i = 0; i < names.size(); ++i) {
    const auto p = ops::parse_weight_precision(names[i], str_cat("train.dist.stage_precision_choices[", i, "]"));
    LIBAI_CHECK(std::find(precisions_.begin(), precisions_.end(), p) == precisions_.end(),
                "train.dist.stage_precision_choices[", i, "]: '", names[i], "' is listed twice");
    index_of(p);
  }
}

}  // namespace libai::plan
