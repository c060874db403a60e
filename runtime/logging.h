// Logging: spdlog, one logger per subsystem, rank-prefixed.
//
//   auto log = libai::logger("ops");
//   log->info("loaded {} tensors", n);
//   libai::set_log_rank(3);   // later loggers print "[rank 3]"
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string>

namespace libai {

std::shared_ptr<spdlog::logger> logger(const std::string& subsystem);
void set_log_rank(int rank);
void set_log_level(spdlog::level::level_enum level);

}  // namespace libai
