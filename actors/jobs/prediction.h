// What the simulator (schedule/) predicts for a config job: the timeline of the whole job in
// the plan node 0 chose (ConfigJob::chosen_plan(), compiled by schedule::compile_plan from the
// devices' measured profiles), so that `run` can print the prediction next to the measurement
// (and the benchmarks can judge the simulator).
//
//   schedule::Timeline t = predict_job(job, result.assignment);   // node 0, after run_cluster
//   t.step_time;   // seconds predicted for the job; t.utilisation[s] per pipeline stage
#pragma once

#include "actors/jobs/config_job.h"
#include "schedule/program.h"

namespace libai::actors {

// Each data-parallel replica runs its share of the groups independently; the prediction is
// replica 0's (the one with the most groups), with the runtime's input slots (the plan's
// quotas). Transfers cost nothing in the model. InvalidArgument when `assignment` is not the
// plan's split.
schedule::Timeline predict_job(const ConfigJob& job, const wire::Assignment& assignment);

}  // namespace libai::actors
