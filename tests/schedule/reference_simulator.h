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
  // (stage, kind, micro_batch, step) -> start
  std::map<std::tuple<int, int, int, int>, double> start;
};

inline ReferenceResult reference_simulate(const PipelineProgram& program, const StageCosts& c,
                                          std::vector<int> quota = {}) {
  const int S = int(program.size());
  if (quota.empty()) quota.assign(size_t(S), 1 << 30);
  using Key = std::tuple<int, int, int>;  // kind, micro_batch, step
  std::vector<std::map<Key, int>> position(static_cast<size_t>(S));
  std::vector<std::vector<Key>> forwards(static_cast<size_t>(S));  // in program order
  std::vector<std::map<Key, int>> forward_rank(static_cast<size_t>(S));
  for (int s = 0; s < S; ++s)
    for (size_t i = 0; i < program[size_t(s)].size(); ++i) {
      const Action& a = program[size_t(s)][i];
      const Key k{int(a.kind), a.micro_batch, a.step};
      position[size_t(s)][k] = int(i);
      if (a.kind == ActionKind::forward) {
        forward_rank[size_t(s)][k] = int(forwards[size_t(s)].size());
        forwards[size_t(s)].push_back(k);
      }
    }
  auto duration = [&](int s, const Action& a) {
    if (a.kind == ActionKind::backward) return c.backward[size_t(s)];
    if (a.step > 0 && !c.decode.empty()) return c.decode[size_t(s)];
    return c.forward[size_t(s)];
  };
  // Node ids: actions (s, i) and the driver's writes into stage 0 (k).
  std::map<std::tuple<int, int, int>, double> memo;  // (type, a, b) -> value
  std::map<std::tuple<int, int, int>, int> state;    // 1: in progress, 2: done
  bool cycle = false;
  std::function<double(int, int)> end_of;
  std::function<double(int)> written;
  // The action on stage s that frees the slot of forward `k` (its backward if it runs one).
  auto release = [&](int s, const Key& k) {
    const Key backward{int(ActionKind::backward), std::get<1>(k), std::get<2>(k)};
    auto it = position[size_t(s)].find(backward);
    return it != position[size_t(s)].end() ? it->second : position[size_t(s)].at(k);
  };
  auto start_of = [&](int s, int i) -> double {
    const Action& a = program[size_t(s)][size_t(i)];
    double t = i > 0 ? end_of(s, i - 1) : 0.0;
    const Key fk{int(ActionKind::forward), a.micro_batch, a.step};
    if (a.kind == ActionKind::forward) {
      if (s == 0) {
        t = std::max(t, written(forward_rank[0].at(fk)));
      } else {
        t = std::max(t, end_of(s - 1, position[size_t(s) - 1].at(fk)) + c.transfer);
      }
      if (s + 1 < S) {  // a credit from stage s + 1
        const int k = forward_rank[size_t(s)].at(fk), q = quota[size_t(s) + 1];
        if (k >= q) {
          if (q == 0) {
            cycle = true;
            return 0.0;
          }
          t = std::max(t, end_of(s + 1, release(s + 1, forwards[size_t(s)][size_t(k - q)])));
        }
      }
    } else if (s + 1 < S) {
      const Key bk{int(ActionKind::backward), a.micro_batch, a.step};
      t = std::max(t, end_of(s + 1, position[size_t(s) + 1].at(bk)) + c.transfer);
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
    const double v = start_of(s, i) + duration(s, program[size_t(s)][size_t(i)]);
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
      t = std::max(t, end_of(S - 1, position[size_t(S) - 1].at(before)) +
                          (S > 1 ? c.transfer : 0.0) + c.sample);
    }
    const int q = quota[0];
    if (q == 0)
      cycle = true;
    else if (k >= q)
      t = std::max(t, end_of(0, release(0, forwards[0][size_t(k - q)])));
    state[id] = 2;
    return memo[id] = t;
  };
  ReferenceResult out;
  for (int s = 0; s < S && !cycle; ++s)
    for (int i = 0; i < int(program[size_t(s)].size()) && !cycle; ++i) {
      const double e = end_of(s, i);
      const Action& a = program[size_t(s)][size_t(i)];
      out.start[{s, int(a.kind), a.micro_batch, a.step}] = e - duration(s, a);
      out.step_time = std::max(out.step_time, e);
    }
  out.deadlock = cycle;
  return out;
}

}  // namespace libai::schedule::testing
