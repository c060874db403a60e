#include "schedule/precision.h"

#include <functional>
#include <limits>
#include <optional>

#include "runtime/error.h"

namespace libai::schedule {
namespace {

void take_device(PlanRequest& into, const PlanRequest& from, int d) {
  into.layer_time[size_t(d)] = from.layer_time[size_t(d)];
  if (!from.layer_decode_time.empty())
    into.layer_decode_time[size_t(d)] = from.layer_decode_time[size_t(d)];
  for (auto [to, of] : {std::pair{&into.embedding, &from.embedding}, {&into.head, &from.head}}) {
    if (!of->time.empty()) to->time[size_t(d)] = of->time[size_t(d)];
    if (!of->decode_time.empty()) to->decode_time[size_t(d)] = of->decode_time[size_t(d)];
  }
}

void check_alike(const PlanRequest& a, const PlanRequest& b, size_t p) {
  const auto rows = [](const auto& v) { return v.size(); };
  LIBAI_CHECK(a.dp == b.dp && a.pp == b.pp && a.tp == b.tp &&
                  a.weight_bytes.size() == b.weight_bytes.size() &&
                  rows(a.layer_time) == rows(b.layer_time) &&
                  rows(a.layer_decode_time) == rows(b.layer_decode_time) &&
                  a.embedding.time.size() == b.embedding.time.size() &&
                  a.embedding.decode_time.size() == b.embedding.decode_time.size() &&
                  a.head.time.size() == b.head.time.size() &&
                  a.head.decode_time.size() == b.head.decode_time.size() &&
                  a.workload == b.workload && a.balance == b.balance,
              "precision per stage: the request of precision ", p,
              " differs from precision 0's in its sizes, workload or policy");
}

}  // namespace

PlanRequest mix_precisions(const std::vector<PlanRequest>& by_precision,
                           const std::vector<int>& precision_of_slot) {
  LIBAI_CHECK(!by_precision.empty(), "precision per stage: no precisions priced");
  const PlanRequest& base = by_precision[0];
  for (size_t p = 1; p < by_precision.size(); ++p) check_alike(base, by_precision[p], p);
  LIBAI_CHECK(int(precision_of_slot.size()) == base.pp, "precision per stage: ",
              precision_of_slot.size(), " precisions for ", base.pp, " pipeline slots");
  LIBAI_CHECK(int(base.layer_time.size()) == base.dp * base.pp * base.tp,
              "precision per stage: layer_time covers ", base.layer_time.size(),
              " devices, not dp x pp x tp");
  PlanRequest mixed = base;
  mixed.slot_weight_bytes.clear();
  mixed.slot_embedding_bytes.clear();
  mixed.slot_head_bytes.clear();
  for (int k = 0; k < base.pp; ++k) {
    const int p = precision_of_slot[size_t(k)];
    LIBAI_CHECK(p >= 0 && p < int(by_precision.size()), "precision per stage: slot ", k,
                " takes precision ", p, " of ", by_precision.size());
    const PlanRequest& r = by_precision[size_t(p)];
    mixed.slot_weight_bytes.push_back(r.slot_weight_bytes.empty() ? r.weight_bytes
                                                                  : r.slot_weight_bytes[size_t(k)]);
    mixed.slot_embedding_bytes.push_back(
        r.slot_embedding_bytes.empty() ? r.embedding.bytes : r.slot_embedding_bytes[size_t(k)]);
    mixed.slot_head_bytes.push_back(r.slot_head_bytes.empty() ? r.head.bytes
                                                              : r.slot_head_bytes[size_t(k)]);
    for (int replica = 0; replica < base.dp; ++replica)
      for (int t = 0; t < base.tp; ++t)
        take_device(mixed, r, (replica * base.pp + k) * base.tp + t);
  }
  return mixed;
}

bool fits_memory(const Plan& plan) {
  for (int r = 0; r < plan.pp && size_t(r) < plan.rank_memory.size(); ++r)
    for (int d : plan.stages[size_t(r)].devices) {
      const double cap = size_t(d) < plan.memory_cap.size() ? plan.memory_cap[size_t(d)] : 0;
      if (cap > 0 && plan.rank_memory[size_t(r)].total() > cap) return false;
    }
  return true;
}

int steps_given_up(const Plan& plan, const std::vector<int>& precision_of_slot) {
  int steps = 0;
  for (const StagePlan& st : plan.stages)
    steps += precision_of_slot.at(size_t(st.slot)) * st.num_layers();
  return steps;
}

PrecisionChoice choose_precisions(const std::vector<PlanRequest>& by_precision) {
  LIBAI_CHECK(!by_precision.empty(), "precision per stage: no precisions priced");
  const int P = int(by_precision.size()), pp = by_precision[0].pp;
  double choices = 1;
  for (int k = 0; k < pp; ++k) choices *= P;
  LIBAI_CHECK(choices <= 4096, "precision per stage: choosing among ", P, " precisions for ", pp,
              " pipeline slots (", choices, " choices) is not implemented (auto tries every "
              "choice, up to 4096); give train.dist.stage_precision per slot, or fewer "
              "train.dist.stage_precision_choices");
  std::optional<PrecisionChoice> best;
  std::vector<int> choice(size_t(pp), 0);
  std::function<void(int)> visit = [&](int k) {
    if (k < pp) {
      for (int p = 0; p < P; ++p) {
        choice[size_t(k)] = p;
        visit(k + 1);
      }
      choice[size_t(k)] = 0;
      return;
    }
    Plan plan;
    try {
      plan = compile_plan(mix_precisions(by_precision, choice));
    } catch (const InvalidArgument&) {
      return;  // balanced: no split fits memory
    }
    if (!fits_memory(plan)) return;
    const int steps = steps_given_up(plan, choice);
    if (best && (steps > best->steps_given_up ||
                 (steps == best->steps_given_up &&
                  !(plan.timeline.step_time < best->plan.timeline.step_time))))
      return;
    best = PrecisionChoice{choice, std::move(plan), steps};
  };
  visit(0);
  if (best) return std::move(*best);
  // Nothing fits: the least precise plan's error says what it needs.
  const Plan plan = compile_plan(mix_precisions(by_precision, std::vector<int>(size_t(pp), P - 1)));
  validate(plan);
  LIBAI_THROW(InvalidArgument, "precision per stage: no choice of precisions fits");
}

}  // namespace libai::schedule
