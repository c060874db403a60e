// `libai-actor bench [NAME ...] [--bench-dir DIR] [--args "ARGS"]`: the runtime's benchmarks.
// Without a name it lists them; with names it runs each (the `bench_*` programs the build puts
// in <build>/bench, next to <build>/bin/libai-actor, or in --bench-dir), one after the other,
// passing ARGS on (split at spaces), and exits with the first failure's status. Each prints its own table with
// the figure beside the limit it is measured against (docs/BENCHMARKS.md); the figures that
// the project records are in bench/RESULTS.md with the commands that made them.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bin/commands.h"
#include "runtime/error.h"

extern char** environ;

namespace libai::cli {
namespace {

struct Benchmark {
  const char* name;
  const char* program;
  const char* what;
};

const std::vector<Benchmark>& benchmarks() {
  static const std::vector<Benchmark> table = {
      {"comm", "bench_comm_bus_bandwidth",
       "collectives between processes: bus bandwidth against memcpy (--backend shm|ucx)"},
      {"transfer", "bench_activation_transfer",
       "packets between two processes: GB/s against memcpy, and the hop latency"},
      {"pipeline", "bench_pipeline_overhead",
       "inference pipeline of synthetic stages: run time against the ideal schedule"},
      {"pipeline-train", "bench_pipeline_train_overhead",
       "training pipeline of synthetic stages: step time against the ideal schedule"},
      {"schedules", "bench_pipeline_schedules",
       "simulated bubbles and stashed activations of GPipe, 1F1B and interleaved 1F1B"},
      {"mixed", "bench_mixed_train",
       "training on emulated mixed hardware: balanced split against the optimum"},
  };
  return table;
}

std::filesystem::path default_bench_dir() {
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return "bench";
  return self.parent_path().parent_path() / "bench";
}

std::vector<std::string> split_args(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string word; in >> word;) out.push_back(word);
  return out;
}

int run_program(const std::filesystem::path& program, const std::vector<std::string>& args) {
  std::vector<std::string> storage{program.string()};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int error = posix_spawn(&pid, program.c_str(), nullptr, nullptr, argv.data(), environ);
  LIBAI_CHECK_KIND(IoError, error == 0, "bench: cannot start ", program.string(), ": ",
                   std::strerror(error));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  LIBAI_THROW(IoError, "bench: ", program.filename().string(), " ended by signal ",
              WTERMSIG(status));
}

}  // namespace

CommandAction setup_bench(CLI::App& command) {
  struct Options {
    std::vector<std::string> names;
    std::string dir;
    std::string args_text;
  };
  auto options = std::make_shared<Options>();
  command.add_option("NAME", options->names, "benchmarks to run (none: list them)");
  command.add_option("--bench-dir", options->dir,
                     "where the bench_* programs are (default: <build>/bench beside bin/)");
  command.add_option("--args", options->args_text,
                     "arguments for every benchmark, split at spaces (\"--ranks 2 --backend shm\")");
  return [options] {
    if (options->names.empty()) {
      std::cout << "Runtime benchmarks (libai-actor bench NAME ... [--args \"ARGS\"]):\n";
      for (const Benchmark& b : benchmarks())
        std::cout << "  " << b.name << std::string(16 - std::string(b.name).size(), ' ')
                  << b.what << "\n";
      std::cout << "Rules and limits: docs/BENCHMARKS.md; recorded figures: bench/RESULTS.md.\n";
      return kExitOk;
    }
    const std::filesystem::path dir =
        options->dir.empty() ? default_bench_dir() : std::filesystem::path(options->dir);
    std::vector<std::filesystem::path> programs;
    for (const std::string& name : options->names) {
      const Benchmark* found = nullptr;
      std::string known;
      for (const Benchmark& b : benchmarks()) {
        if (name == b.name) found = &b;
        known += (known.empty() ? "" : ", ") + std::string(b.name);
      }
      LIBAI_CHECK(found != nullptr, "bench: unknown benchmark '", name, "' (known: ", known, ")");
      const auto program = dir / found->program;
      LIBAI_CHECK_KIND(NotFound, ::access(program.c_str(), X_OK) == 0, "bench: ",
                       found->program, " is not in ", dir.string(),
                       " (build it: cmake --build <build> --target ", found->program,
                       ", or pass --bench-dir)");
      programs.push_back(program);
    }
    for (const auto& program : programs) {
      std::cout << "== " << program.filename().string() << "\n" << std::flush;
      const int status = run_program(program, split_args(options->args_text));
      if (status != 0) {
        std::cerr << "libai-actor bench: " << program.filename().string() << " exited with "
                  << status << "\n";
        return kExitError;
      }
    }
    return kExitOk;
  };
}

}  // namespace libai::cli
