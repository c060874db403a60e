#include "actors/stage_progress.h"

namespace libai::actors {

namespace {

double seconds_since(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

StageProgress::StageProgress(std::string stage) : stage_(std::move(stage)) {}

void StageProgress::begin(std::string doing) {
  std::lock_guard lock(mutex_);
  doing_ = std::move(doing);
  doing_since_ = Clock::now();
}

void StageProgress::end() {
  std::lock_guard lock(mutex_);
  ++actions_;
  doing_.clear();
}

void StageProgress::waiting(std::string what) {
  std::lock_guard lock(mutex_);
  if (what == waiting_) return;
  waiting_ = std::move(what);
  waiting_since_ = Clock::now();
}

wire::StageProgress StageProgress::snapshot() const {
  std::lock_guard lock(mutex_);
  wire::StageProgress p;
  p.name = stage_;
  p.actions = actions_;
  p.doing = doing_;
  if (!doing_.empty()) p.doing_seconds = seconds_since(doing_since_);
  p.waiting = waiting_;
  if (!waiting_.empty()) p.waiting_seconds = seconds_since(waiting_since_);
  return p;
}

std::shared_ptr<StageProgress> ProgressBoard::add(const std::string& stage) {
  auto progress = std::make_shared<StageProgress>(stage);
  std::lock_guard lock(mutex_);
  stages_.push_back(progress);
  return progress;
}

std::vector<wire::StageProgress> ProgressBoard::snapshot() const {
  std::lock_guard lock(mutex_);
  std::vector<wire::StageProgress> out;
  out.reserve(stages_.size());
  for (const auto& stage : stages_) out.push_back(stage->snapshot());
  return out;
}

}  // namespace libai::actors
