// train.dist.stage_precision of a config job: each stage's precision by the assignment, and
// node 0's choice for `auto` (the key is read by plan/run_precision.cc).
#include <algorithm>

#include "actors/jobs/config_job.h"
#include "runtime/error.h"
#include "runtime/logging.h"

namespace libai::actors {

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
  resolve_stage_precision(*shape_, wire::from_wire(assignment.devices));
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
