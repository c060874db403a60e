// Internal to the local communicator backend (runtime/comm/local_communicator.h): what the
// ranks of one local group share. Rendezvous of all ranks with agreement checks, the mailbox
// of point-to-point messages and the receives waiting for them, the registry behind
// new_group, and abort. Every wait is bounded by the group's timeout; every error breaks the
// group and the groups made from it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/comm/communicator.h"

namespace libai::comm::local {

enum class Kind : uint8_t { all_reduce, all_gather, reduce_scatter, broadcast };

// What one rank brings to a collective. `count` is the input's element count.
struct Contribution {
  Kind kind = Kind::all_reduce;
  ReduceOp op = ReduceOp::sum;
  DType dtype = DType::f32;
  int64_t count = 0;
  int root = -1;  // broadcast only
  const char* input = nullptr;
  char* output = nullptr;

  bool reduces() const { return kind == Kind::all_reduce || kind == Kind::reduce_scatter; }
  bool agrees_with(const Contribution& other) const;
  std::string describe() const;  // "all_reduce(sum, f32, 1024)", "broadcast(root 0, i64, 8)"
};

struct Message {
  DType dtype;
  int64_t count;
  std::unique_ptr<char[]> bytes;
};

// A posted receive whose message has not come yet (Note [Receives do not hold the queue] in
// local_communicator.cc). `finish` runs once, with null or the error, on whichever thread
// completes it; `owner` keeps `data` alive until then.
struct PendingReceive {
  DType dtype = DType::f32;
  int64_t count = 0;
  void* data = nullptr;
  std::shared_ptr<void> owner;
  std::chrono::steady_clock::time_point deadline;
  std::function<void(std::exception_ptr)> finish;
};

class GroupState {
 public:
  GroupState(int size, std::chrono::milliseconds timeout, std::string name);

  const int size;
  const std::chrono::milliseconds timeout;
  const std::string name;  // "local group (4 ranks)", "local subgroup [0, 2] of ..."

  // Breaks this group and its subgroups: waiters wake with CommunicationError(reason). The
  // first reason wins.
  void abort(const std::string& reason);
  void throw_if_aborted();

  // A rendezvous of all ranks. Round one of a collective posts `mine` and, once all have
  // arrived, checks that they agree; round two only waits. Between the two rounds
  // contribution() is stable.
  void arrive(int rank, const Contribution& mine, bool first_round);
  const Contribution& contribution(int rank) const { return contributions_[size_t(rank)]; }

  // Eager point to point: post never waits; it completes the oldest receive waiting for
  // (from, to, tag), or queues the message for the next one. receive() completes at once when
  // a message waits, else leaves the receive pending (it never waits itself).
  void post(int from, int to, uint32_t tag, Message message);
  void receive(int from, int to, uint32_t tag, PendingReceive receive);
  // Breaks the group when a pending receive of rank `to` is past its deadline; returns the
  // earliest deadline of `to`'s receives still pending (time_point::max() when none).
  std::chrono::steady_clock::time_point expire_receives(int to);
  // Fails `to`'s pending receives with `reason` (its communicator is going away).
  void cancel_receives(int to, const std::string& reason);

  // The group made by new_group call number `call` of the ranks of this group; every caller
  // must pass the same ranks.
  std::shared_ptr<GroupState> join_subgroup(uint64_t call, const std::vector<int>& ranks, int rank);

 private:
  struct PendingGroup {
    std::vector<int> ranks;
    int first_rank = 0;
    int joined = 0;
    std::shared_ptr<GroupState> state;
  };

  [[noreturn]] void fail(std::unique_lock<std::mutex>& lock, const std::string& reason);
  static std::string describe_receive(const GroupState& group, int from, int to, uint32_t tag,
                                      DType dtype, int64_t count);
  void check_agreement(std::unique_lock<std::mutex>& lock);

  std::mutex mutex_;
  std::condition_variable changed_;
  bool aborted_ = false;
  std::string abort_reason_;
  uint64_t round_ = 0;  // two per collective
  int arrived_ = 0;
  std::vector<char> present_;
  std::vector<Contribution> contributions_;
  std::map<std::tuple<int, int, uint32_t>, std::deque<Message>> mailbox_;  // (from, to, tag)
  std::map<std::tuple<int, int, uint32_t>, std::deque<PendingReceive>> receives_;
  std::map<uint64_t, PendingGroup> pending_groups_;
  std::vector<std::weak_ptr<GroupState>> children_;
};

}  // namespace libai::comm::local
