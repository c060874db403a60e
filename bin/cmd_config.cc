// `libai-actor config show CONFIG [key=value ...] [--json]`: the resolved, validated config.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "bin/commands.h"
#include "app/schema.h"

namespace libai::cli {

namespace {

struct ShowOptions {
  std::string config;
  std::vector<std::string> overrides;
  std::vector<std::string> search_paths;
  bool json = false;
};

int show(const ShowOptions& options) {
  config::LoadOptions load;
  load.search_paths = options.search_paths;
  const config::Config cfg = config::load_libai_config(options.config, options.overrides, load);
  std::cout << (options.json ? cfg.to_json() + "\n" : cfg.to_yaml());
  return kExitOk;
}

}  // namespace

CommandAction setup_config(CLI::App& command) {
  command.require_subcommand(1);
  auto options = std::make_shared<ShowOptions>();
  CLI::App* show_command =
      command.add_subcommand("show", "print the config with _base_ files and overrides applied");
  show_command->add_option("CONFIG", options->config, "job config (YAML)")->required();
  show_command->add_option("overrides", options->overrides,
                           "KEY=VALUE overrides, e.g. train.dist.tensor_parallel_size=2");
  show_command->add_flag("--json", options->json, "print JSON instead of YAML");
  show_command->add_option("--config-path", options->search_paths,
                           "extra folder to resolve _base_ files against (repeatable)");
  // More config subcommands (validate, schema) would each add a branch here.
  return [options, show_command] { return show_command->parsed() ? show(*options) : kExitUsage; };
}

}  // namespace libai::cli
