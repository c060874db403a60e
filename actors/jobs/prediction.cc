#include "actors/jobs/prediction.h"

#include "runtime/error.h"

namespace libai::actors {

schedule::Timeline predict_job(const ConfigJob& job, const wire::Assignment& assignment) {
  const schedule::Plan& plan = job.chosen_plan();
  const std::vector<int> stage_of(assignment.stage_of.begin(), assignment.stage_of.end());
  LIBAI_CHECK(stage_of == plan.stage_of, "predict_job: the assignment's split ",
              schedule::describe(stage_of), " is not the plan's ",
              schedule::describe(plan.stage_of));
  return plan.timeline;
}

}  // namespace libai::actors
