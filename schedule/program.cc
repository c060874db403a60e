#include "schedule/program.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <unordered_map>

#include "runtime/error.h"
#include "schedule/program_index.h"

namespace libai::schedule {
namespace {

void check_sizes(int stages, int micro_batches) {
  LIBAI_CHECK(stages >= 1, "a pipeline needs at least one stage, got ", stages);
  LIBAI_CHECK(micro_batches >= 1, "a pipeline needs at least one micro-batch, got ", micro_batches);
}

}  // namespace

PipelineProgram inference_forward(int num_stages, int num_micro_batches) {
  check_sizes(num_stages, num_micro_batches);
  PipelineProgram out(static_cast<size_t>(num_stages));
  for (auto& stage : out)
    for (int m = 0; m < num_micro_batches; ++m) stage.push_back({ActionKind::forward, m});
  return out;
}

PipelineProgram gpipe(int num_stages, int num_micro_batches) {
  PipelineProgram out = inference_forward(num_stages, num_micro_batches);
  for (auto& stage : out)
    for (int m = 0; m < num_micro_batches; ++m) stage.push_back({ActionKind::backward, m});
  return out;
}

PipelineProgram one_f_one_b(int num_stages, int num_micro_batches) {
  check_sizes(num_stages, num_micro_batches);
  PipelineProgram out(static_cast<size_t>(num_stages));
  for (int s = 0; s < num_stages; ++s) {
    int warmup = std::min(num_stages - 1 - s, num_micro_batches);
    int next_forward = 0, next_backward = 0;
    auto& program = out[size_t(s)];
    for (; next_forward < warmup; ++next_forward)
      program.push_back({ActionKind::forward, next_forward});
    while (next_backward < num_micro_batches) {
      if (next_forward < num_micro_batches)
        program.push_back({ActionKind::forward, next_forward++});
      program.push_back({ActionKind::backward, next_backward++});
    }
  }
  return out;
}

// Note [Interleaved 1F1B]
// Megatron's order (Narayanan et al., 2021), per device d of p, with v chunks and m
// micro-batches: a device's forwards are numbered k = 0, 1, ...; forward k runs chunk
// (k mod pv) / p of micro-batch (k / pv) p + k mod p, so micro-batches go by groups of p
// through chunk 0, then the same group through chunk 1, and so on; backward k runs the chunks
// in reverse order (chunk v - 1 - (k mod pv) / p) over the same micro-batches. Device d runs
// (p - d - 1) 2 + (v - 1) p warm-up forwards (all of them when that reaches m v), then
// alternates forward warm-up + i and backward i, then drains the backwards. The groups of p
// need m to be a multiple of p. With equal costs f / v and b / v per chunk and no transfer
// time, the step takes (m v + p - 1) (f + b) / v: the bubble (p - 1) (f + b) / v is 1 / v of
// 1F1B's, at the price of more stashed activations (device 0 keeps (p - 1) 2 + (v - 1) p + 1
// chunks' worth, p + (p - 1) / v micro-batches of its layers, instead of p).
PipelineProgram interleaved_one_f_one_b(int num_devices, int num_micro_batches, int num_chunks) {
  check_sizes(num_devices, num_micro_batches);
  LIBAI_CHECK(num_chunks >= 1, "interleaved 1F1B needs at least one model chunk per device, got ",
              num_chunks);
  if (num_chunks == 1) return one_f_one_b(num_devices, num_micro_batches);
  const int p = num_devices, m = num_micro_batches, v = num_chunks;
  LIBAI_CHECK(m % p == 0,
              "interleaved 1F1B runs micro-batches in groups of one per pipeline stage: ", m,
              " micro-batches is not a multiple of the ", p, " pipeline stages (use ",
              (m + p - 1) / p * p, ", or the 1f1b schedule)");
  const int total = m * v;
  auto action = [&](ActionKind kind, int k) {
    int chunk = (k % (p * v)) / p;
    if (kind == ActionKind::backward) chunk = v - 1 - chunk;
    return Action{kind, (k / (p * v)) * p + k % p, 0, chunk};
  };
  PipelineProgram out(static_cast<size_t>(p));
  for (int d = 0; d < p; ++d) {
    auto& program = out[size_t(d)];
    const int warmup = std::min(total, (p - d - 1) * 2 + (v - 1) * p);
    for (int k = 0; k < warmup; ++k) program.push_back(action(ActionKind::forward, k));
    for (int k = 0; k < total - warmup; ++k) {
      program.push_back(action(ActionKind::forward, warmup + k));
      program.push_back(action(ActionKind::backward, k));
    }
    for (int k = total - warmup; k < total; ++k) program.push_back(action(ActionKind::backward, k));
  }
  return out;
}

PipelineProgram decode_program(int num_stages, int num_groups, int num_steps) {
  LIBAI_CHECK(num_stages >= 1, "a pipeline needs at least one stage, got ", num_stages);
  LIBAI_CHECK(num_groups >= 1, "decoding needs at least one group of sequences, got ", num_groups);
  LIBAI_CHECK(num_steps >= 1, "decoding needs at least one step (the prefill), got ", num_steps);
  PipelineProgram out(static_cast<size_t>(num_stages));
  for (auto& stage : out)
    for (int t = 0; t < num_steps; ++t)
      for (int g = 0; g < num_groups; ++g) stage.push_back({ActionKind::forward, g, t});
  return out;
}

int num_chunks(const PipelineProgram& program) {
  int chunks = 1;
  for (const auto& stage : program)
    for (const Action& a : stage) chunks = std::max(chunks, a.chunk + 1);
  return chunks;
}

std::string to_string(const Action& action, bool show_step, bool show_chunk) {
  std::string out(1, action.kind == ActionKind::forward ? 'F' : 'B');
  out += std::to_string(action.micro_batch);
  if (show_step || action.step != 0) {
    out += '.';
    out += std::to_string(action.step);
  }
  if (show_chunk || action.chunk != 0) {
    out += 'c';
    out += std::to_string(action.chunk);
  }
  return out;
}

std::string to_string(const PipelineProgram& program) {
  bool steps = false;
  for (const auto& stage : program)
    for (const Action& a : stage) steps |= a.step != 0;
  const bool chunks = num_chunks(program) > 1;
  std::string out;
  for (size_t s = 0; s < program.size(); ++s) {
    out += chunks ? "device " : "stage ";
    out += std::to_string(s);
    out += ':';
    for (const Action& a : program[s]) {
      out += ' ';
      out += to_string(a, steps, chunks);
    }
    out += "\n";
  }
  return out;
}

std::vector<int> peak_stashed_activations(const PipelineProgram& program) {
  std::vector<int> peak;
  for (const auto& stage : program) {
    int live = 0, best = 0;
    bool has_backward = false;
    for (const Action& a : stage) has_backward |= a.kind == ActionKind::backward;
    for (const Action& a : stage) {
      live += a.kind == ActionKind::forward ? 1 : -1;
      best = std::max(best, live);
    }
    peak.push_back(has_backward ? best : std::min(best, 1));
  }
  return peak;
}

std::vector<double> peak_stashed_bytes(const PipelineProgram& program,
                                       const std::vector<double>& bytes_per_virtual_stage) {
  const int S = int(program.size()), V = S * num_chunks(program);
  LIBAI_CHECK(int(bytes_per_virtual_stage.size()) == V,
              "peak_stashed_bytes: ", bytes_per_virtual_stage.size(), " byte counts for ", V,
              " virtual stages");
  std::vector<double> peak;
  for (int s = 0; s < S; ++s) {
    double live = 0, best = 0, largest = 0;
    bool has_backward = false;
    for (const Action& a : program[size_t(s)]) has_backward |= a.kind == ActionKind::backward;
    for (const Action& a : program[size_t(s)]) {
      const double bytes = bytes_per_virtual_stage[size_t(a.chunk * S + s)];
      largest = std::max(largest, bytes);
      live += a.kind == ActionKind::forward ? bytes : -bytes;
      best = std::max(best, live);
    }
    peak.push_back(has_backward ? best : largest);
  }
  return peak;
}

double ideal_bubble_fraction(int num_stages, int num_micro_batches, int num_chunks) {
  LIBAI_CHECK(num_stages >= 1 && num_micro_batches >= 1 && num_chunks >= 1,
              "ideal_bubble_fraction: stages (", num_stages, "), micro-batches (",
              num_micro_batches, ") and chunks (", num_chunks, ") must be at least 1");
  return double(num_stages - 1) / (double(num_chunks) * num_micro_batches + num_stages - 1);
}

double megatron_bubble_ratio(int num_stages, int num_micro_batches, int num_chunks) {
  LIBAI_CHECK(num_stages >= 1 && num_micro_batches >= 1 && num_chunks >= 1,
              "megatron_bubble_ratio: stages (", num_stages, "), micro-batches (",
              num_micro_batches, ") and chunks (", num_chunks, ") must be at least 1");
  return double(num_stages - 1) / (double(num_chunks) * num_micro_batches);
}

double measured_bubble_fraction(const Timeline& timeline) {
  if (timeline.step_time <= 0 || timeline.busy.empty()) return 0.0;
  double busy = 0;
  for (double b : timeline.busy) busy += b;
  return 1.0 - busy / (double(timeline.busy.size()) * timeline.step_time);
}

namespace detail {

std::string ProgramIndex::where(int virtual_stage) const {
  if (num_chunks == 1) return str_cat("stage ", virtual_stage);
  return str_cat("device ", device_of(virtual_stage), " chunk ", virtual_stage / num_stages);
}

ProgramIndex index_program(const PipelineProgram& program) {
  const int S = int(program.size());
  LIBAI_CHECK(S >= 1, "empty pipeline program");
  auto key = [](const Action& a) {
    return (std::uint64_t(std::uint32_t(a.micro_batch)) << 32) | std::uint32_t(a.step);
  };
  ProgramIndex index;
  index.num_stages = S;
  for (int s = 0; s < S; ++s)
    for (const Action& a : program[size_t(s)]) {
      LIBAI_CHECK(a.micro_batch >= 0 && a.step >= 0, "stage ", s, " runs ", to_string(a),
                  ": micro-batches and steps count from 0");
      LIBAI_CHECK(a.chunk >= 0, "device ", s, " runs ", to_string(a, false, true),
                  ": chunks (virtual stages of a device) count from 0");
      index.num_chunks = std::max(index.num_chunks, a.chunk + 1);
    }
  const bool chunked = index.num_chunks > 1;
  const int V = index.num_virtual();
  auto name = [&](Action a, ActionKind kind, int virtual_stage) {
    a.kind = kind;
    a.chunk = virtual_stage / S;
    return to_string(a, false, chunked);
  };
  std::unordered_map<std::uint64_t, int> item_of;
  for (const Action& a : program[0])
    if (a.kind == ActionKind::forward && a.chunk == 0 &&
        item_of.emplace(key(a), index.num_items()).second)
      index.items.push_back(a);
  const int K = index.num_items();
  index.item_at.resize(size_t(S));
  index.forward_at.assign(size_t(V), std::vector<int>(size_t(K), -1));
  index.backward_at.assign(size_t(V), std::vector<int>(size_t(K), -1));
  for (int s = 0; s < S; ++s) {
    const StageProgram& stage = program[size_t(s)];
    for (size_t i = 0; i < stage.size(); ++i) {
      const Action& a = stage[i];
      const int v = index.virtual_of(s, a);
      auto& forward_at = index.forward_at[size_t(v)];
      auto& backward_at = index.backward_at[size_t(v)];
      auto it = item_of.find(key(a));
      if (a.kind == ActionKind::forward) {
        LIBAI_CHECK(it != item_of.end(), index.where(v),
                    " forwards another set of micro-batches than ", index.where(0), " (",
                    index.where(0), " never runs ", name(a, ActionKind::forward, 0), ")");
        LIBAI_CHECK(forward_at[size_t(it->second)] < 0, index.where(v), " runs ",
                    name(a, a.kind, v), " twice");
        forward_at[size_t(it->second)] = int(i);
      } else {
        LIBAI_CHECK(it != item_of.end() && forward_at[size_t(it->second)] >= 0, index.where(v),
                    " runs ", name(a, a.kind, v), " before its forward");
        LIBAI_CHECK(backward_at[size_t(it->second)] < 0, index.where(v), " runs ",
                    name(a, a.kind, v), " twice");
        backward_at[size_t(it->second)] = int(i);
      }
      index.item_at[size_t(s)].push_back(it->second);
    }
  }
  for (int v = 0; v < V; ++v)
    for (int k = 0; k < K; ++k)
      LIBAI_CHECK(index.forward_at[size_t(v)][size_t(k)] >= 0, index.where(v),
                  " forwards another set of micro-batches than ", index.where(0),
                  " (it never runs ", name(index.items[size_t(k)], ActionKind::forward, v), ")");
  index.has_backward.assign(size_t(K), 0);
  for (int k = 0; k < K; ++k) {
    const bool first = index.backward_at[0][size_t(k)] >= 0;
    index.has_backward[size_t(k)] = first;
    for (int v = 1; v < V; ++v)
      LIBAI_CHECK((index.backward_at[size_t(v)][size_t(k)] >= 0) == first, index.where(v),
                  (first ? " never runs " : " runs "),
                  name(index.items[size_t(k)], ActionKind::backward, v), " but ", index.where(0),
                  (first ? " does" : " does not"),
                  ": every stage runs the backward of the same micro-batches");
  }
  index.previous_step.assign(size_t(K), -1);
  for (int k = 0; k < K; ++k) {
    Action a = index.items[size_t(k)];
    if (a.step == 0) continue;
    Action before = a;
    before.step -= 1;
    auto it = item_of.find(key(before));
    LIBAI_CHECK(it != item_of.end(), "the program runs ", to_string(a), " but no stage runs ",
                to_string(before, true), ": a group's step needs the token of its step before");
    index.previous_step[size_t(k)] = it->second;
  }
  return index;
}

}  // namespace detail

std::vector<int> buffer_quota(const PipelineProgram& program) {
  const detail::ProgramIndex index = detail::index_program(program);
  const int S = index.num_stages, V = index.num_virtual(), K = index.num_items();
  // held[v]: the most inputs virtual stage v holds at once by its device's program order (an
  // input is held from its forward until its backward, or through its forward when it has
  // none).
  std::vector<int> held(size_t(V), 0);
  for (int s = 0; s < S; ++s) {
    std::vector<int> live(size_t(index.num_chunks), 0);
    for (size_t i = 0; i < program[size_t(s)].size(); ++i) {
      const Action& a = program[size_t(s)][i];
      const int v = index.virtual_of(s, a), item = index.item_at[size_t(s)][i];
      int& now = live[size_t(a.chunk)];
      if (a.kind == ActionKind::forward) {
        held[size_t(v)] = std::max(held[size_t(v)], ++now);
        if (!index.has_backward[size_t(item)]) --now;
      } else {
        --now;
      }
    }
  }
  std::vector<int> quota = std::vector<int>(size_t(V));
  quota[0] = std::max(1, held[0]);
  for (int v = 1; v < V; ++v) {
    // One more than the stage holds (the next input arrives while it computes), and no less
    // than its producer may send ahead by its own order: the producer holds an input until
    // its backward, which waits for this stage's backward of the same micro-batch.
    int q = std::max(held[size_t(v) - 1], held[size_t(v)] + 1);
    quota[size_t(v)] = std::max(1, std::min(q, K));
  }
  return quota;
}

std::string render_timeline(const Timeline& timeline, int num_stages, int width) {
  std::vector<std::string> rows(static_cast<size_t>(num_stages),
                                std::string(static_cast<size_t>(width), '.'));
  const double scale = timeline.step_time > 0 ? double(width) / timeline.step_time : 0.0;
  for (const auto& e : timeline.events) {
    int from = std::min(width - 1, int(e.start * scale));
    int to = std::max(from + 1, std::min(width, int(e.end * scale + 0.5)));
    char mark = e.action.kind == ActionKind::forward ? char('0' + e.action.micro_batch % 10)
                                                     : char('a' + e.action.micro_batch % 26);
    for (int c = from; c < to; ++c) rows[size_t(e.stage)][size_t(c)] = mark;
  }
  bool chunks = false;  // an interleaved program: rows are devices
  for (const auto& e : timeline.events) chunks |= e.action.chunk != 0;
  std::string out;
  for (int s = 0; s < num_stages; ++s) {
    char label[64];
    std::snprintf(label, sizeof label, chunks ? "device %d |" : "stage %d |", s);
    const double used = s < int(timeline.utilisation.size()) ? timeline.utilisation[size_t(s)] : 0;
    out += label + rows[size_t(s)] + str_cat("| ", int(used * 100 + 0.5), "% busy\n");
  }
  return out;
}

}  // namespace libai::schedule
