#include "models/training_mode.h"

namespace libai::models {
namespace {
thread_local TrainingMode t_mode;
}

const TrainingMode& training_mode() { return t_mode; }

TrainingModeGuard::TrainingModeGuard(const TrainingMode& mode) : previous_(t_mode) { t_mode = mode; }
TrainingModeGuard::~TrainingModeGuard() { t_mode = previous_; }

}  // namespace libai::models
