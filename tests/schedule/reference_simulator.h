// An independent replay for tests: every action's start written as a max-plus recursion
// over the actions it waits for, evaluated by memoised depth-first search (a cycle is a
// deadlock). It shares no code with schedule/simulate.cc (an event-driven replay).
//
// Slots are reused first in, first out: the k-th input written into a buffer of q slots
// waits for the release of input k - q. That equals the simulator's counting of free slots
// whenever a consumer frees its inputs in the order they were written, which holds for every
// program schedule/ generates (each stage runs micro-batches and steps in order).
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include "schedule/program.h"

namespace libai::schedule::testing {

struct ReferenceResult {
  bool deadlock = false;
  double step_time = 0;
  // (device, kind, micro_batch, step, chunk) -> start
  std::map<std::tuple<int, int, int, int, int>, double> start;
};

// Programs are per device; chunk c of device d is virtual stage c * devices + d, and quotas
// and costs are per virtual stage (Note [Virtual stages] in schedule/program.h).
inline ReferenceResult reference_simulate(const PipelineProgram& program, const StageCosts& c,
                                          std::vector<int> quota = {}) {
  const int S = int(program.size());
  int chunks = 1;
  for (const auto& stage : program)
    for (const Action& a : stage) chunks = std::max(chunks, a.chunk + 1);
  const int V = S * chunks;
  if (quota.empty()) quota.assign(size_t(V), 1 << 30);
  auto device = [&](int v) { return v % S; };
  using Key = std::tuple<int, int, int>;                             // kind, micro_batch, step
  std::vector<std::map<Key, int>> position(static_cast<size_t>(V));  // on the device
  std::vector<std::vector<Key>> forwards(static_cast<size_t>(V));    // in program order
  std::vector<std::map<Key, int>> forward_rank(static_cast<size_t>(V));
  for (int s = 0; s < S; ++s)
    for (size_t i = 0; i < program[size_t(s)].size(); ++i) {
      const Action& a = program[size_t(s)][i];
      const int v = a.chunk * S + s;
      const Key k{int(a.kind), a.micro_batch, a.step};
      position[size_t(v)][k] = int(i);
      if (a.kind == ActionKind::forward) {
        forward_rank[size_t(v)][k] = int(forwards[size_t(v)].size());
        forwards[size_t(v)].push_back(k);
      }
    }
  auto duration = [&](int v, const Action& a) {
    if (a.kind == ActionKind::backward) return c.backward[size_t(v)];
    if (a.step > 0 && !c.decode.empty()) return c.decode[size_t(v)];
    return c.forward[size_t(v)];
  };
  auto hop = [&](int from, int to) { return device(from) == device(to) ? 0.0 : c.transfer; };
  // Node ids: actions (s, i) and the driver's writes into virtual stage 0 (k).
  std::map<std::tuple<int, int, int>, double> memo;  // (type, a, b) -> value
  std::map<std::tuple<int, int, int>, int> state;    // 1: in progress, 2: done
  bool cycle = false;
  std::function<double(int, int)> end_of;
  std::function<double(int)> written;
  // End of the action of virtual stage v with key k.
  auto end_at = [&](int v, const Key& k) { return end_of(device(v), position[size_t(v)].at(k)); };
  // The action on virtual stage v that frees the slot of forward `k` (its backward if it
  // runs one).
  auto release_end = [&](int v, const Key& k) {
    const Key backward{int(ActionKind::backward), std::get<1>(k), std::get<2>(k)};
    return position[size_t(v)].count(backward) ? end_at(v, backward) : end_at(v, k);
  };
  auto start_of = [&](int s, int i) -> double {
    const Action& a = program[size_t(s)][size_t(i)];
    const int v = a.chunk * S + s;
    double t = i > 0 ? end_of(s, i - 1) : 0.0;
    const Key fk{int(ActionKind::forward), a.micro_batch, a.step};
    if (a.kind == ActionKind::forward) {
      if (v == 0) {
        t = std::max(t, written(forward_rank[0].at(fk)));
      } else {
        t = std::max(t, end_at(v - 1, fk) + hop(v - 1, v));
      }
      if (v + 1 < V) {  // a credit from virtual stage v + 1
        const int k = forward_rank[size_t(v)].at(fk), q = quota[size_t(v) + 1];
        if (k >= q) {
          if (q == 0) {
            cycle = true;
            return 0.0;
          }
          t = std::max(t, release_end(v + 1, forwards[size_t(v)][size_t(k - q)]));
        }
      }
    } else if (v + 1 < V) {
      const Key bk{int(ActionKind::backward), a.micro_batch, a.step};
      t = std::max(t, end_at(v + 1, bk) + hop(v + 1, v));
    }
    return t;
  };
  end_of = [&](int s, int i) -> double {
    const auto id = std::make_tuple(0, s, i);
    if (state[id] == 2) return memo[id];
    if (state[id] == 1 || cycle) {
      cycle = true;
      return 0.0;
    }
    state[id] = 1;
    const Action& a = program[size_t(s)][size_t(i)];
    const double v = start_of(s, i) + duration(a.chunk * S + s, a);
    state[id] = 2;
    return memo[id] = v;
  };
  written = [&](int k) -> double {
    const auto id = std::make_tuple(1, k, 0);
    if (state[id] == 2) return memo[id];
    if (state[id] == 1 || cycle) {
      cycle = true;
      return 0.0;
    }
    state[id] = 1;
    const Key& fk = forwards[0][size_t(k)];
    double t = k > 0 ? written(k - 1) : 0.0;
    if (std::get<2>(fk) > 0) {
      const Key before{int(ActionKind::forward), std::get<1>(fk), std::get<2>(fk) - 1};
      t = std::max(t, end_at(V - 1, before) + hop(V - 1, 0) + c.sample);
    }
    const int q = quota[0];
    if (q == 0)
      cycle = true;
    else if (k >= q)
      t = std::max(t, release_end(0, forwards[0][size_t(k - q)]));
    state[id] = 2;
    return memo[id] = t;
  };
  ReferenceResult out;
  for (int s = 0; s < S && !cycle; ++s)
    for (int i = 0; i < int(program[size_t(s)].size()) && !cycle; ++i) {
      const double e = end_of(s, i);
      const Action& a = program[size_t(s)][size_t(i)];
      out.start[{s, int(a.kind), a.micro_batch, a.step, a.chunk}] =
          e - duration(a.chunk * S + s, a);
      out.step_time = std::max(out.step_time, e);
    }
  out.deadlock = cycle;
  return out;
}

}  // namespace libai::schedule::testing
