// The driver: builds the CLI11 app from a command table, parses, runs, maps errors to exit
// codes. Usage errors are one line saying what was wrong, then the usage, and exit 2; a
// libai::Error is one line "<program>: error: ..." and exit 1. A table of one command is the
// whole program (`libai-plan CONFIG` is `libai-actor plan CONFIG`).
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bin/commands.h"
#include "runtime/config/suggest.h"
#include "runtime/error.h"

namespace libai::cli {

namespace {

std::vector<CLI::App*> all_subcommands(CLI::App& level) {
  return level.get_subcommands([](CLI::App*) { return true; });
}

std::string command_path(const std::vector<CLI::App*>& levels) {
  std::string path = levels.front()->get_name();
  for (std::size_t i = 1; i < levels.size(); ++i) path += " " + levels[i]->get_name();
  return path;
}

int usage_error(const std::vector<CLI::App*>& levels, const std::string& problem) {
  // CLI11 names a subcommand alone in its usage line ("Usage: show"); show the full command.
  std::string usage = levels.back()->help();
  const std::string short_usage = "Usage: " + levels.back()->get_name();
  if (levels.size() > 1 && usage.find(short_usage) != std::string::npos)
    usage.replace(usage.find(short_usage), short_usage.size(), "Usage: " + command_path(levels));
  std::cerr << command_path(levels) << ": " << problem << "\n\n" << usage;
  return kExitUsage;
}

// CLI11 would say "The following arguments were not expected: foo"; a misspelled subcommand
// deserves its own name and a suggestion. Stops at the first option: its values are CLI11's.
std::optional<int> check_subcommand_names(CLI::App& app, int argc, char** argv) {
  std::vector<CLI::App*> levels{&app};
  for (int i = 1; i < argc; ++i) {
    const std::string token = argv[i];
    if (token.empty() || token[0] == '-') break;
    CLI::App* level = levels.back();
    const std::vector<CLI::App*> subcommands = all_subcommands(*level);
    if (subcommands.empty()) break;
    CLI::App* found = nullptr;
    std::vector<std::string> names;
    for (CLI::App* sub : subcommands) {
      names.push_back(sub->get_name());
      if (sub->get_name() == token) found = sub;
    }
    if (found == nullptr) {
      const bool takes_positionals =
          !level->get_options([](const CLI::Option* o) { return o->get_positional(); }).empty();
      if (takes_positionals) break;
      return usage_error(levels,
                         "unknown subcommand '" + token + "'" + config::did_you_mean(token, names));
    }
    levels.push_back(found);
  }
  return std::nullopt;
}

std::vector<CLI::App*> parsed_levels(CLI::App& app) {
  std::vector<CLI::App*> levels{&app};
  while (true) {
    const std::vector<CLI::App*> parsed = levels.back()->get_subcommands();
    if (parsed.empty()) return levels;
    levels.push_back(parsed.front());
  }
}

std::string describe_parse_error(const CLI::ParseError& e, CLI::App& level) {
  // Unknown arguments are named first: with `libai-actor --frob`, CLI11 reports the missing
  // subcommand, but the stray option is what the user got wrong.
  const std::vector<std::string> extras = level.remaining();
  if (!extras.empty() || e.get_exit_code() == static_cast<int>(CLI::ExitCodes::ExtrasError)) {
    const std::string first = extras.empty() ? std::string(e.what()) : extras.front();
    if (!first.empty() && first[0] == '-') return "unknown option '" + first + "'";
    return "unexpected argument '" + first + "'";
  }
  const std::string what = e.what();
  if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::RequiredError) &&
      what.find("subcommand") != std::string::npos) {
    std::vector<std::string> names;
    for (CLI::App* sub : all_subcommands(level)) names.push_back(sub->get_name());
    return "missing subcommand (one of: " + config::join_names(names) + ")";
  }
  return what;
}

std::string one_line(std::string text) {
  for (char& c : text)
    if (c == '\n') c = ' ';
  return text;
}

}  // namespace

int run_cli(int argc, char** argv, const Program& program) {
  CLI::App app(program.description, program.name);
  app.set_version_flag("--version", std::string(program.name) + " " + LIBAI_VERSION);
  std::vector<std::pair<CLI::App*, CommandAction>> actions;
  const bool single = program.commands.size() == 1;
  if (single) {
    actions.emplace_back(&app, program.commands.front().setup(app));
  } else {
    app.require_subcommand(1);
    for (const Command& command : program.commands) {
      CLI::App* sub = app.add_subcommand(command.name, command.summary);
      actions.emplace_back(sub, command.setup(*sub));
    }
  }

  if (const std::optional<int> failed = check_subcommand_names(app, argc, argv)) return *failed;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    const std::vector<CLI::App*> levels = parsed_levels(app);
    return usage_error(levels, describe_parse_error(e, *levels.back()));
  }

  try {
    for (auto& [sub, action] : actions)
      if (sub->parsed()) return action();
  } catch (const Error& e) {
    std::cerr << program.name << ": error: " << one_line(e.what()) << "\n";
    return kExitError;
  } catch (const std::exception& e) {
    std::cerr << program.name << ": error: internal: " << one_line(e.what()) << "\n";
    return kExitError;
  }
  return kExitUsage;
}

}  // namespace libai::cli
