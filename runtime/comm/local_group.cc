#include "runtime/comm/local_group.h"

#include <algorithm>
#include <utility>

#include "runtime/error.h"

namespace libai::comm::local {
namespace {

using Clock = std::chrono::steady_clock;

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::all_reduce: return "all_reduce";
    case Kind::all_gather: return "all_gather";
    case Kind::reduce_scatter: return "reduce_scatter";
    case Kind::broadcast: return "broadcast";
  }
  return "?";
}

}  // namespace

bool Contribution::agrees_with(const Contribution& other) const {
  return kind == other.kind && dtype == other.dtype && count == other.count && root == other.root &&
         (!reduces() || op == other.op);
}

std::string Contribution::describe() const {
  std::string head = reduces()                 ? str_cat(reduce_op_name(op), ", ")
                     : kind == Kind::broadcast ? str_cat("root ", root, ", ")
                                               : std::string();
  return str_cat(kind_name(kind), "(", head, dtype_name(dtype), ", ", count, ")");
}

GroupState::GroupState(int size, std::chrono::milliseconds timeout, std::string name)
    : size(size),
      timeout(timeout),
      name(std::move(name)),
      present_(size_t(size)),
      contributions_(size_t(size)) {}

void GroupState::abort(const std::string& reason) {
  std::vector<std::shared_ptr<GroupState>> live;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!aborted_) {
      aborted_ = true;
      abort_reason_ = reason;
    }
    for (auto& child : children_)
      if (auto c = child.lock()) live.push_back(std::move(c));
  }
  changed_.notify_all();
  for (auto& child : live) child->abort(reason);
}

void GroupState::throw_if_aborted() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (aborted_) throw CommunicationError(abort_reason_);
}

void GroupState::fail(std::unique_lock<std::mutex>& lock, const std::string& reason) {
  lock.unlock();  // abort takes the lock, then the children's
  abort(reason);
  lock.lock();
  throw CommunicationError(abort_reason_);
}

void GroupState::arrive(int rank, const Contribution& mine, bool first_round) {
  std::unique_lock<std::mutex> lock(mutex_);
  // Past round one, other ranks are reading and writing this rank's buffers: an abort must not
  // let it return (and its caller free them) before everyone has finished; see
  // Note [Local collectives]. The work between the rounds never waits, so this is short.
  const bool abortable = first_round;
  if (abortable && aborted_) throw CommunicationError(abort_reason_);
  if (first_round) contributions_[size_t(rank)] = mine;
  present_[size_t(rank)] = 1;
  if (++arrived_ == size) {
    if (first_round) check_agreement(lock);
    arrived_ = 0;
    std::fill(present_.begin(), present_.end(), 0);
    ++round_;
    lock.unlock();
    changed_.notify_all();
    return;
  }
  const uint64_t my_round = round_;
  const auto deadline = Clock::now() + timeout;
  auto done = [&] { return round_ != my_round || (abortable && aborted_); };
  while (!done()) {
    if (changed_.wait_until(lock, deadline) != std::cv_status::timeout || done()) continue;
    std::vector<int> missing;
    for (int r = 0; r < size; ++r)
      if (!present_[size_t(r)]) missing.push_back(r);
    fail(lock, str_cat(name, ": ", mine.describe(), " (collective #", round_ / 2,
                       ") timed out after ", timeout.count(), " ms waiting for rank(s) ", missing,
                       first_round ? " to call it" : " to finish it", " (rank ", rank, " waited)"));
  }
  // Once the round completed, an abort that came later shows on the next call.
  if (round_ == my_round) throw CommunicationError(abort_reason_);
}

void GroupState::check_agreement(std::unique_lock<std::mutex>& lock) {
  const Contribution& first = contributions_[0];
  bool agree = true;
  for (const auto& c : contributions_) agree = agree && c.agrees_with(first);
  if (!agree) {
    std::string ranks;
    for (int r = 0; r < size; ++r)
      ranks += str_cat(r ? ", " : "", "rank ", r, " ", contributions_[size_t(r)].describe());
    fail(lock, str_cat(name, ": ranks disagree on collective #", round_ / 2, ": ", ranks));
  }
}

void GroupState::post(int from, int to, uint32_t tag, Message message) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (aborted_) throw CommunicationError(abort_reason_);
    mailbox_[{from, to, tag}].push_back(std::move(message));
  }
  changed_.notify_all();
}

Message GroupState::take(int from, int to, uint32_t tag, DType dtype, int64_t count) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto& queue = mailbox_[{from, to, tag}];
  const auto deadline = Clock::now() + timeout;
  auto what = [&] {
    return str_cat(name, ": recv(", dtype_name(dtype), ", ", count, ") on rank ", to, " from rank ",
                   from, " with tag ", tag);
  };
  while (queue.empty() && !aborted_) {
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout && queue.empty() &&
        !aborted_)
      fail(lock, str_cat(what(), " timed out after ", timeout.count(), " ms: rank ", from,
                         " sent nothing with that tag"));
  }
  if (aborted_) throw CommunicationError(abort_reason_);
  Message message = std::move(queue.front());
  queue.pop_front();
  if (message.dtype != dtype || message.count != count)
    fail(lock, str_cat(what(), " matched a send(", dtype_name(message.dtype), ", ", message.count,
                       ") of another dtype or element count"));
  return message;
}

std::shared_ptr<GroupState> GroupState::join_subgroup(uint64_t call, const std::vector<int>& ranks,
                                                      int rank) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (aborted_) throw CommunicationError(abort_reason_);
  auto [it, fresh] = pending_groups_.try_emplace(call);
  PendingGroup& pending = it->second;
  if (fresh) {
    pending.ranks = ranks;
    pending.first_rank = rank;
    pending.state = std::make_shared<GroupState>(int(ranks.size()), timeout,
                                                 str_cat("local subgroup ", ranks, " of ", name));
    std::erase_if(children_, [](const auto& c) { return c.expired(); });
    children_.push_back(pending.state);
  } else if (pending.ranks != ranks) {
    fail(lock, str_cat(name, ": ranks disagree on new_group #", call, ": rank ", pending.first_rank,
                       " passed ", pending.ranks, ", rank ", rank, " passed ", ranks));
  }
  auto state = pending.state;
  if (++pending.joined == size) pending_groups_.erase(it);
  return state;
}

}  // namespace libai::comm::local
