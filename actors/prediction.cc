#include "actors/prediction.h"

#include "runtime/error.h"

namespace libai::actors {

schedule::Timeline predict_job(const ConfigJob& job, const wire::Assignment& assignment) {
  const schedule::CostModel& cost = job.cost_model();
  const int pp = job.pipeline_parallel_size();
  LIBAI_CHECK(int(cost.layer_time.size()) == pp, "predict_job: no cost model (call after plan)");
  schedule::StageCosts costs;
  costs.forward.assign(size_t(pp), 0.0);
  for (size_t l = 0; l < assignment.stage_of.size(); ++l) {
    const int s = assignment.stage_of[l];
    costs.forward[size_t(s)] += cost.layer_time[size_t(s)][l];
  }
  costs.backward = costs.forward;
  const int dp = job.data_parallel_size();
  const int groups = (job.num_groups() + dp - 1) / dp;
  const auto program = job.steps() > 1 ? schedule::decode_program(pp, groups, job.steps())
                                       : schedule::inference_forward(pp, groups);
  return schedule::simulate(program, costs);
}

}  // namespace libai::actors
