// train.dist.stage_precision of a config job: the precisions it prices and each pipeline
// slot's. Split from config_job.cc.
#include <algorithm>

#include "actors/config_job.h"
#include "runtime/error.h"
#include "runtime/logging.h"

namespace libai::actors {

// train.dist.stage_precision (Note [Precision per pipeline stage] in schedule/precision.h):
// entry k is pipeline slot k's precision (device (replica x pp + k) x tp + rank: with one
// device a node and no data or tensor parallelism, node k's), or `auto`, chosen on node 0 from
// stage_precision_choices. It replaces model.quantize, which must then be none.
void ConfigJob::read_stage_precision(const config::Config& cfg) {
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

std::vector<ops::WeightPrecision> ConfigJob::precision_of_stages(
    const wire::Assignment& assignment) const {
  if (precisions_.empty()) return {};
  LIBAI_CHECK(int(slot_precision_.size()) == pp_,
              "train.dist.stage_precision auto: node 0 has not chosen the precisions");
  std::vector<ops::WeightPrecision> out;
  for (int s = 0; s < pp_; ++s) {
    const int slot = assignment.device_of_stage.empty() ? s : int(assignment.device_of_stage[size_t(s)]);
    out.push_back(precisions_[size_t(slot_precision_[size_t(slot)])]);
  }
  return out;
}

// Node 0, stage_precision auto: chosen over the devices that joined (resolve_stage_precision),
// and sent to the other nodes as a list in the assignment's config.
void ConfigJob::choose_stage_precision(wire::Assignment& assignment) {
  if (!shape_->mixed_precision() || !shape_->slot_precision.empty()) return;
  resolve_stage_precision(*shape_, assignment.devices);
  slot_precision_ = shape_->slot_precision;
  std::string names;
  for (int index : slot_precision_)
    names += str_cat(names.empty() ? "" : ", ", "\"",
                     ops::weight_precision_name(precisions_[size_t(index)]), "\"");
  logger("run")->info("train.dist.stage_precision auto: [{}]", names);
  cfg_.apply_override("+train.dist.stage_precision=[" + names + "]");
  cfg_.apply_override("+train.dist.stage_precision_choices=null");
  assignment.config_yaml = cfg_.to_yaml();
}

}  // namespace libai::actors
