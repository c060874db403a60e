// libai-plan: `libai-actor plan` as a program of its own, linking the planner (libai_plan) and
// not the actor library: `libai-plan CONFIG [key=value ...] [--svg FILE] [--json]` prints what
// `libai-actor plan` prints (bin/cmd_plan.cc) and exits as it does.
#include "bin/commands.h"

int main(int argc, char** argv) {
  static const std::vector<libai::cli::Command> plan = {
      {"plan", "print the pipeline plan of a job config", libai::cli::setup_plan}};
  return libai::cli::run_cli(
      argc, argv,
      {.name = "libai-plan",
       .description = "libai-plan: the pipeline plan of a LiBai-Actor job config (split, "
                      "memory, timeline, step time), without starting any actor",
       .commands = plan});
}
