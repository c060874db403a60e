// The subcommands of libai-actor, in one table (commands.cc), so a new command touches that
// table and its own bin/cmd_<name>.cc and nothing else.
//
//   // bin/cmd_plan.cc
//   CommandAction setup_plan(CLI::App& command) {
//     auto config = std::make_shared<std::string>();
//     command.add_option("CONFIG", *config, "job config (YAML)")->required();
//     return [config] { print(make_plan(load_libai_config(*config))); return kExitOk; };
//   }
//   // bin/commands.cc: add {"plan", "print the pipeline plan", setup_plan} to the table
//
// A setup adds the command's options and returns what runs when the command is chosen. The
// action returns the exit code; it throws libai::Error for the user's mistakes, which the
// driver prints as one line.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <vector>

namespace libai::cli {

// Exit codes are part of the command-line contract (scripts test them).
constexpr int kExitOk = 0;
constexpr int kExitError = 1;           // a libai::Error: bad config, missing file, ...
constexpr int kExitUsage = 2;           // unknown subcommand or option, missing argument

using CommandAction = std::function<int()>;
using CommandSetup = CommandAction (*)(CLI::App& command);

struct Command {
  const char* name;
  const char* summary;
  CommandSetup setup;
};

// libai-actor's table (bin/commands.cc).
const std::vector<Command>& commands();

struct Program {
  const char* name;         // "libai-actor": usage lines, errors and --version
  const char* description;  // the first line of --help
  // Its subcommands; a table of one command is the whole program, with no subcommand name.
  const std::vector<Command>& commands;
};

// Parses argv, runs the chosen command and turns errors into one line and an exit code.
int run_cli(int argc, char** argv, const Program& program);

CommandAction setup_config(CLI::App& command);
CommandAction setup_plan(CLI::App& command);
CommandAction setup_run(CLI::App& command);
CommandAction setup_train(CLI::App& command);
CommandAction setup_generate(CLI::App& command);
CommandAction setup_embed(CLI::App& command);
CommandAction setup_fill_mask(CLI::App& command);
CommandAction setup_classify(CLI::App& command);
CommandAction setup_forward(CLI::App& command);
CommandAction setup_convert(CLI::App& command);
CommandAction setup_export(CLI::App& command);
CommandAction setup_checkpoint(CLI::App& command);
CommandAction setup_preprocess(CLI::App& command);
CommandAction setup_bench(CLI::App& command);
CommandAction setup_serve(CLI::App& command);

}  // namespace libai::cli
