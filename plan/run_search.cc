// The layout search of a run job under graph.auto_parallel.enabled (Note [Auto parallel of a
// run job]): node 0 of `run` (and `plan`) plans every candidate as `run` plans one and keeps
// the fastest. Split from run_job.cc, which reads the job.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "plan/run_job.h"
#include "runtime/error.h"

namespace libai::plan {

// Note [Auto parallel of a run job]
// graph.auto_parallel.enabled on a generate or encode job: once the cluster has formed, node 0
// plans every data x pipeline layout of the cluster's devices (no more stages than layers; the
// config's non-null sizes fixed) and, for generate, every number of groups in flight from dp to
// min(prompts, 2 x dp x pp) in steps of dp (job.num_groups fixed when set), as `run` plans one
// (compile_job_plan over the devices every node measured and the cluster's measured hops), and
// keeps the fastest predicted job that fits memory (ties: fewer stages, fewer groups). Tensor
// parallelism is not searched: the inference plan does not price its collectives yet, so
// train.dist.tensor_parallel_size stays as the config sets it (null: 1). The chosen keys go
// into node 0's config, with auto parallel off; the assignment carries it, and every node
// reads it before building its slots (layout()), as it does any config of node 0's.
std::string RunJob::search_layout(const std::vector<DeviceProfile>& devices_of_cluster,
                                  double local_hop_seconds, double remote_hop_seconds) {
  const int devices = nodes_ * per_node_;
  auto fixed = [&](const char* key) { return cfg_.get_or<std::optional<int>>(key, std::nullopt); };
  const auto fixed_dp = fixed("train.dist.data_parallel_size");
  const auto fixed_pp = fixed("train.dist.pipeline_parallel_size");
  const auto fixed_groups = fixed("job.num_groups");
  const int work = kind_ == JobKind::generate ? int(prompts_.size()) : num_groups_;
  struct Candidate {
    config::Config cfg;
    std::string name;
    double seconds = 0;
    int pp = 1, groups = 1;
  };
  std::vector<Candidate> fits;
  std::vector<std::string> rejected;
  for (int dp = 1; dp <= devices / tp_; ++dp) {
    if ((devices / tp_) % dp != 0 || (fixed_dp && *fixed_dp != dp)) continue;
    const int pp = devices / tp_ / dp;
    if ((fixed_pp && *fixed_pp != pp) || pp > num_layers_ || dp > work) continue;
    std::vector<int> group_counts;
    if (kind_ != JobKind::generate)
      group_counts = {num_groups_};
    else if (fixed_groups)
      group_counts = {*fixed_groups};
    else
      for (int g = dp; g <= std::min(work, 2 * dp * pp); g += dp) group_counts.push_back(g);
    for (int groups : group_counts) {
      config::Config c = cfg_;
      // "+": a config given whole or in part (the shipped defaults need not be merged in).
      c.apply_override("+graph.auto_parallel.enabled=false");
      c.apply_override("+train.dist.data_parallel_size=" + std::to_string(dp));
      c.apply_override("+train.dist.tensor_parallel_size=" + std::to_string(tp_));
      c.apply_override("+train.dist.pipeline_parallel_size=" + std::to_string(pp));
      if (kind_ == JobKind::generate) c.apply_override("+job.num_groups=" + std::to_string(groups));
      const std::string name =
          str_cat("dp ", dp, " x tp ", tp_, " x pp ", pp,
                  kind_ == JobKind::generate ? str_cat(", ", groups, " groups") : "");
      try {
        const RunJob trial(c, nodes_);
        JobShape job = trial.shape();
        if (!job.local_hop_seconds) job.local_hop_seconds = local_hop_seconds;
        if (!job.remote_hop_seconds) job.remote_hop_seconds = remote_hop_seconds;
        const schedule::Plan plan = compile_job_plan(job, devices_of_cluster);
        check_job_plan(plan, devices_of_cluster, per_node_);
        fits.push_back({std::move(c), name, plan.timeline.step_time, pp, groups});
      } catch (const Error& e) {
        rejected.push_back(name + ": " + e.what());
      }
    }
  }
  if (fits.empty()) {
    std::string why;
    for (const auto& r : rejected) why += "; " + r;
    LIBAI_THROW(InvalidArgument, "graph.auto_parallel.enabled: no layout of the ", devices,
                " devices fits this job", why.empty() ? std::string(" (none divides)") : why);
  }
  std::sort(fits.begin(), fits.end(), [](const Candidate& a, const Candidate& b) {
    return std::tie(a.seconds, a.pp, a.groups) < std::tie(b.seconds, b.pp, b.groups);
  });
  std::string text =
      str_cat("auto parallel: ", fits[0].name, " (of ", fits.size() + rejected.size(), " layouts, ",
              rejected.size(), " rejected; predicted ", format_seconds(fits[0].seconds),
              " for the job)\n");
  for (size_t i = 1; i < fits.size() && i <= 3; ++i) {
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%.2fx", fits[i].seconds / fits[0].seconds);
    text += str_cat("  next: ", fits[i].name, ": predicted ", format_seconds(fits[i].seconds), " (",
                    ratio, ")\n");
  }
  for (const auto& r : rejected) text += "  rejected: " + r + "\n";
  read(fits[0].cfg);
  return text;
}

}  // namespace libai::plan
