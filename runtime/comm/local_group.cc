#include "runtime/comm/local_group.h"

#include <algorithm>
#include <cstring>
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
  std::vector<PendingReceive> orphans;
  std::string first;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!aborted_) {
      aborted_ = true;
      abort_reason_ = reason;
    }
    first = abort_reason_;
    for (auto& child : children_)
      if (auto c = child.lock()) live.push_back(std::move(c));
    for (auto& [key, queue] : receives_)
      for (auto& r : queue) orphans.push_back(std::move(r));
    receives_.clear();
  }
  changed_.notify_all();
  const auto error = std::make_exception_ptr(CommunicationError(first));
  for (auto& r : orphans) r.finish(error);
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

std::string GroupState::describe_receive(const GroupState& group, int from, int to, uint32_t tag,
                                         DType dtype, int64_t count) {
  return str_cat(group.name, ": recv(", dtype_name(dtype), ", ", count, ") on rank ", to,
                 " from rank ", from, " with tag ", tag);
}

void GroupState::post(int from, int to, uint32_t tag, Message message) {
  PendingReceive receive;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (aborted_) throw CommunicationError(abort_reason_);
    auto it = receives_.find({from, to, tag});
    if (it == receives_.end() || it->second.empty()) {
      mailbox_[{from, to, tag}].push_back(std::move(message));
      lock.unlock();
      changed_.notify_all();
      return;
    }
    receive = std::move(it->second.front());
    it->second.pop_front();
    if (message.dtype != receive.dtype || message.count != receive.count) {
      const std::string reason = str_cat(
          describe_receive(*this, from, to, tag, receive.dtype, receive.count), " matched a send(",
          dtype_name(message.dtype), ", ", message.count, ") of another dtype or element count");
      lock.unlock();
      receive.finish(std::make_exception_ptr(CommunicationError(reason)));
      abort(reason);
      throw CommunicationError(reason);
    }
  }
  // One sender posts (from, to, tag) in order, so no other copy into this receive's key runs.
  const size_t bytes = size_t(message.count) * dtype_size(message.dtype);
  if (bytes > 0) std::memcpy(receive.data, message.bytes.get(), bytes);
  receive.finish(nullptr);
}

void GroupState::receive(int from, int to, uint32_t tag, PendingReceive receive) {
  Message message;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (aborted_) throw CommunicationError(abort_reason_);
    auto it = mailbox_.find({from, to, tag});
    if (it == mailbox_.end() || it->second.empty()) {
      receives_[{from, to, tag}].push_back(std::move(receive));
      return;
    }
    message = std::move(it->second.front());
    it->second.pop_front();
    if (message.dtype != receive.dtype || message.count != receive.count)
      fail(lock, str_cat(describe_receive(*this, from, to, tag, receive.dtype, receive.count),
                         " matched a send(", dtype_name(message.dtype), ", ", message.count,
                         ") of another dtype or element count"));
  }
  const size_t bytes = size_t(message.count) * dtype_size(message.dtype);
  if (bytes > 0) std::memcpy(receive.data, message.bytes.get(), bytes);
  receive.finish(nullptr);
}

Clock::time_point GroupState::expire_receives(int to) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto now = Clock::now();
  auto earliest = Clock::time_point::max();
  for (auto& [key, queue] : receives_) {
    const auto& [from, receiver, tag] = key;
    if (receiver != to || queue.empty()) continue;
    const PendingReceive& oldest = queue.front();  // the others were posted later
    if (oldest.deadline <= now)
      fail(lock, str_cat(describe_receive(*this, from, to, tag, oldest.dtype, oldest.count),
                         " timed out after ", timeout.count(), " ms: rank ", from,
                         " sent nothing with that tag"));
    earliest = std::min(earliest, oldest.deadline);
  }
  return earliest;
}

void GroupState::cancel_receives(int to, const std::string& reason) {
  std::vector<PendingReceive> cancelled;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [key, queue] : receives_)
      if (std::get<1>(key) == to)
        while (!queue.empty()) {
          cancelled.push_back(std::move(queue.front()));
          queue.pop_front();
        }
  }
  const auto error = std::make_exception_ptr(CommunicationError(reason));
  for (auto& r : cancelled) r.finish(error);
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
