// Training stage actors in one process over synthetic stages: every action runs once, in
// program order, for GPipe, 1F1B and interleaved 1F1B, several steps in a row; credits bound
// each stage's stash; data- and tensor-parallel slots each train their replica; an error in one
// stage ends the job with that stage's name.
#include "tests/actors/test_system.h"
#include "actors/train_pipeline.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "actors/synthetic_train.h"
#include "schedule/train_programs.h"

namespace libai::actors {
namespace {

using testing::System;

// Every slot's trace, in order.
struct Traces {
  std::mutex mutex;
  std::map<int, std::vector<std::string>> events;  // layout slot index -> events
  TraceFn fn(const PipelineLayout& layout) {
    return [this, &layout](const SlotSpec& slot, const std::string& event) {
      std::lock_guard lock(mutex);
      events[layout.index(slot.replica, slot.stage, slot.rank)].push_back(event);
    };
  }
  std::vector<std::string> with_prefix(int slot, const std::string& prefix) {
    std::vector<std::string> out;
    for (const auto& e : events[slot])
      if (e.rfind(prefix, 0) == 0) out.push_back(e);
    return out;
  }
};

TrainComputeFactory synthetic(const TrainPrograms& programs, int pp, double forward, double backward,
                              std::optional<std::pair<int, int>> fail_at = {}, int fail_stage = -1) {
  return [=](const SlotSpec& slot) {
    SyntheticTrainCompute::Options o{.forward_seconds = forward,
                                     .backward_seconds = backward,
                                     .device = slot.stage,
                                     .devices = pp,
                                     .chunks = programs.chunks,
                                     .elements = 4,
                                     .fail_forward_at = {}};
    if (slot.stage == fail_stage) o.fail_forward_at = fail_at;
    return std::make_shared<SyntheticTrainCompute>(o);
  };
}

// Runs `steps` steps of `programs` and checks what every training job must show.
void expect_trains(const TrainPrograms& programs, LayoutSizes sizes, int micro_batches, int steps,
                   Traces* traces_out = nullptr) {
  System sys;
  PipelineLayout layout = make_train_layout(sizes);
  Traces local;
  Traces& traces = traces_out ? *traces_out : local;
  LocalTrainPipeline pipeline(*sys.system, layout, programs,
                              synthetic(programs, sizes.pp, 0.0003, 0.0006), traces.fn(layout));
  for (int k = 0; k < steps; ++k) {
    TrainStepResult r = pipeline.client().run_step(k, std::chrono::seconds(30));
    const int virtual_stages = sizes.pp * programs.chunks;
    // Every replica's micro-batches reached the last virtual stage once (on each tp rank).
    EXPECT_EQ(r.total.loss_count, int64_t(sizes.dp * sizes.tp * micro_batches)) << "step " << k;
    EXPECT_EQ(r.total.loss_sum, double(sizes.dp * sizes.tp * micro_batches * (virtual_stages - 1)));
    EXPECT_EQ(r.total.extra["forwards"], double(layout.slots.size() * size_t(micro_batches * programs.chunks)));
    EXPECT_EQ(r.total.extra["backwards"], r.total.extra["forwards"]);
  }
  auto reports = pipeline.finish(std::chrono::seconds(30));
  EXPECT_EQ(reports.size(), layout.slots.size());
  // Program order, every step: the fires are the program, step after step.
  for (size_t i = 0; i < layout.slots.size(); ++i) {
    std::vector<std::string> expected;
    for (int k = 0; k < steps; ++k)
      for (const auto& a : programs.programs[size_t(layout.slots[i].stage)])
        expected.push_back(str_cat("fire ", train_action_name(a), " s", k));
    EXPECT_EQ(traces.with_prefix(int(i), "fire "), expected) << layout.slots[i].name();
  }
}

TEST(LocalTrainPipeline, OneFOneBRunsEveryActionOnceInProgramOrderOverSteps) {
  expect_trains(train_programs("1f1b", 4, 8), {.dp = 1, .pp = 4, .tp = 1}, 8, 3);
}

TEST(LocalTrainPipeline, GPipeCompletes) {
  expect_trains(train_programs("gpipe", 3, 5), {.dp = 1, .pp = 3, .tp = 1}, 5, 2);
}

TEST(LocalTrainPipeline, InterleavedRoutesChunksAroundTheDevices) {
  expect_trains(train_programs("interleaved", 4, 8, 2), {.dp = 1, .pp = 4, .tp = 1}, 8, 2);
  expect_trains(train_programs("interleaved", 2, 4, 3), {.dp = 1, .pp = 2, .tp = 1}, 4, 2);
}

TEST(LocalTrainPipeline, InterleavedOnOneDeviceSendsToItself) {
  expect_trains(train_programs("interleaved", 1, 3, 2), {.dp = 1, .pp = 1, .tp = 1}, 3, 2);
}

TEST(LocalTrainPipeline, DataAndTensorParallelSlotsEachTrainTheirReplica) {
  expect_trains(train_programs("1f1b", 2, 4), {.dp = 2, .pp = 2, .tp = 1}, 4, 2);
  expect_trains(train_programs("1f1b", 2, 4), {.dp = 2, .pp = 2, .tp = 2}, 4, 1);
}

// The peak of (inputs arrived - input slots freed) of `slot`, from its trace.
int peak_held_inputs(const std::vector<std::string>& events) {
  int held = 0, peak = 0;
  for (const auto& e : events) {
    if (e.rfind("arrive F", 0) == 0) peak = std::max(peak, ++held);
    if (e.rfind("free F", 0) == 0) --held;
  }
  return peak;
}

// The most micro-batches forwarded and not yet backwarded (computed), from the trace.
int peak_stash(const std::vector<std::string>& events) {
  int held = 0, peak = 0;
  for (const auto& e : events) {
    if (e.rfind("computed F", 0) == 0) peak = std::max(peak, ++held);
    if (e.rfind("computed B", 0) == 0) --held;
  }
  return peak;
}

TEST(LocalTrainPipeline, CreditsBoundTheStash) {
  const int p = 4, m = 12;
  for (const std::string schedule : {"1f1b", "gpipe"}) {
    Traces traces;
    const TrainPrograms programs = train_programs(schedule, p, m);
    expect_trains(programs, {.dp = 1, .pp = p, .tp = 1}, m, 1, &traces);
    for (int s = 1; s < p; ++s)
      EXPECT_LE(peak_held_inputs(traces.events[s]), train_input_quota(programs.programs[size_t(s)], 0))
          << schedule << " stage " << s;
    const auto peaks = schedule::peak_stashed_activations(programs.programs);
    for (int s = 0; s < p; ++s) EXPECT_EQ(peak_stash(traces.events[s]), peaks[size_t(s)]) << schedule;
    EXPECT_EQ(peak_stash(traces.events[0]), schedule == "1f1b" ? p : m);
  }
}

// A stage checks what its producer sends against its own input quota: activations beyond the
// credits, or for a chunk the stage does not run, fail it naming them (never a buffer that
// grows without bound).
TEST(TrainStageActor, AProducerBeyondItsCreditsOrChunksFailsTheStage) {
  const TrainPrograms programs = train_programs("1f1b", 2, 4);
  const int quota = train_input_quota(programs.programs[1], 0);
  ASSERT_EQ(quota, 3);
  for (const bool bad_chunk : {false, true}) {
    System sys;
    caf::scoped_actor parent{*sys.system};
    TrainStageSetup setup;
    setup.name = "stage 1";
    setup.slot = 1;
    setup.compute = synthetic(programs, 2, 0.0003, 0.0006)(
        SlotSpec{.replica = 0, .stage = 1, .rank = 0});
    setup.program = programs.programs[1];
    setup.parent = parent;
    const caf::actor stage = spawn_train_stage(*sys.system, setup);
    const int sends = bad_chunk ? 1 : quota + 1;
    for (int m = 0; m < sends; ++m) {
      Packet packet{.group = m, .step = 0, .done = false, .tensors = {{"x", Tensor::zeros({4})}},
                    .gradient = false, .chunk = bad_chunk ? 5 : 0};
      parent->send(stage, packet_atom::value, PacketPtr(std::make_shared<Packet>(packet)));
    }
    std::string failure;
    parent->receive([&](failed_atom, const std::string& what) { failure = what; },
                    caf::after(std::chrono::seconds(30)) >> [] {});
    EXPECT_EQ(failure, bad_chunk
                           ? "stage 1: received F0c5 s0 for chunk 5, which its program does not run"
                           : "stage 1: received F3 s0 beyond its credits: 4 activations of chunk 0 "
                             "held, its quota is 3 input slot(s)");
    caf::anon_send_exit(stage, caf::exit_reason::user_shutdown);
  }
}

TEST(LocalTrainPipeline, AnErrorInOneStageEndsTheJobWithItsName) {
  System sys;
  const TrainPrograms programs = train_programs("1f1b", 4, 6);
  PipelineLayout layout = make_train_layout({.dp = 1, .pp = 4, .tp = 1});
  LocalTrainPipeline pipeline(*sys.system, layout, programs,
                              synthetic(programs, 4, 0.0002, 0.0002, std::pair{1, 3}, 2));
  EXPECT_NO_THROW(pipeline.client().run_step(0, std::chrono::seconds(30)));
  try {
    pipeline.client().run_step(1, std::chrono::seconds(30));
    FAIL() << "step 1 should fail";
  } catch (const CommunicationError& e) {
    EXPECT_NE(std::string(e.what()).find("stage 2: F3 s1: synthetic failure in forward of "
                                         "micro-batch 3 step 1"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(pipeline.finish(std::chrono::seconds(10)), CommunicationError);
}

// A stage that counts its controls and reports what it was asked (Note [Train controls]).
class ControlledCompute : public SyntheticTrainCompute {
 public:
  ControlledCompute(Options o, int slot) : SyntheticTrainCompute(o), slot_(slot) {}
  StepSummary control(const wire::TrainControl& command) override {
    if (command.name == "fail" && slot_ == 1) LIBAI_THROW(CorruptInput, "a bad checkpoint");
    StepSummary s;
    s.loss_count = 1;
    s.extra = {{"slot", double(slot_)}, {"iteration", double(command.iteration)}};
    return s;
  }

 private:
  int slot_;
};

// Controls run between steps on every stage, once each, and their answers reach the client;
// a stage's failure fails the control with its name; the default refuses.
TEST(LocalTrainPipeline, ControlsRunOnEveryStageBetweenSteps) {
  System sys;
  const TrainPrograms programs{schedule::one_f_one_b(2, 4), 1};
  PipelineLayout layout = make_train_layout({.dp = 2, .pp = 2, .tp = 1});
  auto factory = [&](const SlotSpec& slot) -> std::shared_ptr<TrainStageCompute> {
    SyntheticTrainCompute::Options o{.forward_seconds = 0,
                                     .backward_seconds = 0,
                                     .device = slot.stage,
                                     .devices = 2,
                                     .chunks = 1,
                                     .elements = 4,
                                     .fail_forward_at = {}};
    return std::make_shared<ControlledCompute>(o,
                                               layout.index(slot.replica, slot.stage, slot.rank));
  };
  LocalTrainPipeline pipeline(*sys.system, layout, programs, factory);
  pipeline.client().run_step(0, std::chrono::seconds(30));
  const TrainStepResult r = pipeline.client().run_control(
      {.kind = wire::TrainControlKind::save, .name = "model_0000001", .iteration = 1});
  EXPECT_EQ(r.step, TrainClient::kControlStep);
  ASSERT_EQ(r.slots.size(), 4u);
  for (size_t i = 0; i < r.slots.size(); ++i) {
    EXPECT_EQ(r.slots[i].extra.at("slot"), double(i));
    EXPECT_EQ(r.slots[i].extra.at("iteration"), 1.0);
  }
  EXPECT_EQ(r.total.loss_count, 4);
  pipeline.client().run_step(1, std::chrono::seconds(30));  // steps go on after a control
  try {
    pipeline.client().run_control({.kind = wire::TrainControlKind::load, .name = "fail"},
                                  std::chrono::seconds(30));
    ADD_FAILURE() << "a failing control returned";
  } catch (const CommunicationError& e) {
    EXPECT_NE(std::string(e.what()).find("a bad checkpoint"), std::string::npos) << e.what();
  }
  EXPECT_THROW(pipeline.finish(std::chrono::seconds(30)), CommunicationError);
}

TEST(LocalTrainPipeline, StagesWithoutControlsRefuseThem) {
  System sys;
  const TrainPrograms programs{schedule::one_f_one_b(2, 2), 1};
  PipelineLayout layout = make_train_layout({.dp = 1, .pp = 2, .tp = 1});
  LocalTrainPipeline pipeline(*sys.system, layout, programs, synthetic(programs, 2, 0, 0));
  try {
    pipeline.client().run_control({.kind = wire::TrainControlKind::evaluate},
                                  std::chrono::seconds(30));
    ADD_FAILURE() << "a synthetic stage took a control";
  } catch (const CommunicationError& e) {
    EXPECT_NE(std::string(e.what()).find("takes no checkpoint or evaluation controls"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(pipeline.finish(std::chrono::seconds(30)), CommunicationError);
}

TEST(TrainPrograms, BadProgramsAreRefusedNamingTheStage) {
  PipelineLayout layout = make_train_layout({.dp = 1, .pp = 2, .tp = 1});
  TrainPrograms programs = train_programs("1f1b", 2, 3);
  programs.programs[1].pop_back();
  EXPECT_THROW(check_train_programs(layout, programs), InvalidArgument);
  EXPECT_THROW(train_programs("zero-bubble", 2, 4), InvalidArgument);
  EXPECT_THROW(train_programs("interleaved", 4, 6, 2), InvalidArgument);
}

}  // namespace
}  // namespace libai::actors
